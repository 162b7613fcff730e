// StreamingWeights (streaming_weights.h): creation -- the extents, slabs, cache partitions and
// scratch a pack needs -- the plan of the cache budget, resident mode and the counters. The
// block streamer is in streaming_blocks.cc, the two layouts' MLPs in streaming_bundles.cc and
// streaming_columns.cc.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/checked_math.h"
#include "kernels/tiled.h"
#include "model/streaming_internal.h"
#include "model/streaming_weights.h"
#include "storage/unit_id.h"

namespace weir::model {

using namespace streaming_internal;

StreamStats StreamStats::operator-(const StreamStats& o) const {
  StreamStats d;
  d.tokens = tokens - o.tokens;
  d.block_accesses = block_accesses - o.block_accesses;
  d.block_hits = block_hits - o.block_hits;
  d.accessed_bytes = accessed_bytes - o.accessed_bytes;
  d.cache_bytes = cache_bytes - o.cache_bytes;
  d.storage_bytes = storage_bytes - o.storage_bytes;
  d.storage_reads = storage_reads - o.storage_reads;
  d.prefetched_bytes = prefetched_bytes - o.prefetched_bytes;
  d.transient_bytes = transient_bytes - o.transient_bytes;
  d.records_read = records_read - o.records_read;
  d.expert_uses = expert_uses - o.expert_uses;
  d.expert_hits = expert_hits - o.expert_hits;
  d.experts_predicted = experts_predicted - o.experts_predicted;
  d.experts_predicted_used = experts_predicted_used - o.experts_predicted_used;
  d.experts_chosen_predicted = experts_chosen_predicted - o.experts_chosen_predicted;
  d.experts_preloaded = experts_preloaded - o.experts_preloaded;
  d.stall_seconds = stall_seconds - o.stall_seconds;
  d.io_seconds = io_seconds - o.io_seconds;
  return d;
}

Result<std::unique_ptr<StreamingWeights>> StreamingWeights::Create(
    const format::PackFile& pack, storage::BlockDevice* device, const StreamingOptions& options) {
  const std::string& path = pack.path();
  if (device == nullptr) return Status::InvalidArgument("streaming: no device for " + path);
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
  if (device->size() < pack.file_size()) {
    return Status::InvalidArgument(
        StrFormat("streaming: device %s holds %llu bytes, the pack %s has %llu",
                  device->name().c_str(), static_cast<unsigned long long>(device->size()),
                  path.c_str(), static_cast<unsigned long long>(pack.file_size())));
  }
  std::unique_ptr<StreamingWeights> s(new StreamingWeights());
  s->options_ = options;
  s->device_ = device;
  s->d_model_ = pack.config().d_model;
  s->glu_ = pack.config().arch != nullptr &&
                    pack.config().arch->activation == format::Activation::kGeluTanh
                ? kernels::Glu::kGeluTanh
                : kernels::Glu::kSilu;
  s->n_layers_ = pack.config().n_layers;
  s->group_of_.assign(static_cast<size_t>(s->n_layers_), 0);
  // Lanes of about 1 MiB of bundles, whole bundle chunks: a lane is still in L2 when its down
  // pieces are read after its gate/up rows, and the per-lane partial sums stay few (lane sizes
  // measured in docs/performance.md, "Resident speed").
  s->lane_channels_ = options.lane_channels;
  if (s->lane_channels_ == 0) {
    size_t widest = 1;
    for (const format::PackGroup& pg : pack.groups()) widest = std::max(widest, pg.bundle_bytes);
    const int chunk = format::kBundleChunk;
    s->lane_channels_ = std::max(chunk, static_cast<int>((1 << 20) / widest) / chunk * chunk);
  }
  const uint64_t B = options.block_bytes;
  const uint64_t B_in = options.input_block_bytes > 0 ? options.input_block_bytes : B;
  std::vector<storage::SlabPlacement::Slab> slabs;
  int64_t max_rows = 0, max_ff = 0, max_lanes = 0;
  for (const format::PackGroup& pg : pack.groups()) {
    Group g;
    g.pack = pg;
    g.columns = format::IsColumnLayout(pg.layout);
    g.experts = pg.layout == format::PackLayout::kExperts;
    g.sparse = pg.layout == format::PackLayout::kSparseColumns;
    g.n_lanes = g.columns || g.experts ? 0 : (pg.d_ff + s->lane_channels_ - 1) / s->lane_channels_;
    auto add_extent = [&](Extent& e, uint32_t kind, uint64_t offset, uint64_t nbytes,
                          uint64_t block) {
      e.slab = static_cast<uint32_t>(slabs.size());
      e.kind = kind;
      e.partition = s->PartitionOf(pg.index);
      e.offset = offset;
      e.nbytes = nbytes;
      e.block_bytes = block;
      e.n_blocks = (nbytes + block - 1) / block;
      slabs.push_back({nbytes, block});
    };
    // An experts extent's block is one expert (its record, whole pages).
    add_extent(g.extent, kBundleBlockKind, pg.offset, pg.nbytes, g.experts ? pg.expert_stride : B);
    if (g.columns) add_extent(g.in, kInputBlockKind, pg.in_offset, pg.in_nbytes, B_in);
    const int64_t rows = g.experts   ? 0
                         : g.columns ? std::max(pg.in_rows(), pg.down_rows())
                                     : pg.rows();
    if (rows > INT32_MAX) {
      return Status::Unsupported(
          StrFormat("streaming: %s: group %d is too large to stream", path.c_str(), pg.index));
    }
    for (int j = 0; j < pg.n_layers; ++j)
      s->group_of_[static_cast<size_t>(pg.first_layer + j)] = pg.index;
    max_rows = std::max(max_rows, rows);
    max_ff = std::max<int64_t>(max_ff, std::max(pg.d_ff, pg.d_model));
    max_lanes = std::max<int64_t>(max_lanes, g.n_lanes);
    // Staging holds what the next layers need: a layer's chosen experts, not all of them.
    const uint64_t group_need =
        g.experts ? pg.expert_stride * static_cast<uint64_t>(pack.config().n_expert_used)
                  : pg.mlp_bytes();
    s->max_group_bytes_ = std::max(s->max_group_bytes_, group_need);
    s->groups_.push_back(std::move(g));
  }
  if (options.stream_attention) {
    // A layer's attention tensors are consecutive in the pack (q, k, v, output, each
    // page-aligned): one extent from the first byte of q to the last of output.
    for (int l = 0; l < s->n_layers_; ++l) {
      uint64_t begin = UINT64_MAX, end = 0;
      for (const char* t : kAttentionTensors) {
        const format::PackTensor* pt = pack.FindStatic(StrFormat("blk.%d.%s.weight", l, t));
        if (pt == nullptr)
          return Status::Corrupt(StrFormat("%s: layer %d has no %s", path.c_str(), l, t));
        begin = std::min(begin, pt->offset);
        end = std::max(end, pt->offset + pt->nbytes);
      }
      Extent e;
      e.slab = static_cast<uint32_t>(slabs.size());
      e.kind = kAttentionBlockKind;
      e.partition = s->PartitionOf(s->group_of_[static_cast<size_t>(l)]);
      e.offset = begin;
      e.nbytes = end - begin;
      e.block_bytes = B;
      e.n_blocks = (e.nbytes + B - 1) / B;
      slabs.push_back({e.nbytes, B});
      s->max_attention_bytes_ = std::max(s->max_attention_bytes_, e.n_blocks * B);
      s->attention_.push_back(std::move(e));
    }
  }
  for (size_t i = 0; i < slabs.size(); ++i) {
    const uint64_t unit = slabs[i].unit_bytes;
    if (!storage::UnitIdFits(i, kInputBlockKind, (slabs[i].bytes + unit - 1) / unit)) {
      return Status::Unsupported(
          StrFormat("streaming: %s has too many extents or blocks to stream", path.c_str()));
    }
  }
  // Releases are batched up to 16 blocks (at most 1 MiB): enough to merge neighbours, little
  // next to a budget that holds a few lanes of blocks.
  WEIR_ASSIGN_OR_RETURN(s->slabs_,
                        storage::SlabPlacement::Create(slabs, 16 * options.block_bytes));
  for (Group& g : s->groups_) {
    g.extent.base = s->slabs_->base(g.extent.slab);
    if (g.columns) g.in.base = s->slabs_->base(g.in.slab);
    if (!g.sparse) continue;
    // The offset tables of the sparse records, read once (they are part of fixed_bytes).
    auto table = [&](const Extent& e, int64_t rows, int64_t len,
                     std::vector<uint64_t>* out) -> Status {
      const size_t bytes = 8 * (static_cast<size_t>(rows) + 1);
      const size_t capacity = static_cast<size_t>(RoundUp(bytes, kPage));
      AlignedBuffer buf;
      if (!buf.Reset(capacity, kPage))
        return Status::OutOfMemory("streaming: cannot allocate a record offset table");
      const size_t n = storage::RoundedReadLength(*device, e.offset, bytes, buf.data(), capacity);
      WEIR_RETURN_IF_ERROR(device->ReadAt(e.offset, n, buf.data()));
      return format::ReadSparseOffsets(buf.data<uint8_t>(), rows, len, e.nbytes,
                                       StrFormat("%s: group %d", path.c_str(), g.pack.index), out);
    };
    WEIR_RETURN_IF_ERROR(table(g.extent, g.pack.down_rows(), g.pack.d_model, &g.down_offsets));
    WEIR_RETURN_IF_ERROR(table(g.in, g.pack.in_rows(), g.pack.d_ff, &g.in_offsets));
  }
  for (Extent& e : s->attention_) e.base = s->slabs_->base(e.slab);
  for (int l = 0; l < static_cast<int>(s->attention_.size()); ++l) {
    const Extent& e = s->attention_[static_cast<size_t>(l)];
    for (const char* t : kAttentionTensors) {
      const std::string name = StrFormat("blk.%d.%s.weight", l, t);
      s->tensor_address_[name] = e.base + (pack.FindStatic(name)->offset - e.offset);
    }
  }

  // Cache: group partitions and the staging partition, weighted in bytes.
  WEIR_ASSIGN_OR_RETURN(auto policy,
                        storage::MakeEvictionPolicy(options.policy, options.policy_options));
  storage::CacheOptions co;
  co.budget_bytes = options.cache_budget;
  co.alignment = kPage;
  co.record_trace = options.record_trace;
  co.placement = s->slabs_.get();
  // Charges need the policy's per-entry bytes; a throwaway cache computes them.
  WEIR_ASSIGN_OR_RETURN(auto probe_policy,
                        storage::MakeEvictionPolicy(options.policy, options.policy_options));
  WEIR_ASSIGN_OR_RETURN(auto probe, storage::WeightCache::Create(co, std::move(probe_policy)));
  const size_t n_parts = options.partitions == "shared" ? 1 : s->groups_.size();
  s->partition_charge_.assign(n_parts, 0);
  auto charge = [&](Extent& e) {
    for (uint64_t b = 0; b < e.n_blocks; ++b)
      e.charge += probe->EntryCharge(s->BlockRead(e, b).length);
    s->partition_charge_[e.partition] += e.charge;
    s->all_blocks_charge_ += e.charge;
  };
  for (Group& g : s->groups_) {
    charge(g.extent);
    if (g.columns) {
      // A layer's columns are pinned together: the transient reserve and staging hold them.
      charge(g.in);
      const uint64_t in_bytes = s->MaxLayerBlocks(g, true) * g.in.block_bytes;
      const uint64_t down_bytes = s->MaxLayerBlocks(g, false) * g.extent.block_bytes;
      // A group of several layers may be pinned whole in span mode: its records and its down
      // columns at once.
      s->max_lane_bytes_ = std::max(
          s->max_lane_bytes_,
          g.pack.n_layers > 1 ? in_bytes + down_bytes : std::max(in_bytes, down_bytes));
      // A compact span read takes the input share of that reserve: its records are then not
      // pinned through the cache, which pins one layer's columns or one group's W_down at a
      // time (staging is sized by that, below).
      const bool compact = g.pack.n_layers > 1 && !g.sparse && options.compact_span;
      if (compact) s->span_reader_capacity_ = std::max(s->span_reader_capacity_, in_bytes);
      s->max_cache_pin_bytes_ = std::max(
          s->max_cache_pin_bytes_,
          g.pack.n_layers > 1 && !compact ? in_bytes + down_bytes : std::max(in_bytes, down_bytes));
    }
    // One expert at a time is pinned (MoeMlp releases each after its product).
    if (g.experts) s->max_lane_bytes_ = std::max<uint64_t>(s->max_lane_bytes_, g.extent.block_bytes);
    for (int k = 0; k < g.n_lanes; ++k) {
      const int64_t c0 = int64_t{k} * s->lane_channels_;
      const auto [b0, b1] =
          s->BlocksOf(g, c0, std::min<int64_t>(c0 + s->lane_channels_, g.pack.d_ff));
      s->max_lane_bytes_ = std::max<uint64_t>(s->max_lane_bytes_, (b1 - b0 + 1) * B);
    }
  }
  for (Extent& e : s->attention_) charge(e);
  probe.reset();
  s->staging_partition_ = static_cast<uint32_t>(n_parts);
  co.partition_weights = s->PartitionWeights(options.cache_budget);
  WEIR_ASSIGN_OR_RETURN(s->cache_, storage::WeightCache::Create(co, std::move(policy)));
  storage::Prefetcher::Options po;
  // io_batch blocks per device read batch, and at least 8 MiB when blocks are small (column
  // packs: 4 KiB input blocks whose neighbours the I/O thread merges). The limit is in bytes, so
  // that a batch of small blocks keeps as many reads in flight as one of large blocks: with a
  // limit of 64-128 jobs, a grouped column pack's 4 KiB blocks went out 256-512 KiB at a time
  // and its span reads ran at a third of the disk's speed (1.1B, dip span=4).
  po.max_batch_bytes = std::max<uint64_t>(uint64_t{8} << 20, uint64_t{options.io_batch} * B);
  po.max_batch = std::max<size_t>(1, static_cast<size_t>(po.max_batch_bytes / kPage));
  WEIR_ASSIGN_OR_RETURN(s->prefetcher_, storage::Prefetcher::Create(s->cache_.get(), po));
  s->resident_mode_ = s->CheckResidentMode();
  if (!s->groups_.empty() && s->groups_[0].experts) s->MakeExpertReader();

  const size_t f = sizeof(float);
  if (!s->rows_y_.Reset(static_cast<size_t>(max_rows) * f) ||
      !s->rows_x_.Reset(static_cast<size_t>(max_rows) * f) ||
      !s->gate_.Reset(static_cast<size_t>(max_ff) * f) ||
      !s->up_.Reset(static_cast<size_t>(max_ff) * f) ||
      !s->partials_.Reset(static_cast<size_t>(max_lanes) * s->d_model_ * f) ||
      !s->x_tiled_.Reset(kernels::TiledPrepBytes(s->d_model_)) ||
      !s->h_tiled_.Reset(kernels::TiledPrepBytes(max_ff))) {
    return Status::OutOfMemory("streaming: cannot allocate the MLP scratch buffers");
  }
  s->idx_rows_.resize(static_cast<size_t>(2 * max_ff));
  s->idx_down_.resize(static_cast<size_t>(max_ff));
  if (s->columns()) {
    s->idx_up_.resize(static_cast<size_t>(max_ff));
    s->coef_.resize(static_cast<size_t>(max_ff));
    s->sel_in_.Reserve(max_ff);
    s->sel_down_.Reserve(max_ff);
    s->all_units_.Reserve(max_ff);
    uint64_t max_blocks = 0;
    for (const Group& g : s->groups_) max_blocks = std::max({max_blocks, g.in.n_blocks, g.extent.n_blocks});
    s->blocks_.reserve(static_cast<size_t>(max_blocks));
    s->next_blocks_.reserve(static_cast<size_t>(max_blocks));
    s->block_words_.resize(static_cast<size_t>((max_blocks + 63) / 64));
    s->cache_words_.resize(static_cast<size_t>((max_ff + 63) / 64));
  }
  return s;
}

StreamingWeights::~StreamingWeights() {
  if (prefetcher_) prefetcher_->Shutdown();
  expert_reader_.reset();  // its pinned expert goes back to the cache
  attention_batch_ = Batch();
  span_in_ = Batch();
  span_down_ = Batch();
  for (Group& g : groups_) {
    g.extent.pins.clear();
    g.in.pins.clear();
  }
  for (Extent& e : attention_) e.pins.clear();
  prefetcher_.reset();
  cache_.reset();  // before the slabs its entries live in
}

uint64_t StreamingWeights::fixed_bytes() const {
  // Scratch, plus the transient reserve: one lane of blocks (MLP; column layout: one layer's
  // columns of a matrix) or one layer's attention.
  return rows_y_.size() + rows_x_.size() + gate_.size() + up_.size() + partials_.size() +
         x_tiled_.size() + h_tiled_.size() +
         idx_rows_.capacity() * sizeof(int32_t) + idx_down_.capacity() * sizeof(int32_t) +
         idx_up_.capacity() * sizeof(int32_t) + coef_.capacity() * sizeof(float) +
         [this] {
           uint64_t n = 0;
           for (const Group& g : groups_)
             n += (g.in_offsets.capacity() + g.down_offsets.capacity()) * sizeof(uint64_t);
           return n;
         }() +
         (blocks_.capacity() + next_blocks_.capacity()) * sizeof(uint64_t) +
         (block_words_.capacity() + cache_words_.capacity()) * sizeof(uint64_t) +
         3 * static_cast<uint64_t>(sel_in_.capacity()) * sizeof(int32_t) +
         std::max(max_lane_bytes_ + 2 * options_.block_bytes, max_attention_bytes_) +
         // Released cache blocks waiting to be given back in one batch (slab_placement.h).
         (options_.block_bytes < (size_t{2} << 20) ? slabs_->deferred_release_bytes() : 0);
}

uint64_t StreamingWeights::streamed_bytes() const {
  uint64_t n = 0;
  for (const Group& g : groups_) n += g.extent.nbytes + g.in.nbytes;
  for (const Extent& e : attention_) n += e.nbytes;
  return n;
}

const std::byte* StreamingWeights::TensorAddress(const std::string& name) const {
  auto it = tensor_address_.find(name);
  return it == tensor_address_.end() ? nullptr : it->second;
}

std::vector<uint64_t> StreamingWeights::PartitionWeights(uint64_t budget) const {
  // Staging: what prefetches land in. A quarter of the budget, at least two lanes of blocks, at
  // most the layers being read ahead; everything beyond the blocks when the whole model fits.
  // (A column pack's compact span reads do not go through the cache: max_cache_pin_bytes_.)
  const uint64_t pinned = columns() ? max_cache_pin_bytes_ : max_lane_bytes_;
  const uint64_t lo = 2 * std::max(pinned, max_attention_bytes_);
  const uint64_t layer = max_group_bytes_ + max_attention_bytes_;
  const uint64_t hi =
      std::max<uint64_t>(lo, static_cast<uint64_t>(options_.prefetch_layers + 1) * layer);
  uint64_t staging = options_.staging_bytes > 0 ? options_.staging_bytes
                                                : std::clamp<uint64_t>(budget / 4, lo, hi);
  const bool fits = budget >= all_blocks_charge_ && budget - all_blocks_charge_ >= lo;
  if (fits) staging = budget - all_blocks_charge_;
  staging = std::min(staging, budget);
  const uint64_t rest = budget - staging;
  std::vector<uint64_t> weights;
  for (size_t p = 0; p < partition_charge_.size(); ++p) {
    uint64_t w = rest / partition_charge_.size();
    if (fits) {
      w = partition_charge_[p];
    } else if (options_.partitions == "proportional" && all_blocks_charge_ > 0) {
      w = static_cast<uint64_t>(static_cast<unsigned __int128>(rest) * partition_charge_[p] /
                                all_blocks_charge_);
    }
    weights.push_back(w);
  }
  weights.push_back(staging);
  for (uint64_t& w : weights) w = std::max<uint64_t>(1, w);  // every partition needs a weight
  return weights;
}

bool StreamingWeights::CheckResidentMode() const {
  for (size_t p = 0; p < partition_charge_.size(); ++p) {
    if (cache_->partition_stats(static_cast<uint32_t>(p)).budget_bytes < partition_charge_[p])
      return false;
  }
  return true;
}

void StreamingWeights::BeginToken() {
  cache_->BeginToken();
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.tokens;
}

void StreamingWeights::ResetSequence() {
  ReleaseSpan();
  cache_->ResetSequence();
}

Status StreamingWeights::SetCacheBudget(uint64_t bytes) {
  ReleaseSpan();
  // Leaving resident mode: unpin everything so the cache can evict.
  for (Group& g : groups_) {
    for (Extent* e : {&g.extent, &g.in}) {
      e->pins.clear();
      e->held = false;
    }
  }
  predicted_.clear();
  for (Extent& e : attention_) {
    e.pins.clear();
    e.held = false;
  }
  // Reads in flight hold their blocks pinned until they land: wait for them, so that what is
  // pinned when the cache shrinks does not depend on the I/O thread's timing.
  prefetcher_->CancelAll();
  prefetcher_->WaitIdle();
  WEIR_RETURN_IF_ERROR(cache_->SetBudget(bytes, PartitionWeights(bytes)));
  options_.cache_budget = bytes;
  resident_mode_ = CheckResidentMode();
  return Status::Ok();
}

StreamingWeights::LayerBlocks StreamingWeights::layer_blocks(int layer) const {
  WEIR_CHECK(layer >= 0 && layer < n_layers_);
  LayerBlocks b;
  const Group& group = groups_[static_cast<size_t>(group_of_[static_cast<size_t>(layer)])];
  const Extent& g = group.extent;
  b.bundle_slab = g.slab;
  b.bundle_blocks = static_cast<uint32_t>(g.n_blocks);
  if (group.columns) {
    b.input_slab = group.in.slab;
    b.input_blocks = static_cast<uint32_t>(group.in.n_blocks);
  }
  if (!attention_.empty()) {
    const Extent& a = attention_[static_cast<size_t>(layer)];
    b.attention_slab = a.slab;
    b.attention_blocks = static_cast<uint32_t>(a.n_blocks);
  }
  return b;
}

StreamStats StreamingWeights::stats() const {
  StreamStats s;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    s = stats_;
    if (span_reader_ != nullptr) {  // created under this lock
      const storage::RecordReader::Stats r = span_reader_->stats();
      s.storage_bytes += r.bytes_read;
      s.storage_reads += r.reads;
      s.io_seconds += r.seconds;
      s.records_read += r.records;
    }
  }
  const storage::CacheStats c = cache_->stats();
  const storage::Prefetcher::Stats p = prefetcher_->stats();
  s.block_hits += c.hits;
  s.cache_bytes += c.hit_bytes;
  s.storage_bytes += p.bytes_read;
  s.storage_reads += p.reads;
  s.prefetched_bytes += p.bytes_prefetched;
  s.io_seconds += p.read_seconds;
  return s;
}

}  // namespace weir::model
