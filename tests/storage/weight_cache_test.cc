// WeightCache: budget accounting (never exceeded, checked after every operation of a random
// workload), pins, loads and their futures, partitions, run-time budget changes.
#include "storage/weight_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "storage/belady_policy.h"

namespace weir::storage {
namespace {

std::unique_ptr<WeightCache> MakeCache(uint64_t budget, const char* policy = "lru",
                                       std::vector<uint64_t> weights = {}, size_t alignment = 64) {
  CacheOptions o;
  o.budget_bytes = budget;
  o.partition_weights = std::move(weights);
  o.alignment = alignment;
  PolicyOptions po;
  po.window_tokens = 2;
  if (std::string(policy) == "belady") {
    for (int i = 0; i < 1000; ++i) po.belady_trace.push_back(i % 37);
  }
  auto cache = WeightCache::Create(o, MakeEvictionPolicy(policy, po).value());
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  return std::move(cache).value();
}

// The byte a unit's payload holds at position i: lets any reader check it got its own bytes.
std::byte Pattern(UnitId id, size_t i) { return std::byte((id * 131 + i * 7) & 0xff); }

void Fill(CacheHandle& h) {
  for (size_t i = 0; i < h.size(); ++i) h.mutable_data()[i] = Pattern(h.id(), i);
}
bool Intact(const CacheHandle& h) {
  for (size_t i = 0; i < h.size(); ++i) {
    if (h.data()[i] != Pattern(h.id(), i)) return false;
  }
  return true;
}

// Loads `id` (Acquire; fill and publish on a miss) and returns the reader handle.
CacheHandle Load(WeightCache& c, UnitId id, size_t bytes, uint32_t partition = 0) {
  auto r = c.Acquire(id, bytes, partition);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return CacheHandle();
  CacheHandle h = std::move(r).value();
  if (h.is_loader()) {
    Fill(h);
    h.Publish();
  }
  return h;
}

void ExpectWithinBudget(const WeightCache& c) {
  CacheStats s = c.stats();
  ASSERT_LE(s.current_bytes, s.budget_bytes);
  uint64_t sum = 0;
  for (uint32_t p = 0; p < c.partition_count(); ++p) {
    PartitionStats ps = c.partition_stats(p);
    ASSERT_LE(ps.current_bytes, ps.budget_bytes) << "partition " << p;
    ASSERT_LE(ps.pinned_bytes, ps.current_bytes);
    sum += ps.current_bytes;
  }
  ASSERT_EQ(sum, s.current_bytes);
}

TEST(WeightCacheTest, MissLoadHit) {
  auto c = MakeCache(1 << 20);
  {
    auto r = c->Acquire(5, 1000, 0);
    ASSERT_TRUE(r.ok());
    CacheHandle h = std::move(r).value();
    ASSERT_TRUE(h.is_loader());
    EXPECT_FALSE(h.ready());
    EXPECT_EQ(h.size(), 1000u);
    EXPECT_EQ(h.capacity(), 1024u);  // rounded up to the 64-byte alignment
    EXPECT_EQ(reinterpret_cast<uintptr_t>(h.mutable_data()) % 64, 0u);
    Fill(h);
    h.Publish();
    EXPECT_TRUE(h.ready());
    EXPECT_FALSE(h.is_loader());
  }
  CacheHandle h = c->Lookup(5);
  ASSERT_TRUE(h.valid());
  EXPECT_TRUE(Intact(h));
  EXPECT_FALSE(c->Lookup(6).valid());
  CacheStats s = c->stats();
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.hit_bytes, 1000u);
  EXPECT_EQ(s.inserted_entries, 1u);
  EXPECT_EQ(s.inserted_bytes, 1000u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.payload_bytes, 1000u);
  EXPECT_EQ(s.current_bytes, c->EntryCharge(1000));
  EXPECT_EQ(s.pinned_bytes, c->EntryCharge(1000));
  h.Reset();
  EXPECT_EQ(c->stats().pinned_bytes, 0u);
}

TEST(WeightCacheTest, ChargeCountsRoundingAndOverhead) {
  auto c = MakeCache(1 << 20, "lru", {}, 4096);
  const uint64_t one = c->EntryCharge(1);
  const uint64_t page = c->EntryCharge(4096);
  EXPECT_EQ(one, page);           // 1 byte costs a whole aligned block
  EXPECT_GT(page, 4096u + 64u);   // plus the allocator header, entry record and index node
  EXPECT_LT(page, 4096u + 512u);  // ... which are small
  EXPECT_EQ(c->EntryCharge(4097) - page, 4096u);
  auto belady = MakeCache(1 << 20, "belady", {}, 4096);
  EXPECT_EQ(belady->EntryCharge(4096), page + 48);  // Belady's ordered-set node is charged too
}

TEST(WeightCacheTest, CreateRejectsBadOptions) {
  CacheOptions o;
  o.alignment = 3;
  EXPECT_EQ(WeightCache::Create(o, MakeEvictionPolicy("lru").value()).status().code(),
            Status::Code::kInvalidArgument);
  o.alignment = 64;
  o.partition_weights = {1, 0, 1};
  auto r = WeightCache::Create(o, MakeEvictionPolicy("lru").value());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("partition 1"), std::string::npos);
  o.partition_weights = {};
  EXPECT_FALSE(WeightCache::Create(o, nullptr).ok());
  auto c = MakeCache(1 << 16, "lru", {1, 1});
  EXPECT_EQ(c->Acquire(1, 100, 2).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(c->Acquire(1, 0, 0).status().code(), Status::Code::kInvalidArgument);
  CacheHandle h = Load(*c, 1, 100, 0);
  auto mismatch = c->Acquire(1, 200, 0);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("cached with 100 bytes"), std::string::npos);
  // A present unit is found whatever partition the access names (it is a hit where it lives).
  auto other = c->Acquire(1, 100, 1);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->is_loader());
  EXPECT_EQ(other->partition(), 0u);
}

TEST(WeightCacheTest, PinnedEntriesSurviveEvictionPressure) {
  const size_t unit = 1000;
  auto c = MakeCache(0);
  const uint64_t charge = c->EntryCharge(unit);
  ASSERT_TRUE(c->SetBudget(10 * charge).ok());
  std::vector<CacheHandle> pinned;
  for (UnitId id = 0; id < 4; ++id) pinned.push_back(Load(*c, id, unit));
  for (UnitId id = 100; id < 400; ++id) {
    CacheHandle h = Load(*c, id, unit);
    ASSERT_TRUE(h.valid());
    ExpectWithinBudget(*c);
  }
  for (CacheHandle& h : pinned) {
    EXPECT_TRUE(c->Contains(h.id()));
    EXPECT_TRUE(Intact(h));
  }
  // Pin everything that fits; the next reservation must fail, naming the pinned bytes.
  for (UnitId id = 1000; id < 1006; ++id) pinned.push_back(Load(*c, id, unit));
  auto full = c->Acquire(2000, unit, 0);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), Status::Code::kOutOfMemory);
  EXPECT_NE(full.status().message().find("pinned"), std::string::npos) << full.status().message();
  EXPECT_EQ(c->stats().reserve_failures, 1u);
  ExpectWithinBudget(*c);
  // Releasing one pin makes room again.
  pinned.erase(pinned.begin());
  CacheHandle h = Load(*c, 2000, unit);
  EXPECT_TRUE(h.valid());
  EXPECT_FALSE(c->Contains(0));
}

TEST(WeightCacheTest, SetBudgetShrinksAndGrows) {
  const size_t unit = 512;
  auto c = MakeCache(0);
  const uint64_t charge = c->EntryCharge(unit);
  ASSERT_TRUE(c->SetBudget(20 * charge).ok());
  for (UnitId id = 0; id < 20; ++id) Load(*c, id, unit);
  EXPECT_EQ(c->stats().entries, 20u);
  CacheHandle keep = c->Lookup(3);  // pinned: must survive the shrink
  ASSERT_TRUE(c->SetBudget(5 * charge).ok());
  ExpectWithinBudget(*c);
  EXPECT_EQ(c->stats().entries, 5u);
  EXPECT_TRUE(c->Contains(3));
  EXPECT_TRUE(Intact(keep));
  // LRU order: the most recently used survive (16..19, plus the pinned 3).
  for (UnitId id = 16; id < 20; ++id) EXPECT_TRUE(c->Contains(id)) << id;
  // Shrinking below what is pinned is refused and changes nothing.
  std::vector<CacheHandle> pins;
  for (UnitId id = 16; id < 20; ++id) pins.push_back(c->Lookup(id));
  Status st = c->SetBudget(2 * charge);
  EXPECT_EQ(st.code(), Status::Code::kOutOfMemory);
  EXPECT_NE(st.message().find("pinned"), std::string::npos);
  EXPECT_EQ(c->stats().budget_bytes, 5 * charge);
  EXPECT_EQ(c->stats().entries, 5u);
  pins.clear();
  keep.Reset();
  // Growing lets more in without evicting.
  ASSERT_TRUE(c->SetBudget(30 * charge).ok());
  for (UnitId id = 100; id < 125; ++id) Load(*c, id, unit);
  EXPECT_EQ(c->stats().entries, 30u);
  EXPECT_EQ(c->stats().evicted_entries, 15u);
  ASSERT_TRUE(c->SetBudget(0).ok());
  EXPECT_EQ(c->stats().entries, 0u);
  EXPECT_EQ(c->stats().current_bytes, 0u);
}

TEST(WeightCacheTest, PartitionsEvictOnlyTheirOwnUnits) {
  const size_t unit = 256;
  auto probe = MakeCache(0);
  const uint64_t charge = probe->EntryCharge(unit);
  // Proportional weights 1:3 -> partition 0 holds 4 units, partition 1 holds 12.
  auto c = MakeCache(16 * charge, "lru", {1, 3});
  EXPECT_EQ(c->partition_stats(0).budget_bytes, 4 * charge);
  EXPECT_EQ(c->partition_stats(1).budget_bytes, 12 * charge);
  for (UnitId id = 0; id < 12; ++id) Load(*c, MakeUnitId(1, 0, id), unit, 1);
  for (UnitId id = 0; id < 50; ++id) Load(*c, MakeUnitId(0, 0, id), unit, 0);
  for (UnitId id = 0; id < 12; ++id) EXPECT_TRUE(c->Contains(MakeUnitId(1, 0, id)));
  EXPECT_EQ(c->partition_stats(0).entries, 4u);
  ExpectWithinBudget(*c);
  // Uniform split of an odd budget: floor per partition, total within budget.
  auto u = MakeCache(1001, "lru", {1, 1, 1});
  EXPECT_EQ(u->partition_stats(0).budget_bytes, 333u);
  EXPECT_EQ(u->partition_stats(2).budget_bytes, 333u);
  // A unit bigger than its partition's share is refused with the share in the message.
  auto big = u->Acquire(1, 400, 0);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("partition 0's budget"), std::string::npos);
}

TEST(WeightCacheTest, WaitersSeeThePublishOrTheAbort) {
  auto c = MakeCache(1 << 20);
  auto r = c->Acquire(7, 300, 0);
  ASSERT_TRUE(r.ok());
  CacheHandle loader = std::move(r).value();
  // A second asker joins the load instead of loading again.
  auto r2 = c->Acquire(7, 300, 0);
  ASSERT_TRUE(r2.ok());
  CacheHandle waiter = std::move(r2).value();
  EXPECT_FALSE(waiter.is_loader());
  EXPECT_FALSE(waiter.ready());
  std::thread t([&] {
    Fill(loader);
    loader.Publish();
  });
  EXPECT_TRUE(waiter.Wait().ok());
  EXPECT_TRUE(Intact(waiter));
  t.join();
  EXPECT_EQ(c->stats().joins, 1u);

  // Abort: the waiter gets the loader's status, the unit is gone, a new Acquire loads again.
  auto r3 = c->Acquire(8, 300, 0);
  CacheHandle loader8 = std::move(r3).value();
  CacheHandle waiter8 = c->Lookup(8);
  ASSERT_TRUE(waiter8.valid());
  std::thread t2([&] { loader8.Abort(Status::IoError("disk on fire")); });
  Status st = waiter8.Wait();
  t2.join();
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_EQ(st.message(), "disk on fire");
  EXPECT_FALSE(loader8.valid());
  EXPECT_FALSE(c->Contains(8));
  const uint64_t before = c->stats().current_bytes;
  waiter8.Reset();  // the aborted entry's memory goes with its last pin
  EXPECT_EQ(c->stats().current_bytes, before - c->EntryCharge(300));
  auto again = c->Acquire(8, 300, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->is_loader());

  // A loader dropped without Publish/Abort aborts with an Internal error.
  CacheHandle w9;
  {
    auto r9 = c->Acquire(9, 10, 0);
    w9 = c->Lookup(9);
  }
  EXPECT_EQ(w9.Wait().code(), Status::Code::kInternal);
  EXPECT_EQ(c->stats().aborted_loads, 2u);
}

TEST(WeightCacheTest, ContainsAndReserveAreNotAccesses) {
  CacheOptions o;
  o.budget_bytes = 1 << 20;
  o.record_trace = true;
  auto c = WeightCache::Create(o, MakeEvictionPolicy("lru").value()).value();
  auto r = c->Reserve(1, 100, 0);
  ASSERT_TRUE(r.ok() && r->is_loader());
  Fill(*r);
  r->Publish();
  r->Reset();
  EXPECT_FALSE(c->Reserve(1, 100, 0)->valid());  // present: nothing to do
  EXPECT_TRUE(c->Contains(1));
  EXPECT_FALSE(c->Contains(2));
  CacheStats s = c->stats();
  EXPECT_EQ(s.hits + s.misses + s.prefetch_hits + s.joins, 0u);
  EXPECT_TRUE(c->TakeTrace().empty());
  // The first access to a prefetched unit is a prefetch hit, later ones are hits.
  c->Lookup(1);
  c->Lookup(1);
  c->Lookup(3);
  s = c->stats();
  EXPECT_EQ(s.prefetch_hits, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(c->TakeTrace(), (std::vector<UnitId>{1, 1, 3}));
  EXPECT_TRUE(c->TakeTrace().empty());
}

TEST(WeightCacheTest, ResidentMaskMatchesContains) {
  auto c = MakeCache(1 << 20);
  std::vector<CacheHandle> keep;
  for (uint64_t i : {0, 3, 63, 64, 65, 129}) Load(*c, MakeUnitId(2, 1, i), 10);
  Load(*c, MakeUnitId(3, 1, 1), 10);  // another layer: not in the range
  const CacheStats before = c->stats();
  std::vector<uint64_t> words(3, ~uint64_t{0});
  c->ResidentMask(MakeUnitId(2, 1, 0), 130, words.data());
  for (uint64_t i = 0; i < 130; ++i) {
    EXPECT_EQ((words[i / 64] >> (i % 64)) & 1, c->Contains(MakeUnitId(2, 1, i)) ? 1u : 0u) << i;
  }
  EXPECT_EQ(words[0], (uint64_t{1} << 0) | (uint64_t{1} << 3) | (uint64_t{1} << 63));
  EXPECT_EQ(words[1], 0b11u);
  EXPECT_EQ(words[2], 0b10u);  // bit 129 - 128; bits past `count` are cleared
  const CacheStats after = c->stats();
  EXPECT_EQ(after.hits + after.misses, before.hits + before.misses);  // not accesses
}

// A random workload on every policy: acquire, prefetch, hold, release, abort, change the budget,
// start tokens and sequences. After every operation the budget holds, per partition and in
// total, and every held unit still has its own bytes.
class RandomWorkloadTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RandomWorkloadTest, BudgetNeverExceeded) {
  std::mt19937_64 rng(1234);
  auto c = MakeCache(0, GetParam(), {1, 2, 1}, 64);
  const uint64_t base = c->EntryCharge(1000);
  ASSERT_TRUE(c->SetBudget(40 * base).ok());
  std::vector<CacheHandle> held;
  std::vector<CacheHandle> loading;
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 100);
    const UnitId id = rng() % 150;
    const size_t bytes = 1 + (id * 97) % 3000;  // a unit always has the same size
    const uint32_t part = static_cast<uint32_t>(id % 3);
    if (op < 45) {
      auto r = c->Acquire(id, bytes, part);
      if (r.ok()) {
        CacheHandle h = std::move(r).value();
        if (h.is_loader()) {
          Fill(h);
          if (rng() % 10 == 0) {
            loading.push_back(std::move(h));  // finish later
          } else {
            h.Publish();
            held.push_back(std::move(h));
          }
        } else if (h.ready()) {
          ASSERT_TRUE(Intact(h));
          held.push_back(std::move(h));
        }
      } else {
        ASSERT_EQ(r.status().code(), Status::Code::kOutOfMemory) << r.status().ToString();
      }
    } else if (op < 55) {
      auto r = c->Reserve(id, bytes, part);
      if (r.ok() && r->valid()) loading.push_back(std::move(r).value());
    } else if (op < 80) {
      if (!held.empty()) {
        size_t k = rng() % held.size();
        ASSERT_TRUE(Intact(held[k]));
        held.erase(held.begin() + static_cast<long>(k));
      }
    } else if (op < 88) {
      if (!loading.empty()) {
        size_t k = rng() % loading.size();
        CacheHandle h = std::move(loading[k]);
        loading.erase(loading.begin() + static_cast<long>(k));
        if (rng() % 3 == 0) {
          h.Abort(Status::IoError("injected"));
        } else {
          Fill(h);
          h.Publish();
          if (rng() % 2) held.push_back(std::move(h));
        }
      }
    } else if (op < 92) {
      Status st = c->SetBudget((5 + rng() % 60) * base);
      if (!st.ok()) {
        ASSERT_EQ(st.code(), Status::Code::kOutOfMemory);
      }
    } else if (op < 97) {
      c->BeginToken();
    } else if (op < 98) {
      c->ResetSequence();
    } else if (op < 99) {
      c->EvictAll();
    } else {
      held.clear();
    }
    ExpectWithinBudget(*c);
  }
  held.clear();
  loading.clear();
  CacheStats s = c->stats();
  EXPECT_EQ(s.pinned_bytes, 0u);
  // The workload really pressed the budget.
  EXPECT_GT(s.evicted_entries, 100u);
  EXPECT_GT(s.reserve_failures, 0u);
  EXPECT_GT(s.aborted_loads, 10u);
  ExpectWithinBudget(*c);
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, RandomWorkloadTest,
                         ::testing::Values("lru", "lfu", "belady", "atu", "window"));

TEST(WeightCacheTest, ConcurrentAcquireLoadsEachUnitOnce) {
  auto c = MakeCache(0);
  const size_t unit = 700;
  ASSERT_TRUE(c->SetBudget(64 * c->EntryCharge(unit)).ok());
  std::atomic<int> loads{0}, bad{0};
  auto worker = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 3000; ++i) {
      const UnitId id = rng() % 100;
      auto r = c->Acquire(id, unit, 0);
      if (!r.ok()) continue;  // all pinned at this instant: a transient read in real life
      CacheHandle h = std::move(r).value();
      if (h.is_loader()) {
        ++loads;
        Fill(h);
        h.Publish();
      } else if (!h.Wait().ok()) {
        continue;
      }
      if (!Intact(h)) ++bad;
    }
  };
  std::thread a(worker, 1), b(worker, 2), d(worker, 3);
  a.join();
  b.join();
  d.join();
  EXPECT_EQ(bad.load(), 0);
  CacheStats s = c->stats();
  EXPECT_EQ(static_cast<uint64_t>(loads.load()), s.inserted_entries);
  EXPECT_EQ(s.inserted_entries - s.evicted_entries, s.entries);
  EXPECT_LE(s.current_bytes, s.budget_bytes);
}

}  // namespace
}  // namespace weir::storage
