// StreamPlan (streaming_plan.h): the extents, groups and cache partitions of a pack, and the
// geometry of its groups' bundles and columns.
#include "model/streaming_plan.h"

#include <algorithm>

#include "kernels/tiled.h"
#include "model/streaming_internal.h"
#include "storage/unit_id.h"
#include "tensor/tensor_view.h"

namespace weir::model {

using namespace streaming_internal;
using format::ColumnOp;

namespace {

// Blocks of e the columns of one layer can need at most (the transient reserve).
uint64_t MaxLayerBlocks(const StreamPlan::Group& g, bool input) {
  uint64_t most = 0;
  std::vector<uint64_t> blocks;
  for (int j = 0; j < g.pack.n_layers; ++j) {
    blocks.clear();
    const int64_t n = input ? g.pack.d_model : g.pack.d_ff;
    for (int64_t k = 0; k < n; ++k) {
      const auto [b, e] = input ? InputColumn(g, k, j) : DownColumn(g, k, j);
      AddBlocks(input ? g.in : g.extent, b, e, &blocks);
    }
    SortBlocks(&blocks);
    most = std::max<uint64_t>(most, blocks.size());
  }
  return most;
}

// A layer's attention tensors are consecutive in the pack (q, k, v, output, each page-aligned):
// the byte range from the first byte of q to the last of output. Corrupt when one is missing.
Result<std::pair<uint64_t, uint64_t>> AttentionRange(const format::PackFile& pack, int layer) {
  uint64_t begin = UINT64_MAX, end = 0;
  for (const char* t : kAttentionTensors) {
    const format::PackTensor* pt = pack.FindStatic(StrFormat("blk.%d.%s.weight", layer, t));
    if (pt == nullptr) {
      return Status::Corrupt(
          StrFormat("%s: layer %d has no %s", pack.path().c_str(), layer, t));
    }
    begin = std::min(begin, pt->offset);
    end = std::max(end, pt->offset + pt->nbytes);
  }
  return std::make_pair(begin, end);
}

}  // namespace

std::optional<SpanAhead> ParseSpanAhead(const std::string& name) {
  if (name == "off") return SpanAhead::kOff;
  if (name == "token") return SpanAhead::kToken;
  if (name == "layer") return SpanAhead::kLayer;
  if (name == "both") return SpanAhead::kBoth;
  return std::nullopt;
}

Result<StreamPlan> StreamPlan::Build(const format::PackFile& pack, const StreamingOptions& options,
                                     const EntryCharge& entry_charge,
                                     std::vector<RecordTables> tables) {
  const std::string& path = pack.path();
  if (options.block_bytes == 0 || options.block_bytes % kPage != 0) {
    return Status::InvalidArgument(StrFormat(
        "streaming: block size %zu is not a positive multiple of 4096", options.block_bytes));
  }
  if (options.input_block_bytes % kPage != 0) {
    return Status::InvalidArgument(
        StrFormat("streaming: input-column block size %zu is not a multiple of 4096",
                  options.input_block_bytes));
  }
  if (options.lane_channels < 0 || options.lane_channels % format::kBundleChunk != 0) {
    return Status::InvalidArgument(
        StrFormat("streaming: lane size %d is not a positive multiple of %d (a bundle chunk)",
                  options.lane_channels, format::kBundleChunk));
  }
  if (options.prefetch_layers < -1) {
    return Status::InvalidArgument(
        StrFormat("streaming: prefetch of %d layers", options.prefetch_layers));
  }
  if (options.partitions != "uniform" && options.partitions != "proportional" &&
      options.partitions != "shared") {
    return Status::InvalidArgument("streaming: cache partitions '" + options.partitions +
                                   "' (known: uniform, proportional, shared)");
  }
  StreamPlan p;
  p.options = options;
  p.d_model = pack.config().d_model;
  p.n_layers = pack.config().n_layers;
  p.group_of.assign(static_cast<size_t>(p.n_layers), 0);
  // Lanes of about 1 MiB of bundles, whole bundle chunks: a lane is still in L2 when its down
  // pieces are read after its gate/up rows, and the per-lane partial sums stay few (lane sizes
  // measured in docs/performance.md, "Resident speed").
  p.lane_channels = options.lane_channels;
  if (p.lane_channels == 0) {
    size_t widest = 1;
    for (const format::PackGroup& pg : pack.groups()) widest = std::max(widest, pg.bundle_bytes);
    const int chunk = format::kBundleChunk;
    p.lane_channels = std::max(chunk, static_cast<int>((1 << 20) / widest) / chunk * chunk);
  }
  const uint64_t B = options.block_bytes;
  const uint64_t B_in = options.input_block_bytes > 0 ? options.input_block_bytes : B;
  std::vector<storage::SlabPlacement::Slab>& slabs = p.slabs;
  for (const format::PackGroup& pg : pack.groups()) {
    Group g;
    g.pack = pg;
    g.columns = format::IsColumnLayout(pg.layout);
    g.experts = pg.layout == format::PackLayout::kExperts;
    g.sparse = pg.layout == format::PackLayout::kSparseColumns;
    g.n_lanes = g.columns || g.experts ? 0 : (pg.d_ff + p.lane_channels - 1) / p.lane_channels;
    auto add_extent = [&](Extent& e, uint32_t kind, uint64_t offset, uint64_t nbytes,
                          uint64_t block) {
      e.slab = static_cast<uint32_t>(slabs.size());
      e.kind = kind;
      e.partition = p.PartitionOf(pg.index);
      e.offset = offset;
      e.nbytes = nbytes;
      e.block_bytes = block;
      e.n_blocks = (nbytes + block - 1) / block;
      e.place_bytes = block;
      if (g.experts && kind == kBundleBlockKind && options.huge_expert_places_from > 0 &&
          block >= options.huge_expert_places_from) {
        e.place_bytes = RoundUp(block, AnonRegion::kHugePage);
      }
      // The slab's payload ends where the extent does (its last block may be short).
      slabs.push_back({e.place_bytes == block ? nbytes : e.n_blocks * e.place_bytes,
                       static_cast<size_t>(e.place_bytes), block});
    };
    // An experts extent's block is one expert (its record, whole pages).
    add_extent(g.extent, kBundleBlockKind, pg.offset, pg.nbytes, g.experts ? pg.expert_stride : B);
    if (g.columns) add_extent(g.in, kInputBlockKind, pg.in_offset, pg.in_nbytes, B_in);
    if (g.experts && pg.expert_columns) {
      // The W_down copies: a slab of n_expert places of whole pages, no file range.
      g.down_bytes = TensorView{pg.expert_type[2], Shape{pg.d_model, pg.d_ff}, nullptr}.nbytes();
      const uint64_t unit = RoundUp(std::max<uint64_t>(g.down_bytes, 1), kPage);
      add_extent(g.down_copy, kDownCopyKind, 0, unit * static_cast<uint64_t>(pg.n_expert), unit);
    }
    const int64_t rows = g.experts   ? 0
                         : g.columns ? std::max(pg.in_rows(), pg.down_rows())
                                     : pg.rows();
    if (rows > INT32_MAX) {
      return Status::Unsupported(
          StrFormat("streaming: %s: group %d is too large to stream", path.c_str(), pg.index));
    }
    for (int j = 0; j < pg.n_layers; ++j)
      p.group_of[static_cast<size_t>(pg.first_layer + j)] = pg.index;
    p.max_rows = std::max(p.max_rows, rows);
    p.max_ff = std::max<int64_t>(p.max_ff, std::max(pg.d_ff, pg.d_model));
    p.max_lanes = std::max<int64_t>(p.max_lanes, g.n_lanes);
    p.max_group_layers = std::max(p.max_group_layers, pg.n_layers);
    if (g.sparse) {
      const size_t i = p.groups.size();
      if (i >= tables.size() || tables[i].in.empty() || tables[i].down.empty()) {
        return Status::InvalidArgument(StrFormat(
            "streaming: %s: group %zu has sparse columns but no record tables", path.c_str(), i));
      }
      g.in_offsets = std::move(tables[i].in);
      g.down_offsets = std::move(tables[i].down);
    }
    p.groups.push_back(std::move(g));
  }
  if (options.stream_attention) {
    // A layer's attention tensors are consecutive in the pack (q, k, v, output, each
    // page-aligned): one extent from the first byte of q to the last of output.
    for (int l = 0; l < p.n_layers; ++l) {
      WEIR_ASSIGN_OR_RETURN(const auto range, AttentionRange(pack, l));
      const auto [begin, end] = range;
      Extent e;
      e.slab = static_cast<uint32_t>(slabs.size());
      e.kind = kAttentionBlockKind;
      e.partition = p.PartitionOf(p.group_of[static_cast<size_t>(l)]);
      e.offset = begin;
      e.nbytes = end - begin;
      e.block_bytes = B;
      e.place_bytes = B;
      e.n_blocks = (e.nbytes + B - 1) / B;
      slabs.push_back({e.nbytes, B});
      p.max_attention_bytes = std::max(p.max_attention_bytes, e.n_blocks * B);
      for (const char* t : kAttentionTensors) {
        const std::string name = StrFormat("blk.%d.%s.weight", l, t);
        p.tensor_offsets[name] = {l, pack.FindStatic(name)->offset - e.offset};
      }
      p.attention.push_back(std::move(e));
    }
  }
  if (options.stream_attention && options.stream_embedding &&
      pack.FindStatic("output.weight") != nullptr) {
    // The output head is a tensor of its own, so the table is read only a row at a time.
    const format::PackTensor* t = pack.FindStatic("token_embd.weight");
    if (t != nullptr && t->layout == Layout::kRowMajor && t->shape.ndim == 2) {
      const TensorView v{t->dtype, t->shape, nullptr};
      if (v.nbytes() == t->nbytes) {
        p.embedding_offset = t->offset;
        p.embedding_rows = v.rows();
        p.embedding_row_bytes = v.row_bytes();
      }
    }
  }
  for (size_t i = 0; i < slabs.size(); ++i) {
    const uint64_t unit = slabs[i].unit_bytes;
    if (!storage::UnitIdFits(i, kDownCopyKind, (slabs[i].bytes + unit - 1) / unit)) {
      return Status::Unsupported(
          StrFormat("streaming: %s has too many extents or blocks to stream", path.c_str()));
    }
  }
  // Releases are batched up to 16 blocks (at most 1 MiB): enough to merge neighbours, little
  // next to a budget that holds a few lanes of blocks.
  p.deferred_release_bytes = 16 * options.block_bytes;

  // Charges: what the cache is charged for each block (the policy's per-entry bytes included).
  const size_t n_parts = options.partitions == "shared" ? 1 : p.groups.size();
  p.partition_charge.assign(n_parts, 0);
  // A block in a slab of huge pages takes whole ones up to its last (SlabPlacement::FootprintIn):
  // the cache charges it that much.
  auto BlockCharge = [&](const Extent& e, uint64_t len, uint64_t b = 0) {
    return entry_charge(storage::SlabPlacement::FootprintIn(slabs[e.slab], b, len));
  };
  auto charge = [&](Extent& e) {
    for (uint64_t b = 0; b < e.n_blocks; ++b)
      e.charge +=
          BlockCharge(e, std::min<uint64_t>(e.block_bytes, e.nbytes - b * e.block_bytes), b);
    p.partition_charge[e.partition] += e.charge;
    p.all_blocks_charge += e.charge;
  };
  for (Group& g : p.groups) {
    charge(g.extent);
    // Staging holds what the next layers need: a layer's chosen experts, not all of them.
    const uint64_t n_used = static_cast<uint64_t>(pack.config().n_expert_used);
    p.max_group_charge =
        std::max(p.max_group_charge,
                 g.experts ? BlockCharge(g.extent, g.extent.block_bytes) * n_used : g.extent.charge);
    if (g.columns) {
      // A layer's columns are pinned together: the transient reserve and staging hold them.
      charge(g.in);
      p.max_group_charge = std::max(p.max_group_charge, g.extent.charge + g.in.charge);
      const uint64_t in_bytes = MaxLayerBlocks(g, true) * g.in.block_bytes;
      const uint64_t down_bytes = MaxLayerBlocks(g, false) * g.extent.block_bytes;
      // A group of several layers may be pinned whole in span mode: its records and its down
      // columns at once.
      p.max_lane_bytes =
          std::max(p.max_lane_bytes,
                   g.pack.n_layers > 1 ? in_bytes + down_bytes : std::max(in_bytes, down_bytes));
      // A compact span read takes the input share of that reserve: its records are then not
      // pinned through the cache, which pins one layer's columns or one group's W_down at a
      // time (staging is sized by that).
      const bool compact = g.pack.n_layers > 1 && !g.sparse && options.compact_span;
      if (compact) {
        p.record_buffer_bytes = std::max(p.record_buffer_bytes, in_bytes);
        // What the cache must pin at once in span mode (a group's W_down, or outside span mode
        // one layer's input columns), as it charges it.
        const uint64_t pin =
            std::max(MaxLayerBlocks(g, true) * BlockCharge(g.in, g.in.block_bytes),
                     MaxLayerBlocks(g, false) * BlockCharge(g.extent, g.extent.block_bytes));
        p.span_pin_floor_bytes = std::max(p.span_pin_floor_bytes, pin);
      }
      // A read-ahead of the next group's records needs a second buffer as large, beyond the
      // reserve (storage/record_buffers.h); the two swap roles, so both are the largest group's.
      if (compact && options.span_read_ahead != SpanAhead::kOff && options.prefetch_layers >= 0)
        p.record_ahead_bytes = std::max(p.record_ahead_bytes, in_bytes);
      const uint64_t in_charge = MaxLayerBlocks(g, true) * BlockCharge(g.in, g.in.block_bytes);
      const uint64_t down_charge = MaxLayerBlocks(g, false) * BlockCharge(g.extent, g.extent.block_bytes);
      p.max_pin_charge = std::max(p.max_pin_charge, g.pack.n_layers > 1 && !compact
                                                        ? in_charge + down_charge
                                                        : std::max(in_charge, down_charge));
      p.max_blocks = std::max({p.max_blocks, g.in.n_blocks, g.extent.n_blocks});
    }
    // One expert at a time is pinned (MoeMlp releases each after its product).
    if (g.experts) {
      p.max_lane_bytes = std::max<uint64_t>(
          p.max_lane_bytes,
          storage::SlabPlacement::FootprintIn(slabs[g.extent.slab], 0, g.extent.block_bytes));
      p.max_pin_charge = std::max(p.max_pin_charge, BlockCharge(g.extent, g.extent.block_bytes));
    }
    // Channel records (sparsity inside streamed experts): an expert's kept records and W_down
    // are read into the record buffer, which takes that reserve (the expert is then not pinned
    // through the cache); each run widened to pages adds at most a page at either end.
    if (g.experts && g.pack.expert_columns) {
      p.record_buffer_bytes =
          std::max<uint64_t>(p.record_buffer_bytes, g.pack.expert_stride + 2 * kPage);
    }
    for (int k = 0; k < g.n_lanes; ++k) {
      const int64_t c0 = int64_t{k} * p.lane_channels;
      const auto [b0, b1] = BlocksOf(g, c0, std::min<int64_t>(c0 + p.lane_channels, g.pack.d_ff));
      p.max_lane_bytes = std::max<uint64_t>(p.max_lane_bytes, (b1 - b0 + 1) * B);
      p.max_pin_charge = std::max(p.max_pin_charge, (b1 - b0 + 1) * entry_charge(B));
    }
  }
  for (Extent& e : p.attention) {
    charge(e);
    p.max_attention_charge = std::max(p.max_attention_charge, e.charge);
  }
  p.staging_partition = static_cast<uint32_t>(n_parts);
  // Span mode's reserve loan: everything of the reserve but the record buffer, when the plan
  // has span groups (and no experts, whose record buffer is sized otherwise).
  if (p.span_pin_floor_bytes > 0 && !p.experts() && p.reserve_bytes() > p.record_buffer_bytes) {
    p.span_lendable_bytes = p.reserve_bytes() - p.record_buffer_bytes;
    p.span_pin_floor_bytes += p.max_attention_charge + 2 * entry_charge(options.block_bytes);
  } else {
    p.span_pin_floor_bytes = 0;
  }

  // The MLP scratch for the largest group: row outputs, gate/up/h, lane partial sums, tiled
  // records, row indices, and for columns the up rows, coefficients, block lists, masks and
  // selections. It is what one class computing every layout allocated before the layouts were
  // split (streaming_bundles.cc and streaming_columns.cc each allocate a part of it), so the
  // memory plan, the cache's share and with it the reads are those measured before.
  const uint64_t f = sizeof(float), i32 = sizeof(int32_t), u64 = sizeof(uint64_t);
  const uint64_t ff = static_cast<uint64_t>(p.max_ff);
  p.scratch_bytes = 2 * static_cast<uint64_t>(p.max_rows) * f + 2 * ff * f +
                    static_cast<uint64_t>(p.max_lanes) * static_cast<uint64_t>(p.d_model) * f +
                    kernels::TiledPrepBytes(p.d_model) + kernels::TiledPrepBytes(p.max_ff) +
                    3 * ff * i32;
  p.scratch_bytes += kEmbeddingBatchRows * p.embedding_row_bytes;  // streamed embedding rows
  if (p.columns()) {
    p.scratch_bytes += ff * i32 + ff * f + 2 * p.max_blocks * u64 +
                       ((p.max_blocks + 63) / 64 + (ff + 63) / 64) * u64 + 3 * ff * i32;
  }
  return p;
}

uint64_t StreamPlan::fixed_bytes() const {
  uint64_t tables = 0;
  for (const Group& g : groups)
    tables += (g.in_offsets.capacity() + g.down_offsets.capacity()) * sizeof(uint64_t);
  return scratch_bytes + tables + reserve_bytes() +
         // Released cache blocks waiting to be given back in one batch (slab_placement.h).
         (options.block_bytes < (size_t{2} << 20) ? deferred_release_bytes : 0);
}

bool StreamPlan::SpanRecordsFit(int64_t kept) const {
  if (record_buffer_bytes == 0 || kept < 0) return false;
  for (const Group& g : groups) {
    if (!g.columns || g.sparse || g.pack.n_layers <= 1) continue;
    const uint64_t record = static_cast<uint64_t>(g.pack.n_layers) * 2 * g.pack.in_row_bytes;
    const uint64_t per_record = ((record + kPage - 1) / kPage + 1) * kPage;
    const uint64_t need =
        std::min(static_cast<uint64_t>(kept) * per_record,
                 RoundUp(g.in.nbytes, kPage) + (g.in.offset % kPage == 0 ? 0 : kPage));
    if (need > record_buffer_bytes) return false;
  }
  return true;
}

uint64_t StreamPlan::reserve_bytes() const {
  // Experts with channel records: the record buffer stays once made, so a layer's attention
  // read transiently (when the cache cannot pin it) needs its own room beside it.
  const uint64_t records_and_attention =
      experts() && groups[0].pack.expert_columns ? record_buffer_bytes + max_attention_bytes : 0;
  return std::max(
      {max_lane_bytes + 2 * options.block_bytes, max_attention_bytes, records_and_attention});
}

uint64_t StreamPlan::streamed_bytes() const {
  uint64_t n = 0;
  for (const Group& g : groups) n += g.extent.nbytes + g.in.nbytes;
  for (const Extent& e : attention) n += e.nbytes;
  return n;
}

std::vector<uint64_t> StreamPlan::PartitionWeights(uint64_t budget, bool expert_records) const {
  // Staging: what prefetches land in. A quarter of the budget, at least two lanes of blocks, at
  // most the layers being read ahead; everything beyond the blocks when the whole model fits.
  // All as the cache charges them (a column pack's compact span reads do not go through it).
  const uint64_t lo = 2 * std::max(max_pin_charge, max_attention_charge);
  const uint64_t layer = max_group_charge + max_attention_charge;
  const uint64_t hi =
      std::max<uint64_t>(lo, static_cast<uint64_t>(options.prefetch_layers + 1) * layer);
  uint64_t staging =
      options.staging_bytes > 0 ? options.staging_bytes : std::clamp<uint64_t>(budget / 4, lo, hi);
  const bool fits = budget >= all_blocks_charge && budget - all_blocks_charge >= lo;
  if (expert_records && this->expert_records() && options.staging_bytes == 0) {
    // No expert is staged: two layers' attention at least (what their blocks are charged), the
    // layers read ahead at most; the group partitions keep the rest for attention and the
    // W_down copies.
    const uint64_t att = max_attention_charge;
    const uint64_t att_lo = 2 * att;
    const uint64_t att_hi =
        std::max<uint64_t>(att_lo, static_cast<uint64_t>(options.prefetch_layers + 1) * att);
    staging = std::clamp<uint64_t>(budget / 4, att_lo, att_hi);
  }
  if (fits) staging = budget - all_blocks_charge;
  staging = std::min(staging, budget);
  const uint64_t rest = budget - staging;
  std::vector<uint64_t> weights;
  for (size_t p = 0; p < partition_charge.size(); ++p) {
    uint64_t w = rest / partition_charge.size();
    if (fits) {
      w = partition_charge[p];
    } else if (options.partitions == "proportional" && all_blocks_charge > 0) {
      w = static_cast<uint64_t>(static_cast<unsigned __int128>(rest) * partition_charge[p] /
                                all_blocks_charge);
    }
    weights.push_back(w);
  }
  weights.push_back(staging);
  for (uint64_t& w : weights) w = std::max<uint64_t>(1, w);  // every partition needs a weight
  return weights;
}

StreamPlan::LayerBlocks StreamPlan::layer_blocks(int layer) const {
  WEIR_CHECK(layer >= 0 && layer < n_layers);
  LayerBlocks b;
  const Group& group = group_of_layer(layer);
  const Extent& g = group.extent;
  b.bundle_slab = g.slab;
  b.bundle_blocks = static_cast<uint32_t>(g.n_blocks);
  if (group.columns) {
    b.input_slab = group.in.slab;
    b.input_blocks = static_cast<uint32_t>(group.in.n_blocks);
  }
  if (!attention.empty()) {
    const Extent& a = attention[static_cast<size_t>(layer)];
    b.attention_slab = a.slab;
    b.attention_blocks = static_cast<uint32_t>(a.n_blocks);
  }
  return b;
}

DefaultBlocks DefaultBlockSizes(const format::PackFile& pack, bool stream_attention,
                                const storage::StorageProfile* profile) {
  constexpr size_t kLarge = size_t{2} << 20, kSmall = size_t{64} << 10;
  DefaultBlocks d;
  d.block_bytes = kLarge;
  if (!format::IsColumnLayout(pack.layout())) return d;
  d.input_block_bytes = pack.group_size() > 1 ? size_t{4} << 10 : kSmall;
  if (profile != nullptr &&
      storage::ModelThroughput(*profile, kSmall, profile->queue_depth) >=
          0.9 * storage::ModelThroughput(*profile, kLarge, profile->queue_depth)) {
    d.block_bytes = kSmall;  // a flat device: large reads gain nothing
    return d;
  }
  // The smallest extent read whole: a group's down columns, a layer's attention.
  uint64_t smallest = UINT64_MAX;
  for (const format::PackGroup& pg : pack.groups()) smallest = std::min(smallest, pg.nbytes);
  if (stream_attention) {
    for (int l = 0; l < pack.config().n_layers; ++l) {
      // A pack without them is refused by StreamPlan::Build, with this error.
      const Result<std::pair<uint64_t, uint64_t>> range = AttentionRange(pack, l);
      if (range.ok()) smallest = std::min(smallest, range->second - range->first);
    }
  }
  if (smallest < 2 * kLarge) d.block_bytes = kSmall;
  return d;
}

std::pair<uint64_t, uint64_t> BlocksOf(const StreamPlan::Group& g, int64_t c0, int64_t c1) {
  const uint64_t b = g.pack.bundle_bytes;
  const uint64_t B = g.extent.block_bytes;
  return {static_cast<uint64_t>(c0) * b / B, (static_cast<uint64_t>(c1) * b - 1) / B};
}

std::pair<uint64_t, uint64_t> InputColumn(const StreamPlan::Group& g, int64_t i, int j) {
  // gate^T and up^T rows of channel i for layer j are adjacent.
  const int64_t r = g.pack.InRow(i, j, ColumnOp::kGateT);
  if (g.sparse) {
    return {g.in_offsets[static_cast<size_t>(r)], g.in_offsets[static_cast<size_t>(r) + 2]};
  }
  const uint64_t begin = static_cast<uint64_t>(r) * g.pack.in_row_bytes;
  return {begin, begin + 2 * g.pack.in_row_bytes};
}

std::pair<uint64_t, uint64_t> DownColumn(const StreamPlan::Group& g, int64_t c, int j) {
  const int64_t r = g.pack.DownRow(c, j);
  if (g.sparse) {
    return {g.down_offsets[static_cast<size_t>(r)], g.down_offsets[static_cast<size_t>(r) + 1]};
  }
  const uint64_t begin = static_cast<uint64_t>(r) * g.pack.row_bytes;
  return {begin, begin + g.pack.row_bytes};
}

void AddBlocks(const StreamPlan::Extent& x, uint64_t begin, uint64_t end,
               std::vector<uint64_t>* blocks) {
  const uint64_t B = x.block_bytes;
  uint64_t b0 = begin / B;
  const uint64_t b1 = (end - 1) / B;
  if (!blocks->empty() && blocks->back() >= b0 && blocks->back() <= b1) b0 = blocks->back() + 1;
  for (uint64_t b = b0; b <= b1; ++b) blocks->push_back(b);
}

void SortBlocks(std::vector<uint64_t>* blocks) {
  if (std::is_sorted(blocks->begin(), blocks->end(),
                     [](uint64_t a, uint64_t b) { return a <= b; })) {
    return;
  }
  std::sort(blocks->begin(), blocks->end());
  blocks->erase(std::unique(blocks->begin(), blocks->end()), blocks->end());
}

}  // namespace weir::model
