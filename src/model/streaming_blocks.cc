// StreamingWeights' block streamer: which blocks to read ahead (the cursor), how a block the
// compute needs is pinned (cached, waited for, read on demand, or read transiently outside the
// cache), releasing them, and the attention extents pinned around a layer's attention.
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

storage::UnitRead StreamingWeights::BlockRead(const Extent& e, uint64_t block) const {
  storage::UnitRead r;
  r.id = storage::MakeUnitId(e.slab, e.kind, block);
  r.partition = e.partition;
  r.device = device_;
  const uint64_t begin = block * e.block_bytes;
  r.offset = e.offset + begin;
  r.length = static_cast<size_t>(std::min<uint64_t>(e.block_bytes, e.nbytes - begin));
  return r;
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
  const int64_t now = lap_ * plan_.n_layers + layer;
  if (ahead_.position < now) ahead_ = Cursor{now, 0, 0};  // fell behind: read ahead from here
  const int64_t limit = now + options_.prefetch_layers;
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
      const Group& g = plan_.group_of_layer(l);
      // Experts are read when the router chooses them (Prepare, Predict), never whole.
      if (g.pack.first_layer == l && !g.experts) {
        if (g.columns) {
          e = ahead_.phase == 1 ? &g.in : &g.extent;
        } else if (ahead_.phase == 1) {
          e = &g.extent;
        }
      }
    }
    if (e != nullptr && !Held(*e)) {
      for (; ahead_.block < e->n_blocks; ++ahead_.block) {
        storage::UnitRead r = BlockRead(*e, ahead_.block);
        if (cache_->Contains(r.id)) continue;
        const uint64_t charge = cache_->EntryCharge(r.length);
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

Status StreamingWeights::LoadResident(const Extent& e) {
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
  extent_state_[e.slab].pins = std::move(pins);
  extent_state_[e.slab].held = true;
  return Status::Ok();
}

Status StreamingWeights::AcquireAttention(int layer) {
  if (plan_.attention.empty()) return Status::Ok();  // attention is static
  WEIR_CHECK(layer >= 0 && layer < static_cast<int>(plan_.attention.size()));
  const Extent& e = plan_.attention[static_cast<size_t>(layer)];
  Prefetch(layer);
  if (resident_mode_ && !Held(e)) WEIR_RETURN_IF_ERROR(LoadResident(e));
  if (Held(e)) {
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

Status StreamingWeights::AcquireBlock(const Extent& e, uint64_t block, Batch* batch,
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
  std::byte* dst = Base(e) + block * e.block_bytes;
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
    const uint64_t block = static_cast<uint64_t>(p - Base(e)) / e.block_bytes;
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

}  // namespace weir::model
