#include "model/streaming_weights.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/checked_math.h"
#include "kernels/chunked_matvec.h"
#include "kernels/gather.h"
#include "kernels/ops.h"
#include "kernels/sparse_column.h"
#include "kernels/tiled.h"
#include "storage/unit_id.h"

namespace weir::model {

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Unit kinds (storage/unit_id.h; the layer field is the extent's slab).
constexpr uint32_t kBundleBlockKind = 1;
constexpr uint32_t kAttentionBlockKind = 2;
constexpr uint32_t kInputBlockKind = 3;  // column layout: the input columns
constexpr uint64_t kPage = 4096;

uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

const char* const kAttentionTensors[] = {"attn_q", "attn_k", "attn_v", "attn_output"};

}  // namespace

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
  std::vector<storage::SlabPlacement::Slab> slabs;
  int64_t max_rows = 0, max_ff = 0, max_lanes = 0;
  for (const format::PackGroup& pg : pack.groups()) {
    Group g;
    g.pack = pg;
    g.columns = format::IsColumnLayout(pg.layout);
    g.sparse = pg.layout == format::PackLayout::kSparseColumns;
    g.n_lanes = g.columns ? 0 : (pg.d_ff + s->lane_channels_ - 1) / s->lane_channels_;
    auto add_extent = [&](Extent& e, uint32_t kind, uint64_t offset, uint64_t nbytes) {
      e.slab = static_cast<uint32_t>(slabs.size());
      e.kind = kind;
      e.partition = s->PartitionOf(pg.index);
      e.offset = offset;
      e.nbytes = nbytes;
      e.n_blocks = (nbytes + B - 1) / B;
      slabs.push_back({nbytes, B});
    };
    add_extent(g.extent, kBundleBlockKind, pg.offset, pg.nbytes);
    if (g.columns) add_extent(g.in, kInputBlockKind, pg.in_offset, pg.in_nbytes);
    const int64_t rows = g.columns ? std::max(pg.in_rows(), pg.down_rows()) : pg.rows();
    if (rows > INT32_MAX) {
      return Status::Unsupported(
          StrFormat("streaming: %s: group %d is too large to stream", path.c_str(), pg.index));
    }
    for (int j = 0; j < pg.n_layers; ++j)
      s->group_of_[static_cast<size_t>(pg.first_layer + j)] = pg.index;
    max_rows = std::max(max_rows, rows);
    max_ff = std::max<int64_t>(max_ff, std::max(pg.d_ff, pg.d_model));
    max_lanes = std::max<int64_t>(max_lanes, g.n_lanes);
    s->max_group_bytes_ = std::max(s->max_group_bytes_, pg.mlp_bytes());
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
      e.n_blocks = (e.nbytes + B - 1) / B;
      slabs.push_back({e.nbytes, B});
      s->max_attention_bytes_ = std::max(s->max_attention_bytes_, e.n_blocks * B);
      s->attention_.push_back(std::move(e));
    }
  }
  for (size_t i = 0; i < slabs.size(); ++i) {
    if (!storage::UnitIdFits(i, kInputBlockKind, (slabs[i].bytes + B - 1) / B)) {
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
      s->max_lane_bytes_ = std::max(
          s->max_lane_bytes_, std::max(s->MaxLayerBlocks(g, true), s->MaxLayerBlocks(g, false)) * B);
    }
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
  // At least 8 MiB per device read when blocks are small (column packs: 4 KiB blocks whose
  // neighbours the I/O thread merges).
  po.max_batch = std::max<size_t>({1, options.io_batch, (size_t{8} << 20) / options.block_bytes});
  WEIR_ASSIGN_OR_RETURN(s->prefetcher_, storage::Prefetcher::Create(s->cache_.get(), po));
  s->resident_mode_ = s->CheckResidentMode();

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
  attention_batch_ = Batch();
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
  const uint64_t lo = 2 * std::max(max_lane_bytes_, max_attention_bytes_);
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

storage::UnitRead StreamingWeights::BlockRead(const Extent& e, uint64_t block) const {
  storage::UnitRead r;
  r.id = storage::MakeUnitId(e.slab, e.kind, block);
  r.partition = e.partition;
  r.device = device_;
  const uint64_t begin = block * options_.block_bytes;
  r.offset = e.offset + begin;
  r.length = static_cast<size_t>(std::min<uint64_t>(options_.block_bytes, e.nbytes - begin));
  return r;
}

std::pair<uint64_t, uint64_t> StreamingWeights::BlocksOf(const Group& g, int64_t c0,
                                                         int64_t c1) const {
  const uint64_t b = g.pack.bundle_bytes;
  return {static_cast<uint64_t>(c0) * b / options_.block_bytes,
          (static_cast<uint64_t>(c1) * b - 1) / options_.block_bytes};
}

void StreamingWeights::CountAccess(uint64_t bytes, bool hit) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.block_accesses += 1;
  stats_.accessed_bytes += bytes;
  if (hit) {  // resident mode; cache hits are counted by the cache
    stats_.block_hits += 1;
    stats_.cache_bytes += bytes;
  }
}

void StreamingWeights::Prefetch(int layer) {
  if (options_.prefetch_layers < 0) return;  // no read-ahead
  // Positions count layers across tokens (lap * n_layers + layer), so reading ahead runs on
  // from the last layers of one token into the first layers of the next.
  if (layer < last_layer_) ++lap_;
  last_layer_ = layer;
  const int64_t now = lap_ * n_layers_ + layer;
  if (ahead_.position < now) ahead_ = Cursor{now, 0, 0};  // fell behind: read ahead from here
  const int64_t limit = now + options_.prefetch_layers;
  // Prefetched blocks wait in staging, pinned, until the compute claims them.
  const storage::PartitionStats staging = cache_->partition_stats(staging_partition_);
  uint64_t room =
      staging.budget_bytes > staging.pinned_bytes ? staging.budget_bytes - staging.pinned_bytes : 0;
  // Wait for a worthwhile amount of room: the I/O thread merges what it is given at once into
  // large reads, and storage is several times faster in MiB-sized reads than in single blocks.
  const uint64_t worthwhile = std::min<uint64_t>(staging.budget_bytes / 4, uint64_t{8} << 20);
  if (room < worthwhile && ahead_.position > now) return;
  while (ahead_.position <= limit) {
    const int l = static_cast<int>(ahead_.position % n_layers_);
    Extent* e = nullptr;
    if (ahead_.phase == 0 && !attention_.empty()) e = &attention_[static_cast<size_t>(l)];
    if (ahead_.phase >= 1 && !sparse_mlp_) {
      // A group's MLP tensors serve all its layers: bundles, or the input columns then the
      // down columns. Sparse mode reads MLP columns by prediction instead (PredictNextLayer).
      Group& g = groups_[static_cast<size_t>(group_of_[static_cast<size_t>(l)])];
      if (g.pack.first_layer == l) {
        if (g.columns) {
          e = ahead_.phase == 1 ? &g.in : &g.extent;
        } else if (ahead_.phase == 1) {
          e = &g.extent;
        }
      }
    }
    if (e != nullptr && !e->held) {
      for (; ahead_.block < e->n_blocks; ++ahead_.block) {
        storage::UnitRead r = BlockRead(*e, ahead_.block);
        if (cache_->Contains(r.id)) continue;
        const uint64_t charge = cache_->EntryCharge(r.length);
        if (charge > room) return;  // resume here when the compute has claimed some
        r.partition = staging_partition_;
        if (!prefetcher_->Enqueue(r).ok()) return;
        room -= charge;
      }
    }
    ahead_.block = 0;
    if (++ahead_.phase == 3) {
      ahead_.phase = 0;
      ++ahead_.position;
    }
  }
}

Status StreamingWeights::LoadResident(Extent& e) {
  // Everything fits: read the whole extent (batched by the I/O thread) and keep it pinned.
  for (uint64_t b = 0; b < e.n_blocks; ++b) {
    storage::UnitRead r = BlockRead(e, b);
    if (!cache_->Contains(r.id)) (void)prefetcher_->Enqueue(r);
  }
  std::vector<storage::CacheHandle> pins;
  pins.reserve(e.n_blocks);
  for (uint64_t b = 0; b < e.n_blocks; ++b) {
    const storage::UnitRead r = BlockRead(e, b);
    const Clock::time_point t0 = Clock::now();
    Result<storage::CacheHandle> h = prefetcher_->Get(r);
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      stats_.stall_seconds += Since(t0);
    }
    CountAccess(r.length, false);
    if (!h.ok()) return h.status();
    pins.push_back(std::move(h).value());
  }
  e.pins = std::move(pins);
  e.held = true;
  return Status::Ok();
}

Status StreamingWeights::AcquireAttention(int layer) {
  if (attention_.empty()) return Status::Ok();  // attention is static
  WEIR_CHECK(layer >= 0 && layer < static_cast<int>(attention_.size()));
  Extent& e = attention_[static_cast<size_t>(layer)];
  Prefetch(layer);
  if (resident_mode_ && !e.held) WEIR_RETURN_IF_ERROR(LoadResident(e));
  if (e.held) {
    for (uint64_t b = 0; b < e.n_blocks; ++b) CountAccess(BlockRead(e, b).length, true);
    return Status::Ok();
  }
  attention_batch_ = Batch();
  for (uint64_t b = 0; b < e.n_blocks; ++b) {
    Status st = AcquireBlock(e, b, &attention_batch_, nullptr);
    if (!st.ok()) {
      ReleaseAttention();
      return st;
    }
  }
  return Status::Ok();
}

void StreamingWeights::ReleaseAttention() {
  // Transient blocks give their pages back; pinned ones are unpinned.
  for (const auto& [p, bytes] : attention_batch_.transient) slabs_->Discard(p, bytes);
  attention_batch_ = Batch();
}

Status StreamingWeights::Forward(int layer, const float* x, int n, float* out, ThreadPool* pool,
                                 sparsity::SparsityPolicy* policy, uint64_t* weight_bytes) {
  WEIR_CHECK(layer >= 0 && layer < n_layers_ && n > 0);
  Group& g = groups_[static_cast<size_t>(group_of_[static_cast<size_t>(layer)])];
  Extent& e = g.extent;
  const int j = layer - g.pack.first_layer;
  if (weight_bytes != nullptr) *weight_bytes = 0;
  if (g.columns) {
    Prefetch(layer);
    for (int t = 0; t < n; ++t) {
      const size_t at = static_cast<size_t>(t) * d_model_;
      WEIR_RETURN_IF_ERROR(ForwardColumns(g, j, x + at, out + at, pool, policy, weight_bytes));
    }
    return Status::Ok();
  }
  WEIR_CHECK(policy == nullptr);  // bundles: dense only (Session checks)
  if (weight_bytes != nullptr) {
    *weight_bytes = static_cast<uint64_t>(n) * g.pack.bundle_bytes / g.pack.n_layers *
                    static_cast<uint64_t>(g.pack.d_ff);
  }
  std::memset(out, 0, sizeof(float) * static_cast<size_t>(n) * d_model_);
  Prefetch(layer);
  if (resident_mode_ && !e.held) WEIR_RETURN_IF_ERROR(LoadResident(e));
  if (e.held) {
    for (uint64_t b = 0; b < e.n_blocks; ++b) CountAccess(BlockRead(e, b).length, true);
    ComputeLanes(g, j, 0, g.n_lanes, x, n, out, pool);
    return Status::Ok();
  }
  const uint64_t batch_limit =
      std::max<uint64_t>(max_lane_bytes_, cache_->partition_stats(e.partition).budget_bytes / 2);
  Batch batch;
  int lane = 0;  // the lane whose blocks are being acquired
  auto first_block = [&](int k) {
    return BlocksOf(g, int64_t{k} * lane_channels_, int64_t{k} * lane_channels_ + 1).first;
  };
  // Frees pinned room by finishing the lanes already acquired (blocks shared with `lane` stay).
  auto make_room = [&]() {
    if (batch.lane_begin >= lane) return false;
    ComputeLanes(g, j, batch.lane_begin, lane, x, n, out, pool);
    Release(&batch, first_block(lane), e);
    batch.lane_begin = lane;
    return true;
  };
  for (; lane < g.n_lanes; ++lane) {
    const int64_t c0 = int64_t{lane} * lane_channels_;
    const auto [b0, b1] = BlocksOf(g, c0, std::min<int64_t>(c0 + lane_channels_, g.pack.d_ff));
    for (uint64_t b = b0; b <= b1; ++b) {
      if (!batch.blocks.empty() && b <= batch.blocks.back()) continue;  // shared with lane - 1
      WEIR_RETURN_IF_ERROR(AcquireBlock(e, b, &batch, make_room));
    }
    batch.lane_end = lane + 1;
    if (batch.pinned_bytes >= batch_limit && lane + 1 < g.n_lanes) {
      ComputeLanes(g, j, batch.lane_begin, batch.lane_end, x, n, out, pool);
      Release(&batch, first_block(lane + 1), e);
      batch.lane_begin = lane + 1;
      Prefetch(layer);  // top up the read-ahead with the room the compute released
    }
  }
  ComputeLanes(g, j, batch.lane_begin, batch.lane_end, x, n, out, pool);
  Release(&batch, UINT64_MAX, e);
  Prefetch(layer);
  return Status::Ok();
}

Status StreamingWeights::AcquireBlock(Extent& e, uint64_t block, Batch* batch,
                                      const std::function<bool()>& make_room, bool claim_queued) {
  storage::UnitRead r = BlockRead(e, block);
  const uint64_t charge = cache_->EntryCharge(r.length);
  CountAccess(r.length, false);
  const Clock::time_point t0 = Clock::now();
  auto stall = [&] {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.stall_seconds += Since(t0);
  };
  auto take = [&](storage::CacheHandle h) {
    if (h.partition() == staging_partition_ && r.partition != staging_partition_) {
      (void)cache_->Move(h, r.partition);  // the policy admits it, or it stays in staging
    }
    batch->blocks.push_back(block);
    batch->handles.push_back(std::move(h));
    batch->pinned_bytes += charge;
  };
  auto oom = [](const Result<storage::CacheHandle>& h) {
    return !h.ok() && h.status().code() == Status::Code::kOutOfMemory;
  };
  // A miss is read into staging and promoted below if the policy admits it. No room there:
  // drop read-ahead, then finish earlier work, then reserve in the partition itself.
  storage::UnitRead staged = r;
  staged.partition = staging_partition_;
  if (claim_queued && cache_->Contains(r.id)) {
    // Queued, loading or cached: wait for it (NotFound if it was evicted meanwhile).
    Result<storage::CacheHandle> w = prefetcher_->Wait(r.id);
    if (w.ok()) {
      stall();
      take(std::move(w).value());
      return Status::Ok();
    }
    if (w.status().code() != Status::Code::kNotFound) return w.status();
  }
  Result<storage::CacheHandle> h = prefetcher_->Get(staged);
  if (oom(h) && prefetcher_->CancelAll() > 0) h = prefetcher_->Get(staged);
  if (oom(h) && make_room && make_room()) h = prefetcher_->Get(staged);
  if (oom(h)) h = prefetcher_->Get(r);
  if (h.ok()) {
    stall();
    take(std::move(h).value());
    return Status::Ok();
  }
  if (!oom(h)) return h.status();
  // Transient: read into the slab place without a cache entry; dropped after use.
  std::byte* dst = e.base + block * options_.block_bytes;
  const size_t len =
      storage::RoundedReadLength(*device_, r.offset, r.length, dst, RoundUp(r.length, kPage));
  slabs_->Reclaim(dst, len);  // a queued release of this place must not zero what is read now
  const Clock::time_point io0 = Clock::now();
  Status st = device_->ReadAt(r.offset, len, dst);
  const double io = Since(io0);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.io_seconds += io;
    stats_.storage_bytes += len;
    ++stats_.storage_reads;
    stats_.transient_bytes += len;
  }
  stall();
  batch->transient.emplace_back(dst, RoundUp(r.length, kPage));
  batch->blocks.push_back(block);
  batch->handles.emplace_back();  // keeps blocks and handles index-aligned
  if (!st.ok()) {
    return st.WithContext(StrFormat("reading block %llu of extent %u",
                                    static_cast<unsigned long long>(block), e.slab));
  }
  return Status::Ok();
}

void StreamingWeights::Release(Batch* batch, uint64_t keep_from_block, const Extent& e) {
  size_t keep = 0;
  while (keep < batch->blocks.size() && batch->blocks[keep] < keep_from_block) ++keep;
  for (size_t i = 0; i < keep; ++i) {
    if (batch->handles[i].valid()) {
      batch->pinned_bytes -= cache_->EntryCharge(batch->handles[i].size());
      batch->handles[i].Reset();
    }
  }
  // Transient blocks of the released prefix give their pages back -- unless the block has been
  // reserved in the cache since (read-ahead): its entry owns the place now, and holds the same
  // bytes. Reservations are made on this thread only, so the check cannot race with one.
  std::vector<std::pair<std::byte*, size_t>> still;
  for (const auto& [p, bytes] : batch->transient) {
    const uint64_t block = static_cast<uint64_t>(p - e.base) / options_.block_bytes;
    if (block < keep_from_block) {
      if (!cache_->Contains(storage::MakeUnitId(e.slab, e.kind, block))) slabs_->Discard(p, bytes);
    } else {
      still.emplace_back(p, bytes);
    }
  }
  batch->transient = std::move(still);
  batch->blocks.erase(batch->blocks.begin(), batch->blocks.begin() + static_cast<ptrdiff_t>(keep));
  batch->handles.erase(batch->handles.begin(),
                       batch->handles.begin() + static_cast<ptrdiff_t>(keep));
}

void StreamingWeights::ComputeLanes(const Group& g, int j, int k0, int k1, const float* x, int n,
                                    float* out, ThreadPool* pool) {
  if (k0 >= k1 || !options_.compute) return;
  const format::PackGroup& pg = g.pack;
  const TensorView view{pg.dtype, Shape{pg.rows(), pg.d_model}, g.extent.base};  // [rows, d_model]
  const int L = lane_channels_;
  const size_t chunk_stride = format::kBundleChunk * pg.bundle_bytes;
  float* rows_y = rows_y_.data<float>();
  float* gate = gate_.data<float>();
  float* up = up_.data<float>();
  float* partials = partials_.data<float>();
  int32_t* idx_rows = idx_rows_.data();  // channel c's gate and up rows at 2c, 2c + 1
  const int d = d_model_;
  for (int t = 0; t < n; ++t) {
    const float* xt = x + static_cast<size_t>(t) * d;
    if (pg.tiled) {
      ComputeTiledLanes(g, j, k0, k1, xt, pool);
    } else {
      // One lane at a time per thread, start to end: its gate and up rows, h, and its partial sum
      // of W_down · h over its chunks' down pieces. A lane's bundles (about 1 MiB) are streamed
      // from memory once and are still in L2 when its down pieces are read.
      ParallelForDynamic(
          pool, static_cast<size_t>(k1 - k0),
          [&](size_t b, size_t e, int) {
            for (size_t i = b; i < e; ++i) {
              const int k = k0 + static_cast<int>(i);
              const int64_t c0 = int64_t{k} * L, c1 = std::min<int64_t>(c0 + L, pg.d_ff);
              for (int64_t c = c0; c < c1; ++c) {
                idx_rows[2 * c] = static_cast<int32_t>(pg.Row(c, j, format::BundleOp::kGate));
                idx_rows[2 * c + 1] = static_cast<int32_t>(pg.Row(c, j, format::BundleOp::kUp));
              }
              kernels::GatherMatVecRows(view, idx_rows + 2 * c0, 2 * (c1 - c0), xt, rows_y,
                                        nullptr);
              for (int64_t c = c0; c < c1; ++c) {
                gate[c] = rows_y[idx_rows[2 * c]];
                up[c] = rows_y[idx_rows[2 * c + 1]];
              }
              kernels::GatedActivation(glu_, gate + c0, up + c0, c1 - c0);
              // partial_k = sum over the lane's chunks, in order, of W_down[:, chunk] · h[chunk]:
              // the full chunks in one call, then a narrower last chunk (float types) added.
              float* part = partials + static_cast<size_t>(k) * d;
              const int64_t full = (c1 - c0) / format::kBundleChunk;
              auto down = [&](int64_t c) {
                return view.row(pg.ChunkRow(c, j, format::BundleOp::kDown));
              };
              if (full > 0) {
                kernels::ChunkedMatVec(pg.dtype, down(c0), RowBytes(pg.dtype, format::kBundleChunk),
                                       chunk_stride, full, format::kBundleChunk, d, gate + c0, part,
                                       false);
              }
              const int64_t c_last = c0 + full * format::kBundleChunk;
              if (c_last < c1) {
                const int w = static_cast<int>(c1 - c_last);
                kernels::ChunkedMatVec(pg.dtype, down(c_last), RowBytes(pg.dtype, w), chunk_stride,
                                       1, w, d, gate + c_last, part, full > 0);
              }
            }
          },
          1);
    }
    // out += partial_k in lane order, each thread summing a slice of the outputs.
    float* ot = out + static_cast<size_t>(t) * d;
    ParallelFor(
        pool, static_cast<size_t>(d),
        [&](size_t b, size_t e, int) {
          for (int k = k0; k < k1; ++k) {
            const float* p = partials + static_cast<size_t>(k) * d;
            for (size_t i = b; i < e; ++i) ot[i] += p[i];
          }
        },
        64);
  }
}

// The lanes of a tiled bundle group (format/weir_pack_format.h) for one token x: per chunk the
// gate and up products of its 32 neurons (DotTiledPrepared, x prepared once for all lanes), h,
// and the lane's down pieces in one DotTiledChunks call into the lane's partial sum.
void StreamingWeights::ComputeTiledLanes(const Group& g, int j, int k0, int k1, const float* x,
                                         ThreadPool* pool) {
  const format::PackGroup& pg = g.pack;
  const TensorView view{pg.dtype, Shape{pg.rows(), pg.d_model}, g.extent.base};  // [rows, d_model]
  const int L = lane_channels_, d = d_model_;
  const size_t chunk_stride = format::kBundleChunk * pg.bundle_bytes;
  float* gate = gate_.data<float>();
  float* up = up_.data<float>();
  float* partials = partials_.data<float>();
  auto* xp = x_tiled_.data<uint8_t>();
  auto* hp = h_tiled_.data<uint8_t>();
  kernels::PrepareTiled(pg.dtype, x, d, xp);
  ParallelForDynamic(
      pool, static_cast<size_t>(k1 - k0),
      [&](size_t b, size_t e, int) {
        for (size_t i = b; i < e; ++i) {
          const int k = k0 + static_cast<int>(i);
          const int64_t c0 = int64_t{k} * L, c1 = std::min<int64_t>(c0 + L, pg.d_ff);
          for (int64_t c = c0; c < c1; c += format::kBundleChunk) {
            for (auto [op, y] : {std::pair{format::BundleOp::kGate, gate},
                                 std::pair{format::BundleOp::kUp, up}}) {
              TensorView piece{pg.dtype, Shape{format::kBundleChunk, d},
                               view.row(pg.ChunkRow(c, j, op))};
              piece.layout = Layout::kTiled16;
              kernels::DotTiledPrepared(piece, xp, y + c);
            }
          }
          kernels::GatedActivation(glu_, gate + c0, up + c0, c1 - c0);
          // Records of chunk c start at hp + (c / 32) * 64: lanes write disjoint ranges.
          uint8_t* h =
              hp + static_cast<size_t>(c0 / format::kBundleChunk) * kernels::kTiledRecordBytes;
          kernels::PrepareTiled(pg.dtype, gate + c0, c1 - c0, h);
          kernels::DotTiledChunks(pg.dtype, view.row(pg.ChunkRow(c0, j, format::BundleOp::kDown)),
                                  chunk_stride, (c1 - c0) / format::kBundleChunk, d, h,
                                  partials + static_cast<size_t>(k) * d);
        }
      },
      1);
}

void StreamingWeights::BeginToken() {
  cache_->BeginToken();
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.tokens;
}

void StreamingWeights::ResetSequence() { cache_->ResetSequence(); }

Status StreamingWeights::SetCacheBudget(uint64_t bytes) {
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
