// Prefetcher: delivers the right bytes into the cache, propagates read errors to the waiter,
// supports on-demand loads, cancellation and a clean shutdown with work still queued.
#include "storage/prefetcher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "storage/fault_injecting_device.h"
#include "storage/memory_device.h"
#include "storage/open_device.h"
#include "storage_test_util.h"

namespace weir::storage {
namespace {

constexpr size_t kUnitBytes = 3000;  // not a multiple of any alignment on purpose

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::unique_ptr<WeightCache> MakeCache(uint64_t units, const char* policy = "lru",
                                       size_t alignment = 64) {
  CacheOptions o;
  o.alignment = alignment;
  auto c = WeightCache::Create(o, MakeEvictionPolicy(policy).value()).value();
  EXPECT_TRUE(c->SetBudget(units * c->EntryCharge(kUnitBytes)).ok());
  return c;
}

UnitRead ReadOf(BlockDevice* dev, UnitId i) {
  return UnitRead{i, 0, dev, i * kUnitBytes, kUnitBytes};
}

// Blocks reads that start at `gated_offset` until Open(): keeps the I/O thread busy on one job
// so that the jobs behind it are deterministically still queued (or, with the batch taken
// whole, that every job of the batch is deterministically still in flight).
class GateDevice : public BlockDevice {
 public:
  GateDevice(const std::string& bytes, uint64_t gated_offset)
      : inner_("gate", bytes), gated_(gated_offset) {}
  Status ReadAt(uint64_t offset, size_t length, void* dst) override {
    if (offset == gated_) {
      std::unique_lock<std::mutex> lock(mu_);
      reading_ = true;
      cv_.notify_all();
      cv_.wait(lock, [this] { return open_; });
    }
    return inner_.ReadAt(offset, length, dst);
  }
  uint64_t size() const override { return inner_.size(); }
  const std::string& name() const override { return inner_.name(); }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // Blocks until a read of the gated offset has started.
  void WaitUntilReading() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return reading_; });
  }

 private:
  MemoryDevice inner_;
  uint64_t gated_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  bool reading_ = false;
};

// Stalls every batch read (the I/O thread's path; Get reads with ReadAt) by `stall` before
// passing it on: the I/O thread descheduled in the middle of a batch, which a loaded machine
// does now and then.
class StallingDevice : public BlockDevice {
 public:
  StallingDevice(BlockDevice* inner, std::chrono::microseconds stall)
      : inner_(inner), stall_(stall) {}
  Status ReadAt(uint64_t offset, size_t length, void* dst) override {
    return inner_->ReadAt(offset, length, dst);
  }
  Status Read(std::span<ReadRequest> requests) override {
    std::this_thread::sleep_for(stall_);
    return inner_->Read(requests);
  }
  uint64_t size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  size_t required_alignment() const override { return inner_->required_alignment(); }
  size_t preferred_alignment() const override { return inner_->preferred_alignment(); }

 private:
  BlockDevice* inner_;
  std::chrono::microseconds stall_;
};

// Waits until `done()` holds, polling (the condition lives inside the code under test, which
// has no hook to signal it). The bound only turns a hang into a failure; it never decides
// pass or fail on a machine that is merely slow.
template <typename Pred>
bool EventuallyTrue(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

void ExpectBytes(const CacheHandle& h, const std::string& file, uint64_t offset) {
  ASSERT_TRUE(h.ready());
  ASSERT_EQ(0, std::memcmp(h.data(), file.data() + offset, h.size())) << "unit " << h.id();
}

TEST(PrefetcherTest, DeliversUnitsIntoTheCache) {
  const std::string bytes = RandomBytes(200 * kUnitBytes, 1);
  MemoryDevice dev("weights", bytes);
  auto cache = MakeCache(256);
  auto pf = Prefetcher::Create(cache.get(), {.max_batch = 16}).value();
  for (UnitId i = 0; i < 200; ++i) ASSERT_TRUE(pf->Enqueue(ReadOf(&dev, i)).ok());
  ASSERT_TRUE(pf->Enqueue(ReadOf(&dev, 5)).ok());  // a duplicate is not read twice
  for (UnitId i = 0; i < 200; ++i) {
    auto h = pf->Wait(i);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ExpectBytes(*h, bytes, i * kUnitBytes);
  }
  Prefetcher::Stats s = pf->stats();
  EXPECT_EQ(s.enqueued, 200u);
  EXPECT_EQ(s.completed, 200u);
  EXPECT_GE(s.batches, 200u / 16);
  CacheStats cs = cache->stats();
  EXPECT_EQ(cs.prefetch_hits, 200u);
  EXPECT_EQ(cs.misses, 0u);
  EXPECT_EQ(cs.inserted_bytes, 200 * kUnitBytes);
  // Claimed units are no longer held by the prefetcher.
  EXPECT_EQ(cs.pinned_bytes, 0u);
  // Waiting for a unit nobody enqueued is NotFound, not a hang.
  auto none = pf->Wait(9999);
  EXPECT_EQ(none.status().code(), Status::Code::kNotFound);
}

TEST(PrefetcherTest, ReadsFromRealDevicesInBatches) {
  test::RandomFile f = test::MakeRandomFile(300 * kUnitBytes + 77, 2);
  for (const char* kind : {"io_uring", "io_uring+direct", "direct", "pread"}) {
    DeviceOptions o;
    o.kind = kind;
    o.queue_depth = 8;
    auto dev = OpenDevice(f.path, o);
    if (!dev.ok() && dev.status().code() == Status::Code::kUnsupported) continue;
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    // 4096-aligned entries: O_DIRECT reads go straight into the cache, rounded up.
    auto cache = MakeCache(400, "lru", 4096);
    auto pf = Prefetcher::Create(cache.get(), {}).value();
    // Units at 4096-aligned offsets (zero-copy) and at odd offsets (bounced).
    std::vector<UnitRead> reads;
    for (UnitId i = 0; i < 150; ++i) {
      const uint64_t off = (i % 2 == 0) ? (i * 4096) % (250 * kUnitBytes) : i * kUnitBytes + 13;
      reads.push_back({i, 0, dev->get(), off, kUnitBytes});
    }
    reads.push_back({1000, 0, dev->get(), 300 * kUnitBytes + 77 - kUnitBytes, kUnitBytes});  // tail
    for (const UnitRead& r : reads) ASSERT_TRUE(pf->Enqueue(r).ok());
    for (const UnitRead& r : reads) {
      auto h = pf->Wait(r.id);
      ASSERT_TRUE(h.ok()) << kind << ": " << h.status().ToString();
      ExpectBytes(*h, f.bytes, r.offset);
    }
  }
}

TEST(PrefetcherTest, ReadErrorsReachTheWaiter) {
  const std::string bytes = RandomBytes(50 * kUnitBytes, 3);
  FaultOptions fo;
  fo.fail_after_reads = 10;
  FaultInjectingDevice dev(std::make_unique<MemoryDevice>("w", bytes), fo);
  auto cache = MakeCache(64);
  auto pf = Prefetcher::Create(cache.get(), {.max_batch = 4}).value();
  for (UnitId i = 0; i < 30; ++i) ASSERT_TRUE(pf->Enqueue(ReadOf(&dev, i)).ok());
  int ok = 0, failed = 0;
  for (UnitId i = 0; i < 30; ++i) {
    auto h = pf->Wait(i);
    if (h.ok()) {
      ++ok;
      ExpectBytes(*h, bytes, i * kUnitBytes);  // never wrong bytes
    } else {
      ++failed;
      EXPECT_EQ(h.status().code(), Status::Code::kIoError) << h.status().ToString();
      EXPECT_NE(h.status().message().find("prefetching unit"), std::string::npos);
      EXPECT_FALSE(cache->Contains(i));  // a failed unit is not left in the cache
    }
  }
  EXPECT_EQ(ok, 10);
  EXPECT_EQ(failed, 20);
  EXPECT_EQ(pf->stats().failed, 20u);
  // The on-demand path reports the error too.
  auto again = pf->Get(ReadOf(&dev, 20));
  EXPECT_EQ(again.status().code(), Status::Code::kIoError);
  EXPECT_EQ(cache->stats().pinned_bytes, 0u);
}

TEST(PrefetcherTest, GetLoadsOnDemandAndStealsQueuedJobs) {
  const std::string bytes = RandomBytes(40 * kUnitBytes, 4);
  GateDevice dev(bytes, 0);  // unit 0's read blocks until the gate opens
  MemoryDevice fast("f", bytes);
  auto cache = MakeCache(64);
  auto pf = Prefetcher::Create(cache.get(), {.max_batch = 1}).value();
  // Not enqueued: read on the calling thread.
  auto h = pf->Get(ReadOf(&fast, 30));
  ASSERT_TRUE(h.ok());
  ExpectBytes(*h, bytes, 30 * kUnitBytes);
  EXPECT_EQ(pf->stats().on_demand, 1u);
  // Cached: served from the cache.
  auto hit = pf->Get(ReadOf(&fast, 30));
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(cache->stats().hits, 1u);
  // Queued behind the blocked unit 0: Get takes unit 9 off the queue and reads it itself.
  for (UnitId i = 0; i < 10; ++i) ASSERT_TRUE(pf->Enqueue(ReadOf(&dev, i)).ok());
  auto last = pf->Get(ReadOf(&dev, 9));
  ASSERT_TRUE(last.ok());
  ExpectBytes(*last, bytes, 9 * kUnitBytes);
  EXPECT_EQ(pf->stats().stolen, 1u);
  dev.Open();
  for (UnitId i = 0; i < 9; ++i) {
    auto w = pf->Get(ReadOf(&dev, i));
    ASSERT_TRUE(w.ok());
    ExpectBytes(*w, bytes, i * kUnitBytes);
  }
  EXPECT_EQ(pf->stats().on_demand, 1u);  // nothing else was read twice or missed
  // Bad reads are refused up front.
  EXPECT_EQ(pf->Get(UnitRead{1, 0, &fast, bytes.size() - 10, 20}).status().code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(pf->Enqueue(UnitRead{1, 0, nullptr, 0, 20}).code(), Status::Code::kInvalidArgument);
}

TEST(PrefetcherTest, BatchesEndAtTheByteLimit) {
  const std::string bytes = RandomBytes(120 * kUnitBytes, 11);
  GateDevice dev(bytes, 0);  // unit 0's read blocks until the gate opens
  auto cache = MakeCache(128);
  auto pf = Prefetcher::Create(cache.get(), {.max_batch = 1000, .max_batch_bytes = 10 * kUnitBytes})
                .value();
  ASSERT_TRUE(pf->Enqueue(ReadOf(&dev, 0)).ok());
  // Wait until the I/O thread has taken unit 0 (its batch is counted when taken), so that the
  // next 100 jobs are all queued when it comes back for more.
  for (int i = 0; i < 10000 && pf->stats().batches == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(pf->stats().batches, 1u);
  for (UnitId i = 1; i <= 100; ++i) ASSERT_TRUE(pf->Enqueue(ReadOf(&dev, i)).ok());
  dev.Open();
  for (UnitId i = 0; i <= 100; ++i) {
    auto h = pf->Wait(i);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ExpectBytes(*h, bytes, i * kUnitBytes);
  }
  // 100 units of kUnitBytes, at most 10 units' bytes per batch: 10 batches after the first (a
  // job-count limit alone would have taken them in one).
  EXPECT_EQ(pf->stats().batches, 11u);
}

TEST(PrefetcherTest, PausedStartsNoBatchUntilResumed) {
  const std::string bytes = RandomBytes(20 * kUnitBytes, 12);
  GateDevice dev(bytes, 0);  // unit 0's read blocks until the gate opens
  auto cache = MakeCache(32);
  auto pf = Prefetcher::Create(cache.get(), {.max_batch = 1}).value();
  ASSERT_TRUE(pf->Enqueue(ReadOf(&dev, 0)).ok());
  for (int i = 0; i < 10000 && pf->stats().batches == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(pf->stats().batches, 1u);  // unit 0 is in flight
  pf->Pause();
  pf->Pause();  // pauses nest
  for (UnitId i = 1; i <= 5; ++i) ASSERT_TRUE(pf->Enqueue(ReadOf(&dev, i)).ok());
  dev.Open();
  auto first = pf->Wait(0);  // the batch in flight finishes
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // A queued unit can still be read on the caller.
  auto taken = pf->Get(ReadOf(&dev, 5));
  ASSERT_TRUE(taken.ok());
  ExpectBytes(*taken, bytes, 5 * kUnitBytes);
  // Unpaused, the I/O thread would take units 1-4 at once (one batch each).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(pf->stats().batches, 1u);
  pf->Resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(pf->stats().batches, 1u);  // one Pause is still in force
  pf->Resume();
  for (UnitId i = 1; i <= 4; ++i) {
    auto h = pf->Wait(i);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ExpectBytes(*h, bytes, i * kUnitBytes);
  }
  EXPECT_EQ(pf->stats().batches, 5u);
}

TEST(PrefetcherTest, CancelDropsStaleJobs) {
  const std::string bytes = RandomBytes(40 * kUnitBytes, 5);
  GateDevice dev(bytes, 0);
  auto cache = MakeCache(64);
  auto pf = Prefetcher::Create(cache.get(), {.max_batch = 1}).value();
  for (UnitId i = 0; i < 20; ++i) ASSERT_TRUE(pf->Enqueue(ReadOf(&dev, i)).ok());
  // Jobs 1..19 are queued behind the blocked unit 0: cancelling drops their reservations, and
  // waiting for them afterwards is NotFound.
  EXPECT_TRUE(pf->Cancel(19));
  EXPECT_TRUE(pf->Cancel(18));
  EXPECT_FALSE(pf->Cancel(18));  // nothing left to cancel
  EXPECT_FALSE(cache->Contains(19));
  EXPECT_EQ(pf->Wait(19).status().code(), Status::Code::kNotFound);
  dev.Open();
  auto h = pf->Wait(1);
  ASSERT_TRUE(h.ok());
  ExpectBytes(*h, bytes, 1 * kUnitBytes);
  h->Reset();
  const size_t n = pf->CancelAll();
  EXPECT_GE(n, 1u);
  EXPECT_GE(pf->stats().cancelled, 2u);
  // Whatever completed stays cached but is no longer pinned by the prefetcher.
  pf->Shutdown();
  EXPECT_EQ(cache->stats().pinned_bytes, 0u);
  EXPECT_FALSE(pf->Cancel(5));
}

TEST(PrefetcherTest, ShutdownWithQueuedWorkIsClean) {
  const std::string bytes = RandomBytes(100 * kUnitBytes, 6);
  FaultOptions slow;
  slow.delay = std::chrono::milliseconds(5);
  FaultInjectingDevice dev(std::make_unique<MemoryDevice>("w", bytes), slow);
  auto cache = MakeCache(128);
  {
    auto pf = Prefetcher::Create(cache.get(), {.max_batch = 2}).value();
    for (UnitId i = 0; i < 100; ++i) ASSERT_TRUE(pf->Enqueue(ReadOf(&dev, i)).ok());
    // A waiter on a queued unit is released by the shutdown with a Status, not left hanging.
    std::thread waiter([&] {
      auto h = pf->Wait(99);
      if (h.ok())
        ExpectBytes(*h, bytes, 99 * kUnitBytes);
      else
        EXPECT_EQ(h.status().code(), Status::Code::kNotFound);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    pf->Shutdown();
    waiter.join();
    EXPECT_FALSE(pf->Enqueue(ReadOf(&dev, 1)).ok());
    pf->Shutdown();  // idempotent
  }                  // the destructor after an explicit Shutdown
  CacheStats s = cache->stats();
  EXPECT_EQ(s.pinned_bytes, 0u);
  EXPECT_LE(s.current_bytes, s.budget_bytes);
  // Every unit still cached holds the right bytes.
  for (UnitId i = 0; i < 100; ++i) {
    if (!cache->Contains(i)) continue;
    CacheHandle h = cache->Lookup(i);
    ASSERT_TRUE(h.ready());
    ExpectBytes(h, bytes, i * kUnitBytes);
  }
  // A prefetcher destroyed with work queued and nothing else called.
  {
    auto pf = Prefetcher::Create(cache.get(), {}).value();
    for (UnitId i = 200; i < 220; ++i) {
      (void)pf->Enqueue(UnitRead{i, 0, &dev, (i - 200) * kUnitBytes, kUnitBytes});
    }
  }
  EXPECT_EQ(cache->stats().pinned_bytes, 0u);
}

TEST(PrefetcherTest, FullCacheRefusesPrefetchButNotOnDemandCorrectness) {
  const std::string bytes = RandomBytes(20 * kUnitBytes, 7);
  MemoryDevice dev("w", bytes);
  auto cache = MakeCache(4);
  auto pf = Prefetcher::Create(cache.get(), {}).value();
  // Four prefetched units fill the cache and stay pinned until claimed.
  for (UnitId i = 0; i < 4; ++i) ASSERT_TRUE(pf->Enqueue(ReadOf(&dev, i)).ok());
  Status st = pf->Enqueue(ReadOf(&dev, 4));
  EXPECT_EQ(st.code(), Status::Code::kOutOfMemory);
  // Claim and release one: room again.
  {
    auto h = pf->Wait(0);
    ASSERT_TRUE(h.ok());
  }
  EXPECT_TRUE(pf->Enqueue(ReadOf(&dev, 4)).ok());
  auto h4 = pf->Wait(4);
  ASSERT_TRUE(h4.ok());
  ExpectBytes(*h4, bytes, 4 * kUnitBytes);
}

TEST(PrefetcherTest, GetWaitsForCancelledReadsToGiveTheirRoomBack) {
  // Four prefetches fill the cache and are in flight together, blocked in the device; all four
  // are cancelled. Their reads cannot be taken back (the device is writing into their entries),
  // but their room must come back: a Get that needs it waits for the reads to end instead of
  // failing with OutOfMemory while the compute thread is ahead of the I/O thread.
  const std::string bytes = RandomBytes(20 * kUnitBytes, 13);
  GateDevice dev(bytes, 0);  // unit 0's read blocks until the gate opens
  auto cache = MakeCache(4);
  auto pf = Prefetcher::Create(cache.get(), {.max_batch = 64}).value();
  pf->Pause();  // the four jobs are queued before the I/O thread takes any: one batch
  for (UnitId i = 0; i < 4; ++i) ASSERT_TRUE(pf->Enqueue(ReadOf(&dev, i)).ok());
  pf->Resume();
  dev.WaitUntilReading();
  EXPECT_EQ(pf->stats().batches, 1u);
  for (UnitId i = 0; i < 4; ++i) EXPECT_TRUE(pf->Cancel(i));
  EXPECT_EQ(cache->stats().pinned_bytes, 4 * cache->EntryCharge(kUnitBytes));

  Result<CacheHandle> got = Status::Internal("Get did not return");
  std::thread compute([&] { got = pf->Get(ReadOf(&dev, 10)); });
  // The gate opens only after Get found the cache full, so Get certainly ran into the pinned
  // room (before the fix it returned OutOfMemory here).
  const bool get_found_it_full =
      EventuallyTrue([&] { return cache->stats().reserve_failures >= 1; });
  dev.Open();
  compute.join();
  ASSERT_TRUE(get_found_it_full);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectBytes(*got, bytes, 10 * kUnitBytes);
  got->Reset();
  // The cancelled units were not held; nothing is overcommitted.
  CacheStats s = cache->stats();
  EXPECT_EQ(s.pinned_bytes, 0u);
  EXPECT_LE(s.current_bytes, s.budget_bytes);
  EXPECT_EQ(pf->stats().completed, 4u);  // Get returned after the cancelled reads had ended
  EXPECT_EQ(pf->stats().on_demand, 1u);
}

TEST(PrefetcherTest, GetDoesNotWaitForPrefetchesStillWanted) {
  // The same full cache, but the prefetches in flight are still wanted (they will be held
  // for Wait/Get when done): waiting would not free their room, so Get reports OutOfMemory at
  // once, with the reads still blocked (it would hang here if it waited).
  const std::string bytes = RandomBytes(20 * kUnitBytes, 14);
  GateDevice dev(bytes, 0);
  auto cache = MakeCache(4);
  auto pf = Prefetcher::Create(cache.get(), {.max_batch = 64}).value();
  pf->Pause();
  for (UnitId i = 0; i < 4; ++i) ASSERT_TRUE(pf->Enqueue(ReadOf(&dev, i)).ok());
  pf->Resume();
  dev.WaitUntilReading();
  auto full = pf->Get(ReadOf(&dev, 10));
  EXPECT_EQ(full.status().code(), Status::Code::kOutOfMemory) << full.status().ToString();
  dev.Open();
  for (UnitId i = 0; i < 4; ++i) {
    auto h = pf->Wait(i);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ExpectBytes(*h, bytes, i * kUnitBytes);
  }
  pf->WaitIdle();
  EXPECT_EQ(cache->stats().pinned_bytes, 0u);
}

// The compute thread prefetches the next "layer" while consuming the current one, with
// on-demand loads for units it did not predict. Every unit it consumes has the right bytes, and
// no Get fails for lack of room: a partition holds 24 units, a layer prefetches at most 16.
void RunComputeAndIoThreads(BlockDevice* dev, const std::string& bytes, int tokens) {
  CacheOptions co;
  co.partition_weights.assign(8, 1);
  auto cache = WeightCache::Create(co, MakeEvictionPolicy("lfu").value()).value();
  ASSERT_TRUE(cache->SetBudget(8 * 24 * cache->EntryCharge(kUnitBytes)).ok());
  auto pf = Prefetcher::Create(cache.get(), {}).value();
  std::mt19937_64 rng(9);
  auto unit = [&](uint32_t layer, uint64_t idx) {
    UnitId id = MakeUnitId(layer, 0, idx);
    return UnitRead{id, layer % 8, dev, (uint64_t(layer) * 64 + idx) * kUnitBytes, kUnitBytes};
  };
  for (int token = 0; token < tokens; ++token) {
    cache->BeginToken();
    std::vector<uint64_t> active(16);
    for (uint32_t layer = 0; layer < 32; ++layer) {
      for (uint64_t& a : active) a = rng() % 64;
      // Predict the next layer's units (half right) and prefetch them.
      if (layer + 1 < 32) {
        for (size_t k = 0; k < active.size(); ++k) {
          (void)pf->Enqueue(unit(layer + 1, k % 2 ? active[k] : rng() % 64));
        }
      }
      for (uint64_t a : active) {
        UnitRead r = unit(layer, a);
        auto h = pf->Get(r);
        ASSERT_TRUE(h.ok()) << h.status().ToString();
        ASSERT_EQ(0, std::memcmp(h->data(), bytes.data() + r.offset, kUnitBytes));
      }
      // Mispredicted units of this layer are stale now.
      for (uint64_t idx = 0; idx < 64; ++idx) pf->Cancel(MakeUnitId(layer, 0, idx));
    }
  }
  pf->Shutdown();
  CacheStats s = cache->stats();
  EXPECT_EQ(s.pinned_bytes, 0u);
  EXPECT_LE(s.current_bytes, s.budget_bytes);
  EXPECT_GT(s.prefetch_hits, 0u);
  EXPECT_GT(s.misses, 0u);
}

TEST(PrefetcherTest, ComputeAndIoThreadsTogether) {
  test::RandomFile f = test::MakeRandomFile(64 * 32 * kUnitBytes, 8);
  DeviceOptions o;
  o.kind = "io_uring";
  auto opened = OpenDevice(f.path, o);
  if (!opened.ok()) {
    o.kind = "pread";
    opened = OpenDevice(f.path, o);
  }
  ASSERT_TRUE(opened.ok());
  RunComputeAndIoThreads(opened->get(), f.bytes, 6);
}

TEST(PrefetcherTest, ComputeAndIoThreadsTogetherWithAStalledIoThread) {
  // The same with every batch of the I/O thread stalled: the compute thread then runs layers
  // ahead while cancelled reads are still in flight.
  const std::string bytes = RandomBytes(64 * 32 * kUnitBytes, 8);
  MemoryDevice mem("w", bytes);
  StallingDevice dev(&mem, std::chrono::milliseconds(1));
  RunComputeAndIoThreads(&dev, bytes, 2);
}

}  // namespace
}  // namespace weir::storage
