// BlockStreamer (streaming_blocks.h): its creation, which blocks to read ahead (the cursor), how
// a block the compute needs is pinned (cached, waited for, read on demand, or read transiently
// outside the cache), releasing them, the attention extents pinned around a layer's attention,
// resident mode, the cache budget and the counters.
#include "model/streaming_blocks.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/checked_math.h"
#include "model/streaming_internal.h"
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
  d.embedding_bytes = embedding_bytes - o.embedding_bytes;
  d.embedding_reads = embedding_reads - o.embedding_reads;
  d.records_read = records_read - o.records_read;
  d.records_ahead = records_ahead - o.records_ahead;
  d.records_ahead_used = records_ahead_used - o.records_ahead_used;
  d.record_bytes = record_bytes - o.record_bytes;
  d.record_reads = record_reads - o.record_reads;
  d.record_io_seconds = record_io_seconds - o.record_io_seconds;
  d.expert_uses = expert_uses - o.expert_uses;
  d.down_uses = down_uses - o.down_uses;
  d.down_hits = down_hits - o.down_hits;
  d.expert_hits = expert_hits - o.expert_hits;
  d.experts_predicted = experts_predicted - o.experts_predicted;
  d.experts_predicted_used = experts_predicted_used - o.experts_predicted_used;
  d.experts_chosen_predicted = experts_chosen_predicted - o.experts_chosen_predicted;
  d.experts_preloaded = experts_preloaded - o.experts_preloaded;
  d.stall_seconds = stall_seconds - o.stall_seconds;
  d.stall_attention_seconds = stall_attention_seconds - o.stall_attention_seconds;
  d.stall_mlp_seconds = stall_mlp_seconds - o.stall_mlp_seconds;
  d.stall_input_seconds = stall_input_seconds - o.stall_input_seconds;
  d.stall_records_seconds = stall_records_seconds - o.stall_records_seconds;
  d.io_seconds = io_seconds - o.io_seconds;
  return d;
}

namespace {

// Adds a wait for a block of an extent of `kind` to the stall, and to its kind's share.
void AddStall(StreamStats* s, uint32_t kind, double seconds) {
  s->stall_seconds += seconds;
  if (kind == kAttentionBlockKind) {
    s->stall_attention_seconds += seconds;
  } else if (kind == kInputBlockKind) {
    s->stall_input_seconds += seconds;
  } else {
    s->stall_mlp_seconds += seconds;
  }
}

storage::CacheOptions CacheOptionsOf(const StreamingOptions& options) {
  storage::CacheOptions co;
  co.budget_bytes = options.cache_budget;
  co.alignment = kPage;
  co.record_trace = options.record_trace;
  return co;
}

}  // namespace

Result<StreamPlan::EntryCharge> BlockStreamer::EntryChargeOf(const StreamingOptions& options) {
  // Charges need the policy's per-entry bytes; a throwaway cache computes them.
  WEIR_ASSIGN_OR_RETURN(auto probe_policy,
                        storage::MakeEvictionPolicy(options.policy, options.policy_options));
  WEIR_ASSIGN_OR_RETURN(
      auto probe, storage::WeightCache::Create(CacheOptionsOf(options), std::move(probe_policy)));
  std::shared_ptr<storage::WeightCache> cache = std::move(probe);
  return StreamPlan::EntryCharge(
      [cache](uint64_t bytes) { return cache->EntryCharge(static_cast<size_t>(bytes)); });
}

Result<std::unique_ptr<BlockStreamer>> BlockStreamer::Create(const StreamPlan& plan,
                                                             storage::BlockDevice* device) {
  const StreamingOptions& options = plan.options;
  std::unique_ptr<BlockStreamer> s(new BlockStreamer(plan, device));
  WEIR_ASSIGN_OR_RETURN(s->slabs_,
                        storage::SlabPlacement::Create(plan.slabs, plan.deferred_release_bytes));
  s->state_.resize(plan.slabs.size());
  for (size_t i = 0; i < plan.slabs.size(); ++i)
    s->state_[i].base = s->slabs_->base(static_cast<uint32_t>(i));

  // Cache: group partitions and the staging partition, weighted in bytes.
  storage::PolicyOptions policy_options = options.policy_options;
  policy_options.read_ahead_partition = plan.staging_partition;
  WEIR_ASSIGN_OR_RETURN(auto policy, storage::MakeEvictionPolicy(options.policy, policy_options));
  storage::CacheOptions co = CacheOptionsOf(options);
  co.placement = s->slabs_.get();
  co.partition_weights = plan.PartitionWeights(options.cache_budget);
  WEIR_ASSIGN_OR_RETURN(s->cache_, storage::WeightCache::Create(co, std::move(policy)));
  storage::Prefetcher::Options po;
  // io_batch blocks per device read batch, and at least 8 MiB when blocks are small (column
  // packs: 4 KiB input blocks whose neighbours the I/O thread merges). The limit is in bytes, so
  // that a batch of small blocks keeps as many reads in flight as one of large blocks: with a
  // limit of 64-128 jobs, a grouped column pack's 4 KiB blocks went out 256-512 KiB at a time
  // and its span reads ran at a third of the disk's speed (1.1B, dip span=4).
  po.max_batch_bytes =
      std::max<uint64_t>(uint64_t{8} << 20, uint64_t{options.io_batch} * options.block_bytes);
  po.max_batch = std::max<size_t>(1, static_cast<size_t>(po.max_batch_bytes / 4096));
  WEIR_ASSIGN_OR_RETURN(s->prefetcher_, storage::Prefetcher::Create(s->cache_.get(), po));
  s->resident_mode_ = s->CheckResidentMode();
  return s;
}

BlockStreamer::~BlockStreamer() {
  Shutdown();
  attention_batch_ = Batch();
  for (ExtentState& e : state_) e.pins.clear();
  prefetcher_.reset();
  cache_.reset();  // before the slabs its entries live in
}

void BlockStreamer::Shutdown() {
  if (prefetcher_) prefetcher_->Shutdown();
  if (records_) records_->DropAhead();
}

bool BlockStreamer::CheckResidentMode() const {
  for (size_t p = 0; p < plan_.partition_charge.size(); ++p) {
    if (cache_->partition_stats(static_cast<uint32_t>(p)).budget_bytes < plan_.partition_charge[p])
      return false;
  }
  return true;
}

void BlockStreamer::BeginToken() {
  cache_->BeginToken();
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.tokens;
}

void BlockStreamer::ResetSequence() { cache_->ResetSequence(); }

Status BlockStreamer::SetCacheBudget(uint64_t bytes) {
  // Leaving resident mode: unpin everything so the cache can evict.
  for (ExtentState& e : state_) {
    e.pins.clear();
    e.held = false;
  }
  // Reads in flight hold their blocks pinned until they land: wait for them, so that what is
  // pinned when the cache shrinks does not depend on the I/O thread's timing.
  prefetcher_->CancelAll();
  prefetcher_->WaitIdle();
  WEIR_RETURN_IF_ERROR(cache_->SetBudget(bytes, PartitionWeights(bytes)));
  resident_mode_ = CheckResidentMode();
  return Status::Ok();
}

Status BlockStreamer::set_sparse_mlp(bool sparse) {
  if (sparse == sparse_mlp_) return Status::Ok();
  sparse_mlp_ = sparse;
  if (!plan_.expert_records()) return Status::Ok();
  // The shares change with the mode: the budget is set again under them (which leaves and
  // re-checks resident mode, and waits for reads in flight).
  Status st = SetCacheBudget(cache_->stats().budget_bytes);
  if (!st.ok()) sparse_mlp_ = !sparse;
  return st;
}

Result<storage::CacheHandle> BlockStreamer::AcquireCopy(const Extent& e, uint64_t block,
                                                        size_t bytes) {
  Result<storage::CacheHandle> h =
      cache_->Acquire(storage::MakeUnitId(e.slab, e.kind, block), bytes, e.partition);
  if (!h.ok()) {
    if (h.status().code() == Status::Code::kOutOfMemory) return storage::CacheHandle();
    return h.status();
  }
  // Only this thread loads copies, and it publishes before it asks again: a present copy is
  // ready (Wait returns at once).
  if (!h->is_loader() && !h->ready()) WEIR_RETURN_IF_ERROR(h->Wait());
  return std::move(h).value();
}

void BlockStreamer::UpdateStats(const std::function<void(StreamStats&)>& update) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  update(stats_);
}

StreamStats BlockStreamer::stats() const {
  StreamStats s;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    s = stats_;
    if (records_ != nullptr) {  // made under this lock
      const storage::RecordBuffers::Stats r = records_->stats();
      s.storage_bytes += r.reads.bytes_read;
      s.storage_reads += r.reads.reads;
      s.io_seconds += r.reads.seconds;
      s.record_bytes = r.reads.bytes_read;
      s.record_reads = r.reads.reads;
      s.record_io_seconds = r.reads.seconds;
      s.records_read += r.reads.records;
      s.prefetched_bytes += r.ahead_bytes;
      s.records_ahead += r.ahead_records;
      s.records_ahead_used += r.ahead_records_used;
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

Result<bool> BlockStreamer::ReadRecords(const Extent& e, uint64_t record_bytes,
                                        const int64_t* slots, int64_t n, int32_t* places,
                                        uint64_t at) {
  if (plan_.record_buffer_bytes == 0) return false;
  if (records_ == nullptr) {
    const bool ahead = record_ahead_ && plan_.record_ahead_bytes > 0;
    WEIR_ASSIGN_OR_RETURN(
        std::unique_ptr<storage::RecordBuffers> buffers,
        storage::RecordBuffers::Create(device_, plan_.record_buffer_bytes, ahead));
    record_ahead_made_ = ahead;
    std::lock_guard<std::mutex> lock(stats_mu_);  // stats() reads it
    records_ = std::move(buffers);
  }
  const Clock::time_point t0 = Clock::now();
  // The compute waits for these records: the I/O thread starts no read ahead meanwhile.
  prefetcher_->Pause();
  const Result<bool> read = records_->Read(e.offset + at, record_bytes, slots, n, places);
  prefetcher_->Resume();
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    const double waited = Since(t0);
    stats_.stall_seconds += waited;
    stats_.stall_records_seconds += waited;
    if (read.ok() && *read) {
      stats_.block_accesses += static_cast<uint64_t>(n);
      stats_.accessed_bytes += static_cast<uint64_t>(n) * record_bytes;
    }
  }
  return read;
}

bool BlockStreamer::ReadRecordsAhead(const Extent& e, uint64_t record_bytes,
                                     std::vector<int64_t> slots) {
  if (records_ == nullptr) return false;
  return records_->ReadAhead(e.offset, record_bytes, std::move(slots));
}

storage::UnitRead BlockStreamer::BlockRead(const Extent& e, uint64_t block) const {
  storage::UnitRead r;
  r.id = storage::MakeUnitId(e.slab, e.kind, block);
  r.partition = e.partition;
  r.device = device_;
  const uint64_t begin = block * e.block_bytes;
  r.offset = e.offset + begin;
  r.length = static_cast<size_t>(std::min<uint64_t>(e.block_bytes, e.nbytes - begin));
  return r;
}

Result<const std::byte*> BlockStreamer::EmbeddingRows(std::span<const int32_t> tokens) {
  const uint64_t row = plan_.embedding_row_bytes;
  if (row == 0) return Status::Internal("streaming: the token embedding is not streamed");
  if (tokens.size() > static_cast<size_t>(StreamPlan::kEmbeddingBatchRows)) {
    return Status::Internal("streaming: too many embedding rows in one read");
  }
  embedding_rows_.resize(static_cast<size_t>(StreamPlan::kEmbeddingBatchRows * row));
  std::vector<storage::ReadRequest> reads(tokens.size());
  for (size_t k = 0; k < tokens.size(); ++k) {
    if (tokens[k] < 0 || tokens[k] >= plan_.embedding_rows) {
      return Status::InvalidArgument(StrFormat("token %d is outside the vocabulary (%lld)",
                                               tokens[k],
                                               static_cast<long long>(plan_.embedding_rows)));
    }
    reads[k].offset = plan_.embedding_offset + static_cast<uint64_t>(tokens[k]) * row;
    reads[k].length = static_cast<size_t>(row);
    reads[k].dst = embedding_rows_.data() + k * row;
  }
  const Clock::time_point t0 = Clock::now();
  const Status st = device_->Read(std::span<storage::ReadRequest>(reads));
  const double waited = Since(t0);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.io_seconds += waited;
    stats_.stall_seconds += waited;
    stats_.embedding_bytes += tokens.size() * row;
    stats_.embedding_reads += tokens.size();
  }
  if (!st.ok()) return st.WithContext("reading the embedding rows of the tokens");
  return static_cast<const std::byte*>(embedding_rows_.data());
}

void BlockStreamer::CountAccess(uint64_t bytes, bool hit) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.block_accesses += 1;
  stats_.accessed_bytes += bytes;
  if (hit) {  // resident mode; cache hits are counted by the cache
    stats_.block_hits += 1;
    stats_.cache_bytes += bytes;
  }
}

void BlockStreamer::Prefetch(int layer) {
  if (plan_.options.prefetch_layers < 0) return;  // no read-ahead
  // Positions count layers across tokens (lap * n_layers + layer), so reading ahead runs on
  // from the last layers of one token into the first layers of the next.
  if (layer < last_layer_) ++lap_;
  last_layer_ = layer;
  const int64_t now = lap_ * plan_.n_layers + layer;
  if (ahead_.position < now) ahead_ = Cursor{now, 0, 0};  // fell behind: read ahead from here
  // Span mode reads a group's W_down while the group before it computes: a group ahead.
  const int64_t reach = span_down_ahead_
                            ? std::max<int64_t>(plan_.options.prefetch_layers, plan_.max_group_layers)
                            : plan_.options.prefetch_layers;
  const int64_t limit = now + reach;
  // Prefetched blocks wait in staging, pinned, until the compute claims them.
  const storage::PartitionStats staging = cache_->partition_stats(plan_.staging_partition);
  uint64_t room =
      staging.budget_bytes > staging.pinned_bytes ? staging.budget_bytes - staging.pinned_bytes : 0;
  // Wait for a worthwhile amount of room: the I/O thread merges what it is given at once into
  // large reads, and storage is several times faster in MiB-sized reads than in single blocks.
  const uint64_t worthwhile = std::min<uint64_t>(staging.budget_bytes / 4, uint64_t{8} << 20);
  if (room < worthwhile && ahead_.position > now) return;
  while (ahead_.position <= limit) {
    const int l = static_cast<int>(ahead_.position % plan_.n_layers);
    const Extent* e = nullptr;
    if (ahead_.phase == 0 && !plan_.attention.empty()) e = &plan_.attention[static_cast<size_t>(l)];
    if (ahead_.phase >= 1 && !sparse_mlp_) {
      // A group's MLP tensors serve all its layers: bundles, or the input columns then the
      // down columns. Sparse mode reads MLP columns by prediction instead (PredictNextLayer).
      const StreamPlan::Group& g = plan_.group_of_layer(l);
      // Experts are read when the router chooses them (Prepare, Predict), never whole.
      if (g.pack.first_layer == l && !g.experts) {
        if (g.columns) {
          e = ahead_.phase == 1 ? &g.in : &g.extent;
        } else if (ahead_.phase == 1) {
          e = &g.extent;
        }
      }
    }
    if (ahead_.phase == 2 && sparse_mlp_ && span_down_ahead_) {
      const StreamPlan::Group& g = plan_.group_of_layer(l);
      if (g.columns && !g.sparse && g.pack.first_layer == l) e = &g.extent;
    }
    if (e != nullptr && !held(*e)) {
      for (; ahead_.block < e->n_blocks; ++ahead_.block) {
        storage::UnitRead r = BlockRead(*e, ahead_.block);
        if (cache_->Contains(r.id)) continue;
        const uint64_t charge = cache_->UnitCharge(r.id, r.length);
        if (charge > room) return;  // resume here when the compute has claimed some
        r.partition = plan_.staging_partition;
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

Status BlockStreamer::LoadResident(const Extent& e) {
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
      AddStall(&stats_, e.kind, Since(t0));
    }
    CountAccess(r.length, false);
    if (!h.ok()) return h.status();
    pins.push_back(std::move(h).value());
  }
  state_[e.slab].pins = std::move(pins);
  state_[e.slab].held = true;
  return Status::Ok();
}

Status BlockStreamer::AcquireAttention(int layer) {
  if (plan_.attention.empty()) return Status::Ok();  // attention is static
  WEIR_CHECK(layer >= 0 && layer < static_cast<int>(plan_.attention.size()));
  const Extent& e = plan_.attention[static_cast<size_t>(layer)];
  Prefetch(layer);
  if (resident_mode_ && !held(e)) WEIR_RETURN_IF_ERROR(LoadResident(e));
  if (held(e)) {
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

void BlockStreamer::ReleaseAttention() {
  // Transient blocks give their pages back; pinned ones are unpinned.
  for (const auto& [p, bytes] : attention_batch_.transient) slabs_->Discard(p, bytes);
  attention_batch_ = Batch();
}

Status BlockStreamer::AcquireBlock(const Extent& e, uint64_t block, Batch* batch,
                                   const std::function<bool()>& make_room, bool claim_queued) {
  storage::UnitRead r = BlockRead(e, block);
  const uint64_t charge = cache_->UnitCharge(r.id, r.length);
  CountAccess(r.length, false);
  const Clock::time_point t0 = Clock::now();
  auto stall = [&] {
    std::lock_guard<std::mutex> lock(stats_mu_);
    AddStall(&stats_, e.kind, Since(t0));
  };
  auto take = [&](storage::CacheHandle h) {
    if (h.partition() == plan_.staging_partition && r.partition != plan_.staging_partition) {
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
  // drop read-ahead and wait out the reads in flight, then finish earlier work, then reserve in
  // the partition itself. Waiting makes what is pinned in staging at that point -- and so which
  // of these paths is taken, and what the layer groups' partitions end up holding, the state
  // DIP-CA's mask reads -- independent of how fast the I/O thread was.
  storage::UnitRead staged = r;
  staged.partition = plan_.staging_partition;
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
  if (oom(h)) {
    prefetcher_->CancelAll();
    prefetcher_->WaitIdle();
    h = prefetcher_->Get(staged);
  }
  if (oom(h) && make_room && make_room()) h = prefetcher_->Get(staged);
  if (oom(h)) h = prefetcher_->Get(r);
  if (h.ok()) {
    stall();
    take(std::move(h).value());
    return Status::Ok();
  }
  if (!oom(h)) return h.status();
  // Transient: read into the slab place without a cache entry; dropped after use.
  std::byte* dst = base(e) + block * e.place_bytes;
  // What the place takes once written (whole huge pages in their slabs): given back whole.
  const size_t footprint = slabs_->Footprint(r.id, RoundUp(r.length, kPage));
  const size_t len = storage::RoundedReadLength(*device_, r.offset, r.length, dst, footprint);
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
  batch->transient.emplace_back(dst, footprint);
  batch->blocks.push_back(block);
  batch->handles.emplace_back();  // keeps blocks and handles index-aligned
  if (!st.ok()) {
    return st.WithContext(StrFormat("reading block %llu of extent %u",
                                    static_cast<unsigned long long>(block), e.slab));
  }
  return Status::Ok();
}

void BlockStreamer::Release(Batch* batch, uint64_t keep_from_block, const Extent& e) {
  size_t keep = 0;
  while (keep < batch->blocks.size() && batch->blocks[keep] < keep_from_block) ++keep;
  for (size_t i = 0; i < keep; ++i) {
    if (batch->handles[i].valid()) {
      batch->pinned_bytes -= cache_->UnitCharge(
          storage::MakeUnitId(e.slab, e.kind, batch->blocks[i]), batch->handles[i].size());
      batch->handles[i].Reset();
    }
  }
  // Transient blocks of the released prefix give their pages back -- unless the block has been
  // reserved in the cache since (read-ahead): its entry owns the place now, and holds the same
  // bytes. Reservations are made on this thread only, so the check cannot race with one.
  std::vector<std::pair<std::byte*, size_t>> still;
  for (const auto& [p, bytes] : batch->transient) {
    const uint64_t block = static_cast<uint64_t>(p - base(e)) / e.place_bytes;
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

void BlockStreamer::QueueMissing(const Extent& e, const std::vector<uint64_t>& blocks, size_t from,
                                 std::vector<storage::UnitId>* queued) {
  for (size_t k = from; k < blocks.size(); ++k) {
    storage::UnitRead r = BlockRead(e, blocks[k]);
    if (cache_->Contains(r.id)) continue;
    r.partition = plan_.staging_partition;
    if (!prefetcher_->Enqueue(r).ok()) return;  // staging is full: the rest later or on demand
    if (queued != nullptr) queued->push_back(r.id);
  }
}

Status BlockStreamer::AcquireBlocks(const Extent& e, const std::vector<uint64_t>& blocks,
                                    bool queued, Batch* batch) {
  if (held(e)) {
    for (uint64_t b : blocks) CountAccess(BlockRead(e, b).length, true);
    return Status::Ok();
  }
  // The missing blocks go to the I/O thread at once, so that it merges neighbours into large
  // reads. When staging is full, queueing stops; it is tried again from the first block found
  // missing (claiming frees staging room as blocks move to their partitions), so that blocks
  // are read on demand one by one only when no room can be had.
  if (!queued) QueueMissing(e, blocks, 0, nullptr);
  for (size_t k = 0; k < blocks.size(); ++k) {
    const uint64_t b = blocks[k];
    if (!cache_->Contains(BlockRead(e, b).id)) QueueMissing(e, blocks, k, nullptr);
    if (Status st = AcquireBlock(e, b, batch, nullptr, /*claim_queued=*/true); !st.ok()) {
      Release(batch, UINT64_MAX, e);
      return st;
    }
  }
  return Status::Ok();
}

void BlockStreamer::ResidentBlocks(const Extent& e, uint64_t* words) const {
  // With read-ahead, what the groups' partitions hold, not staging: the I/O thread fills and
  // evicts staging ahead of the compute, and a mask that saw it would change with the I/O
  // thread's timing (DIP-CA's runs were not reproducible with read-ahead on). Without
  // read-ahead staging only changes by the compute's own reads, and counts.
  const uint32_t except = plan_.options.prefetch_layers >= 0 ? plan_.staging_partition : UINT32_MAX;
  cache_->ResidentMask(storage::MakeUnitId(e.slab, e.kind, 0), e.n_blocks, words, except);
}

}  // namespace weir::model
