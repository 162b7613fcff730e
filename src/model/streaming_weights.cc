// StreamingWeights (streaming_weights.h): creation -- the plan (streaming_plan.h), the slabs,
// cache and scratch a pack needs -- resident mode and the counters. The
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

namespace {

// The record offset tables of a sparse column pack's groups, read once (they are part of
// fixed_bytes).
Result<std::vector<StreamPlan::RecordTables>> ReadRecordTables(const format::PackFile& pack,
                                                                storage::BlockDevice* device) {
  std::vector<StreamPlan::RecordTables> tables(pack.groups().size());
  for (size_t i = 0; i < pack.groups().size(); ++i) {
    const format::PackGroup& pg = pack.groups()[i];
    if (pg.layout != format::PackLayout::kSparseColumns) continue;
    auto table = [&](uint64_t offset, uint64_t nbytes, int64_t rows, int64_t len,
                     std::vector<uint64_t>* out) -> Status {
      const size_t bytes = 8 * (static_cast<size_t>(rows) + 1);
      const size_t capacity = static_cast<size_t>(RoundUp(bytes, kPage));
      AlignedBuffer buf;
      if (!buf.Reset(capacity, kPage))
        return Status::OutOfMemory("streaming: cannot allocate a record offset table");
      const size_t n = storage::RoundedReadLength(*device, offset, bytes, buf.data(), capacity);
      WEIR_RETURN_IF_ERROR(device->ReadAt(offset, n, buf.data()));
      return format::ReadSparseOffsets(buf.data<uint8_t>(), rows, len, nbytes,
                                       StrFormat("%s: group %d", pack.path().c_str(), pg.index),
                                       out);
    };
    WEIR_RETURN_IF_ERROR(table(pg.offset, pg.nbytes, pg.down_rows(), pg.d_model, &tables[i].down));
    WEIR_RETURN_IF_ERROR(table(pg.in_offset, pg.in_nbytes, pg.in_rows(), pg.d_ff, &tables[i].in));
  }
  return tables;
}

}  // namespace

Result<std::unique_ptr<StreamingWeights>> StreamingWeights::Create(
    const format::PackFile& pack, storage::BlockDevice* device, const StreamingOptions& options) {
  const std::string& path = pack.path();
  if (device == nullptr) return Status::InvalidArgument("streaming: no device for " + path);
  if (device->size() < pack.file_size()) {
    return Status::InvalidArgument(
        StrFormat("streaming: device %s holds %llu bytes, the pack %s has %llu",
                  device->name().c_str(), static_cast<unsigned long long>(device->size()),
                  path.c_str(), static_cast<unsigned long long>(pack.file_size())));
  }
  std::unique_ptr<StreamingWeights> s(new StreamingWeights());
  s->options_ = options;
  s->device_ = device;
  s->glu_ = pack.config().arch != nullptr &&
                    pack.config().arch->activation == format::Activation::kGeluTanh
                ? kernels::Glu::kGeluTanh
                : kernels::Glu::kSilu;
  WEIR_ASSIGN_OR_RETURN(std::vector<StreamPlan::RecordTables> tables,
                        ReadRecordTables(pack, device));
  // Charges need the policy's per-entry bytes; a throwaway cache computes them.
  storage::CacheOptions co;
  co.budget_bytes = options.cache_budget;
  co.alignment = kPage;
  co.record_trace = options.record_trace;
  {
    WEIR_ASSIGN_OR_RETURN(auto probe_policy,
                          storage::MakeEvictionPolicy(options.policy, options.policy_options));
    WEIR_ASSIGN_OR_RETURN(auto probe, storage::WeightCache::Create(co, std::move(probe_policy)));
    WEIR_ASSIGN_OR_RETURN(
        s->plan_,
        StreamPlan::Build(
            pack, options, [&](uint64_t bytes) { return probe->EntryCharge(bytes); },
            std::move(tables)));
  }
  const StreamPlan& plan = s->plan_;
  WEIR_ASSIGN_OR_RETURN(s->slabs_,
                        storage::SlabPlacement::Create(plan.slabs, plan.deferred_release_bytes));
  s->extent_state_.resize(plan.slabs.size());
  for (size_t i = 0; i < plan.slabs.size(); ++i)
    s->extent_state_[i].base = s->slabs_->base(static_cast<uint32_t>(i));

  // Cache: group partitions and the staging partition, weighted in bytes.
  WEIR_ASSIGN_OR_RETURN(auto policy,
                        storage::MakeEvictionPolicy(options.policy, options.policy_options));
  co.placement = s->slabs_.get();
  co.partition_weights = plan.PartitionWeights(options.cache_budget);
  WEIR_ASSIGN_OR_RETURN(s->cache_, storage::WeightCache::Create(co, std::move(policy)));
  storage::Prefetcher::Options po;
  // At least 8 MiB per device read when blocks are small (column packs: 4 KiB blocks whose
  // neighbours the I/O thread merges).
  po.max_batch = std::max<size_t>({1, options.io_batch, (size_t{8} << 20) / options.block_bytes});
  WEIR_ASSIGN_OR_RETURN(s->prefetcher_, storage::Prefetcher::Create(s->cache_.get(), po));
  s->resident_mode_ = s->CheckResidentMode();
  if (plan.experts()) s->MakeExpertReader();

  const size_t f = sizeof(float);
  const int64_t max_rows = plan.max_rows, max_ff = plan.max_ff, max_lanes = plan.max_lanes;
  if (!s->rows_y_.Reset(static_cast<size_t>(max_rows) * f) ||
      !s->rows_x_.Reset(static_cast<size_t>(max_rows) * f) ||
      !s->gate_.Reset(static_cast<size_t>(max_ff) * f) ||
      !s->up_.Reset(static_cast<size_t>(max_ff) * f) ||
      !s->partials_.Reset(static_cast<size_t>(max_lanes) * plan.d_model * f) ||
      !s->x_tiled_.Reset(kernels::TiledPrepBytes(plan.d_model)) ||
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
    const uint64_t max_blocks = plan.max_blocks;
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
  for (ExtentState& e : extent_state_) e.pins.clear();
  prefetcher_.reset();
  cache_.reset();  // before the slabs its entries live in
}

uint64_t StreamingWeights::fixed_bytes() const { return plan_.fixed_bytes(); }

uint64_t StreamingWeights::streamed_bytes() const { return plan_.streamed_bytes(); }

const std::byte* StreamingWeights::TensorAddress(const std::string& name) const {
  auto it = plan_.tensor_offsets.find(name);
  if (it == plan_.tensor_offsets.end()) return nullptr;
  return Base(plan_.attention[static_cast<size_t>(it->second.first)]) + it->second.second;
}

bool StreamingWeights::CheckResidentMode() const {
  for (size_t p = 0; p < plan_.partition_charge.size(); ++p) {
    if (cache_->partition_stats(static_cast<uint32_t>(p)).budget_bytes < plan_.partition_charge[p])
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
  for (ExtentState& e : extent_state_) {
    e.pins.clear();
    e.held = false;
  }
  predicted_.clear();
  // Reads in flight hold their blocks pinned until they land: wait for them, so that what is
  // pinned when the cache shrinks does not depend on the I/O thread's timing.
  prefetcher_->CancelAll();
  prefetcher_->WaitIdle();
  WEIR_RETURN_IF_ERROR(cache_->SetBudget(bytes, plan_.PartitionWeights(bytes)));
  options_.cache_budget = bytes;
  resident_mode_ = CheckResidentMode();
  return Status::Ok();
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
