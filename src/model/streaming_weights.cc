#include "model/streaming_mlp.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/checked_math.h"
#include "kernels/gather.h"
#include "kernels/ops.h"
#include "storage/unit_id.h"

namespace weir::model {

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The unit kind of a bundle tensor block (storage/unit_id.h: layer field = group).
constexpr uint32_t kBundleBlockKind = 1;
constexpr uint64_t kPage = 4096;

uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

StreamStats StreamStats::operator-(const StreamStats& o) const {
  StreamStats d;
  d.tokens = tokens - o.tokens;
  d.block_accesses = block_accesses - o.block_accesses;
  d.block_hits = block_hits - o.block_hits;
  d.accessed_bytes = accessed_bytes - o.accessed_bytes;
  d.cache_bytes = cache_bytes - o.cache_bytes;
  d.storage_bytes = storage_bytes - o.storage_bytes;
  d.prefetched_bytes = prefetched_bytes - o.prefetched_bytes;
  d.transient_bytes = transient_bytes - o.transient_bytes;
  d.stall_seconds = stall_seconds - o.stall_seconds;
  d.io_seconds = io_seconds - o.io_seconds;
  return d;
}

Result<std::unique_ptr<StreamingMlp>> StreamingMlp::Create(const format::PackFile& pack,
                                                           storage::BlockDevice* device,
                                                           const StreamingMlpOptions& options) {
  const std::string& path = pack.path();
  if (device == nullptr) return Status::InvalidArgument("streaming: no device for " + path);
  if (options.block_bytes == 0 || options.block_bytes % kPage != 0) {
    return Status::InvalidArgument(
        StrFormat("streaming: block size %zu is not a positive multiple of 4096", options.block_bytes));
  }
  if (options.lane_channels < 0 || options.lane_channels % 4 != 0) {
    return Status::InvalidArgument(
        StrFormat("streaming: lane size %d is not a positive multiple of 4", options.lane_channels));
  }
  if (options.prefetch_layers < 0) {
    return Status::InvalidArgument(StrFormat("streaming: prefetch of %d layers", options.prefetch_layers));
  }
  if (options.partitions != "uniform" && options.partitions != "proportional" &&
      options.partitions != "shared") {
    return Status::InvalidArgument("streaming: cache partitions '" + options.partitions +
                                   "' (known: uniform, proportional, shared)");
  }
  if (device->size() < pack.file_size()) {
    return Status::InvalidArgument(StrFormat("streaming: device %s holds %llu bytes, the pack %s has %llu",
                                             device->name().c_str(),
                                             static_cast<unsigned long long>(device->size()), path.c_str(),
                                             static_cast<unsigned long long>(pack.file_size())));
  }
  std::unique_ptr<StreamingMlp> s(new StreamingMlp());
  s->options_ = options;
  s->device_ = device;
  s->d_model_ = pack.config().d_model;
  s->n_layers_ = pack.config().n_layers;
  s->group_of_.assign(static_cast<size_t>(s->n_layers_), 0);
  // Lanes of about 512 KiB of bundles (fits L2 beside the next), a multiple of 4 channels.
  s->lane_channels_ = options.lane_channels;
  if (s->lane_channels_ == 0) {
    size_t widest = 1;
    for (const format::PackGroup& pg : pack.groups()) widest = std::max(widest, pg.bundle_bytes);
    s->lane_channels_ = std::max(4, static_cast<int>((512 << 10) / widest) / 4 * 4);
  }
  std::vector<storage::SlabPlacement::Slab> slabs;
  int64_t max_rows = 0, max_ff = 0, max_lanes = 0;
  uint64_t max_group = 0;
  for (const format::PackGroup& pg : pack.groups()) {
    Group g;
    g.pack = pg;
    g.n_blocks = (pg.nbytes + options.block_bytes - 1) / options.block_bytes;
    g.n_lanes = (pg.d_ff + s->lane_channels_ - 1) / s->lane_channels_;
    if (!storage::UnitIdFits(static_cast<uint64_t>(pg.index), kBundleBlockKind, g.n_blocks) ||
        pg.rows() > INT32_MAX) {
      return Status::Unsupported(StrFormat("streaming: %s: group %d is too large to stream", path.c_str(), pg.index));
    }
    for (int j = 0; j < pg.n_layers; ++j) s->group_of_[static_cast<size_t>(pg.first_layer + j)] = pg.index;
    slabs.push_back({pg.nbytes, options.block_bytes});
    max_rows = std::max(max_rows, pg.rows());
    max_ff = std::max<int64_t>(max_ff, pg.d_ff);
    max_lanes = std::max<int64_t>(max_lanes, g.n_lanes);
    max_group = std::max(max_group, pg.nbytes);
    s->groups_.push_back(std::move(g));
  }
  WEIR_ASSIGN_OR_RETURN(s->slabs_, storage::SlabPlacement::Create(slabs));
  for (Group& g : s->groups_) g.base = s->slabs_->base(static_cast<uint32_t>(g.pack.index));

  // Cache: group partitions and the staging partition, weighted in bytes.
  WEIR_ASSIGN_OR_RETURN(auto policy, storage::MakeEvictionPolicy(options.policy, options.policy_options));
  storage::CacheOptions co;
  co.budget_bytes = options.cache_budget;
  co.alignment = kPage;
  co.record_trace = options.record_trace;
  co.placement = s->slabs_.get();
  // Charges need the policy's per-entry bytes; a throwaway cache computes them.
  WEIR_ASSIGN_OR_RETURN(auto probe, storage::WeightCache::Create(co, storage::MakeEvictionPolicy(options.policy, options.policy_options).value()));
  uint64_t total_charge = 0;
  for (Group& g : s->groups_) {
    uint64_t charge = 0;
    for (uint64_t b = 0; b < g.n_blocks; ++b) charge += probe->EntryCharge(s->BlockRead(g, b).length);
    s->group_charge_.push_back(charge);
    total_charge += charge;
    for (int k = 0; k < g.n_lanes; ++k) {
      const int64_t c0 = int64_t{k} * s->lane_channels_;
      const auto [b0, b1] = s->BlocksOf(g, c0, std::min<int64_t>(c0 + s->lane_channels_, g.pack.d_ff));
      s->max_lane_bytes_ = std::max<uint64_t>(s->max_lane_bytes_, (b1 - b0 + 1) * options.block_bytes);
    }
  }
  probe.reset();
  s->all_blocks_charge_ = total_charge;
  s->max_group_bytes_ = max_group;
  s->staging_partition_ = static_cast<uint32_t>(options.partitions == "shared" ? 1 : s->groups_.size());
  co.partition_weights = s->PartitionWeights(options.cache_budget);
  WEIR_ASSIGN_OR_RETURN(s->cache_, storage::WeightCache::Create(co, std::move(policy)));
  storage::Prefetcher::Options po;
  po.max_batch = std::max<size_t>(1, options.io_batch);
  WEIR_ASSIGN_OR_RETURN(s->prefetcher_, storage::Prefetcher::Create(s->cache_.get(), po));
  s->resident_mode_ = s->CheckResidentMode();

  const size_t f = sizeof(float);
  if (!s->rows_y_.Reset(static_cast<size_t>(max_rows) * f) || !s->rows_x_.Reset(static_cast<size_t>(max_rows) * f) ||
      !s->gate_.Reset(static_cast<size_t>(max_ff) * f) || !s->up_.Reset(static_cast<size_t>(max_ff) * f) ||
      !s->partials_.Reset(static_cast<size_t>(max_lanes) * s->d_model_ * f)) {
    return Status::OutOfMemory("streaming: cannot allocate the MLP scratch buffers");
  }
  s->idx_rows_.resize(static_cast<size_t>(2 * max_ff));
  s->idx_down_.resize(static_cast<size_t>(max_ff));
  return s;
}

StreamingMlp::~StreamingMlp() {
  if (prefetcher_) prefetcher_->Shutdown();
  for (Group& g : groups_) g.pins.clear();
  prefetcher_.reset();
  cache_.reset();  // before the slabs its entries live in
}

std::vector<uint64_t> StreamingMlp::PartitionWeights(uint64_t budget) const {
  // Staging: what prefetches land in. A quarter of the budget, at least two lanes of blocks, at
  // most the groups being read ahead; everything beyond the blocks when the whole model fits.
  const uint64_t lo = 2 * max_lane_bytes_;
  const uint64_t hi = std::max<uint64_t>(lo, static_cast<uint64_t>(options_.prefetch_layers + 1) * max_group_bytes_);
  uint64_t staging = options_.staging_bytes > 0 ? options_.staging_bytes : std::clamp<uint64_t>(budget / 4, lo, hi);
  const bool fits = budget >= all_blocks_charge_ && budget - all_blocks_charge_ >= lo;
  if (fits) staging = budget - all_blocks_charge_;
  staging = std::min(staging, budget);
  const uint64_t rest = budget - staging;
  std::vector<uint64_t> weights;
  if (options_.partitions == "shared") {
    weights.push_back(rest);
  } else {
    for (size_t g = 0; g < groups_.size(); ++g) {
      uint64_t w = rest / groups_.size();
      if (fits || (options_.partitions == "proportional" && all_blocks_charge_ > 0)) {
        w = fits ? group_charge_[g]
                 : static_cast<uint64_t>(static_cast<unsigned __int128>(rest) * group_charge_[g] / all_blocks_charge_);
      }
      weights.push_back(w);
    }
  }
  weights.push_back(staging);
  for (uint64_t& w : weights) w = std::max<uint64_t>(1, w);  // every partition needs a weight
  return weights;
}

uint64_t StreamingMlp::fixed_bytes() const {
  return rows_y_.size() + rows_x_.size() + gate_.size() + up_.size() + partials_.size() +
         idx_rows_.capacity() * sizeof(int32_t) + idx_down_.capacity() * sizeof(int32_t) +
         max_lane_bytes_ + 2 * options_.block_bytes;  // the transient reserve
}

bool StreamingMlp::CheckResidentMode() const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const uint32_t p = PartitionOf(static_cast<int>(g));
    if (options_.partitions == "shared") {
      return cache_->partition_stats(0).budget_bytes >= all_blocks_charge_;
    }
    if (cache_->partition_stats(p).budget_bytes < group_charge_[g]) return false;
  }
  return true;
}

storage::UnitRead StreamingMlp::BlockRead(const Group& g, uint64_t block) const {
  storage::UnitRead r;
  r.id = storage::MakeUnitId(static_cast<uint32_t>(g.pack.index), kBundleBlockKind, block);
  r.partition = PartitionOf(g.pack.index);
  r.device = device_;
  const uint64_t begin = block * options_.block_bytes;
  r.offset = g.pack.offset + begin;
  r.length = static_cast<size_t>(std::min<uint64_t>(options_.block_bytes, g.pack.nbytes - begin));
  return r;
}

std::pair<uint64_t, uint64_t> StreamingMlp::BlocksOf(const Group& g, int64_t c0, int64_t c1) const {
  const uint64_t b = g.pack.bundle_bytes;
  return {static_cast<uint64_t>(c0) * b / options_.block_bytes,
          (static_cast<uint64_t>(c1) * b - 1) / options_.block_bytes};
}

void StreamingMlp::Prefetch(int layer) {
  if (last_prefetched_layer_ == layer) return;
  last_prefetched_layer_ = layer;
  // Staging is where prefetches land; keep half of it for demand reads that overflow.
  uint64_t room = cache_->partition_stats(staging_partition_).budget_bytes / 2;
  int last_group = -1;
  for (int l = layer; l < n_layers_ && l <= layer + options_.prefetch_layers; ++l) {
    const int gi = group_of_[static_cast<size_t>(l)];
    if (gi == last_group) continue;
    last_group = gi;
    Group& g = groups_[static_cast<size_t>(gi)];
    if (g.held) continue;
    for (uint64_t b = 0; b < g.n_blocks; ++b) {
      storage::UnitRead r = BlockRead(g, b);
      if (cache_->Contains(r.id)) continue;
      const uint64_t charge = cache_->EntryCharge(r.length);
      if (charge > room) return;
      r.partition = staging_partition_;
      if (!prefetcher_->Enqueue(r).ok()) return;  // no room: the rest is read on demand
      room -= charge;
    }
  }
}

Status StreamingMlp::LoadResident(Group& g) {
  // Everything fits: read the whole group (batched by the I/O thread) and keep it pinned.
  for (uint64_t b = 0; b < g.n_blocks; ++b) {
    storage::UnitRead r = BlockRead(g, b);
    if (!cache_->Contains(r.id)) (void)prefetcher_->Enqueue(r);
  }
  std::vector<storage::CacheHandle> pins;
  pins.reserve(g.n_blocks);
  for (uint64_t b = 0; b < g.n_blocks; ++b) {
    const Clock::time_point t0 = Clock::now();
    Result<storage::CacheHandle> h = prefetcher_->Get(BlockRead(g, b));
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      stats_.stall_seconds += Since(t0);
      stats_.block_accesses += 1;
      stats_.accessed_bytes += BlockRead(g, b).length;
    }
    if (!h.ok()) return h.status();
    pins.push_back(std::move(h).value());
  }
  g.pins = std::move(pins);
  g.held = true;
  return Status::Ok();
}

Status StreamingMlp::Forward(int layer, const float* x, int n, float* out, ThreadPool* pool) {
  WEIR_CHECK(layer >= 0 && layer < n_layers_ && n > 0);
  Group& g = groups_[static_cast<size_t>(group_of_[static_cast<size_t>(layer)])];
  const int j = layer - g.pack.first_layer;
  std::memset(out, 0, sizeof(float) * static_cast<size_t>(n) * d_model_);
  Prefetch(layer);
  if (resident_mode_ && !g.held) WEIR_RETURN_IF_ERROR(LoadResident(g));
  if (g.held) {
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      stats_.block_accesses += g.n_blocks;
      stats_.block_hits += g.n_blocks;
      stats_.accessed_bytes += g.pack.nbytes;
      stats_.cache_bytes += g.pack.nbytes;
    }
    ComputeLanes(g, j, 0, g.n_lanes, x, n, out, pool);
    return Status::Ok();
  }
  const uint64_t batch_limit =
      std::max<uint64_t>(max_lane_bytes_, cache_->partition_stats(PartitionOf(g.pack.index)).budget_bytes / 2);
  Batch batch;
  for (int k = 0; k < g.n_lanes; ++k) {
    const int64_t c0 = int64_t{k} * lane_channels_;
    const auto [b0, b1] = BlocksOf(g, c0, std::min<int64_t>(c0 + lane_channels_, g.pack.d_ff));
    for (uint64_t b = b0; b <= b1; ++b) {
      if (!batch.blocks.empty() && b <= batch.blocks.back()) continue;  // shared with lane k-1
      WEIR_RETURN_IF_ERROR(AcquireBlock(g, b, &batch, k, x, n, out, j, pool));
    }
    batch.lane_end = k + 1;
    if (batch.pinned_bytes >= batch_limit && k + 1 < g.n_lanes) {
      ComputeLanes(g, j, batch.lane_begin, batch.lane_end, x, n, out, pool);
      Release(&batch, k + 1, g);
    }
  }
  ComputeLanes(g, j, batch.lane_begin, batch.lane_end, x, n, out, pool);
  Release(&batch, g.n_lanes, g);
  return Status::Ok();
}

Status StreamingMlp::AcquireBlock(Group& g, uint64_t block, Batch* batch, int lane, const float* x,
                                  int n, float* out, int j, ThreadPool* pool) {
  storage::UnitRead r = BlockRead(g, block);
  const uint64_t charge = cache_->EntryCharge(r.length);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.block_accesses += 1;
    stats_.accessed_bytes += r.length;
  }
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
  Result<storage::CacheHandle> h = prefetcher_->Get(r);
  if (h.ok()) {
    stall();
    take(std::move(h).value());
    return Status::Ok();
  }
  if (h.status().code() != Status::Code::kOutOfMemory) return h.status();
  // No room in the group's partition: drop read-ahead, then finish earlier lanes, then try the
  // staging partition.
  if (prefetcher_->CancelAll() > 0) h = prefetcher_->Get(r);
  if (!h.ok() && h.status().code() == Status::Code::kOutOfMemory && batch->lane_begin < lane) {
    ComputeLanes(g, j, batch->lane_begin, lane, x, n, out, pool);
    Release(batch, lane, g);
    h = prefetcher_->Get(r);
  }
  if (!h.ok() && h.status().code() == Status::Code::kOutOfMemory) {
    storage::UnitRead staged = r;
    staged.partition = staging_partition_;
    h = prefetcher_->Get(staged);
  }
  if (h.ok()) {
    stall();
    take(std::move(h).value());
    return Status::Ok();
  }
  if (h.status().code() != Status::Code::kOutOfMemory) return h.status();
  // Transient: read into the slab place without a cache entry; dropped after the lane ran.
  std::byte* dst = g.base + block * options_.block_bytes;
  const size_t len = storage::RoundedReadLength(*device_, r.offset, r.length, dst, RoundUp(r.length, kPage));
  const Clock::time_point io0 = Clock::now();
  Status st = device_->ReadAt(r.offset, len, dst);
  const double io = Since(io0);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.io_seconds += io;
    stats_.storage_bytes += len;
    stats_.transient_bytes += len;
  }
  stall();
  batch->transient.emplace_back(dst, RoundUp(r.length, kPage));
  batch->blocks.push_back(block);
  batch->handles.emplace_back();  // keeps blocks and handles index-aligned
  if (!st.ok()) {
    return st.WithContext(StrFormat("reading block %llu of %s", static_cast<unsigned long long>(block),
                                    format::PackBundleTensorName(g.pack.index).c_str()));
  }
  return Status::Ok();
}

void StreamingMlp::Release(Batch* batch, int keep_from_lane, const Group& g) {
  // Blocks also holding channels of lane keep_from_lane stay for it.
  uint64_t keep_from_block = UINT64_MAX;
  if (keep_from_lane < g.n_lanes) {
    keep_from_block = BlocksOf(g, int64_t{keep_from_lane} * lane_channels_,
                               int64_t{keep_from_lane} * lane_channels_ + 1)
                          .first;
  }
  size_t keep = 0;
  while (keep < batch->blocks.size() && batch->blocks[keep] < keep_from_block) ++keep;
  for (size_t i = 0; i < keep; ++i) {
    if (batch->handles[i].valid()) {
      batch->pinned_bytes -= cache_->EntryCharge(batch->handles[i].size());
      batch->handles[i].Reset();
    }
  }
  // Transient blocks of the released prefix give their pages back.
  std::vector<std::pair<std::byte*, size_t>> still;
  for (const auto& [p, bytes] : batch->transient) {
    const uint64_t block = static_cast<uint64_t>(p - g.base) / options_.block_bytes;
    if (block < keep_from_block) {
      slabs_->Discard(p, bytes);
    } else {
      still.emplace_back(p, bytes);
    }
  }
  batch->transient = std::move(still);
  batch->blocks.erase(batch->blocks.begin(), batch->blocks.begin() + static_cast<ptrdiff_t>(keep));
  batch->handles.erase(batch->handles.begin(), batch->handles.begin() + static_cast<ptrdiff_t>(keep));
  batch->lane_begin = keep_from_lane;
  batch->lane_end = std::max(batch->lane_end, keep_from_lane);
}

void StreamingMlp::ComputeLanes(const Group& g, int j, int k0, int k1, const float* x, int n,
                                float* out, ThreadPool* pool) {
  if (k0 >= k1) return;
  const format::PackGroup& pg = g.pack;
  const TensorView view{pg.dtype, Shape{pg.rows(), pg.d_model}, g.base};  // [rows, d_model]
  const int L = lane_channels_;
  float* rows_y = rows_y_.data<float>();
  float* rows_x = rows_x_.data<float>();
  float* gate = gate_.data<float>();
  float* up = up_.data<float>();
  float* partials = partials_.data<float>();
  int32_t* idx_rows = idx_rows_.data();  // channel c's gate and up rows at 2c, 2c + 1
  int32_t* idx_down = idx_down_.data();  // channel c's down^T row at c
  const int d = d_model_;
  for (int t = 0; t < n; ++t) {
    const float* xt = x + static_cast<size_t>(t) * d;
    // One lane at a time per thread, start to end: its gate and up rows, h, and its partial sum
    // of W_down · h. A lane's bundles (about 512 KiB) are streamed from memory once and are
    // still in L2 when its down^T rows are read.
    ParallelForDynamic(
        pool, static_cast<size_t>(k1 - k0),
        [&](size_t b, size_t e, int) {
          for (size_t i = b; i < e; ++i) {
            const int k = k0 + static_cast<int>(i);
            const int64_t c0 = int64_t{k} * L, c1 = std::min<int64_t>(c0 + L, pg.d_ff);
            for (int64_t c = c0; c < c1; ++c) {
              idx_rows[2 * c] = static_cast<int32_t>(pg.Row(c, j, format::BundleOp::kGate));
              idx_rows[2 * c + 1] = static_cast<int32_t>(pg.Row(c, j, format::BundleOp::kUp));
              idx_down[c] = static_cast<int32_t>(pg.Row(c, j, format::BundleOp::kDownT));
            }
            kernels::GatherMatVecRows(view, idx_rows + 2 * c0, 2 * (c1 - c0), xt, rows_y, nullptr);
            for (int64_t c = c0; c < c1; ++c) {
              gate[c] = rows_y[idx_rows[2 * c]];
              up[c] = rows_y[idx_rows[2 * c + 1]];
            }
            kernels::SiluMul(gate + c0, up + c0, c1 - c0);
            for (int64_t c = c0; c < c1; ++c) rows_x[idx_down[c]] = gate[c];
            kernels::GatherMatVecCols(view, idx_down + c0, c1 - c0, rows_x,
                                      partials + static_cast<size_t>(k) * d, nullptr);
          }
        },
        1);
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

void StreamingMlp::BeginToken() {
  cache_->BeginToken();
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.tokens;
}

void StreamingMlp::ResetSequence() { cache_->ResetSequence(); }

Status StreamingMlp::SetCacheBudget(uint64_t bytes) {
  // Leaving resident mode: unpin the groups so the cache can evict.
  for (Group& g : groups_) {
    g.pins.clear();
    g.held = false;
  }
  prefetcher_->CancelAll();
  WEIR_RETURN_IF_ERROR(cache_->SetBudget(bytes, PartitionWeights(bytes)));
  options_.cache_budget = bytes;
  resident_mode_ = CheckResidentMode();
  return Status::Ok();
}

StreamStats StreamingMlp::stats() const {
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
  s.prefetched_bytes += p.bytes_prefetched;
  s.io_seconds += p.read_seconds;
  return s;
}

}  // namespace weir::model
