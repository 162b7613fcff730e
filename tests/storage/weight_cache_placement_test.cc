// WeightCache with a UnitPlacement (entries at caller-given addresses, SlabPlacement) and Move
// between partitions; the MRU policy on a cyclic scan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "storage/eviction_policy.h"
#include "storage/memory_device.h"
#include "storage/prefetcher.h"
#include "storage/slab_placement.h"
#include "storage/weight_cache.h"

namespace weir::storage {
namespace {

constexpr size_t kUnit = 8192;

// A placement that records what it was asked, in front of a SlabPlacement.
class RecordingPlacement : public UnitPlacement {
 public:
  explicit RecordingPlacement(SlabPlacement* inner) : inner_(inner) {}
  std::byte* Place(UnitId id, size_t capacity) override {
    std::byte* p = inner_->Place(id, capacity);
    if (p) live[id] = p;
    return p;
  }
  void Release(UnitId id, std::byte* data, size_t capacity) override {
    EXPECT_EQ(live.at(id), data);
    live.erase(id);
    ++released;
    inner_->Release(id, data, capacity);
  }
  std::map<UnitId, std::byte*> live;
  int released = 0;

 private:
  SlabPlacement* inner_;
};

std::unique_ptr<WeightCache> MakeCache(uint64_t budget, UnitPlacement* placement,
                                       const char* policy = "lru",
                                       std::vector<uint64_t> weights = {}) {
  CacheOptions o;
  o.budget_bytes = budget;
  o.alignment = 4096;
  o.placement = placement;
  o.partition_weights = std::move(weights);
  auto c = WeightCache::Create(o, MakeEvictionPolicy(policy).value());
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

// Resident set size of this process in bytes (Linux /proc).
uint64_t RssBytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<uint64_t>(SlabPlacement::PageSize());
}

TEST(SlabPlacementTest, AddressesAndRefusals) {
  auto s = SlabPlacement::Create({{100000, kUnit}, {5000, 4096}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  SlabPlacement& p = **s;
  EXPECT_EQ(p.slab_bytes(0), 102400u);  // whole pages
  EXPECT_EQ(p.Place(MakeUnitId(0, 1, 0), kUnit), p.base(0));
  EXPECT_EQ(p.Place(MakeUnitId(0, 7, 3), kUnit), p.base(0) + 3 * kUnit);   // kind is not used
  EXPECT_EQ(p.Place(MakeUnitId(0, 1, 12), 4096), p.base(0) + 12 * kUnit);  // the short tail
  EXPECT_EQ(p.Place(MakeUnitId(0, 1, 12), kUnit), nullptr);                // past the slab
  EXPECT_EQ(p.Place(MakeUnitId(0, 1, 0), 2 * kUnit), nullptr);             // larger than a unit
  EXPECT_EQ(p.Place(MakeUnitId(2, 1, 0), 4096), nullptr);                  // no such slab
  EXPECT_EQ(p.Place(MakeUnitId(1, 1, 1), 4096), p.base(1) + 4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.base(1)) % 4096, 0u);
  EXPECT_FALSE(SlabPlacement::Create({{4096, 1000}}).ok());
  EXPECT_FALSE(SlabPlacement::Create({}).ok());
  EXPECT_FALSE(SlabPlacement::Create({{0, 4096}}).ok());
}

TEST(SlabPlacementTest, DiscardReturnsPagesAndZeroes) {
  const size_t bytes = 64 << 20;
  auto s = SlabPlacement::Create({{bytes, 1 << 20}});
  ASSERT_TRUE(s.ok());
  const uint64_t before = RssBytes();
  std::byte* p = (*s)->base(0);
  std::memset(p, 0x5a, bytes);  // commits 64 MiB
  const uint64_t touched = RssBytes();
  EXPECT_GT(touched, before + bytes / 2);
  (*s)->Discard(p, bytes);
  EXPECT_LT(RssBytes(), touched - bytes / 2);
  for (size_t i = 0; i < bytes; i += 4096) ASSERT_EQ(p[i], std::byte{0});
}

// Small units are given back in batches: a released unit keeps its bytes until the queue is
// flushed (or until kDeferredReleaseBytes are queued), a unit placed again leaves the queue, and
// a flush returns the pages and zeroes them.
TEST(SlabPlacementTest, SmallUnitReleasesAreBatched) {
  const size_t unit = 4096;
  auto s = SlabPlacement::Create({{400 * unit, unit}});
  ASSERT_TRUE(s.ok());
  SlabPlacement& sp = **s;
  std::byte* a = sp.Place(MakeUnitId(0, 0, 3), unit);
  std::byte* b = sp.Place(MakeUnitId(0, 0, 4), unit);
  ASSERT_NE(a, nullptr);
  std::memset(a, 0x11, unit);
  std::memset(b, 0x22, unit);
  sp.Release(MakeUnitId(0, 0, 3), a, unit);
  sp.Release(MakeUnitId(0, 0, 4), b, unit);
  EXPECT_EQ(a[0], std::byte{0x11});  // queued, not given back yet
  EXPECT_EQ(sp.Place(MakeUnitId(0, 0, 4), unit), b);  // placed again: leaves the queue
  // Reclaimed (a transient read into the place): the queued release is dropped too.
  std::byte* c = sp.Place(MakeUnitId(0, 0, 5), unit);
  std::memset(c, 0x44, unit);
  sp.Release(MakeUnitId(0, 0, 5), c, unit);
  sp.Reclaim(c, unit);
  sp.FlushReleases();
  EXPECT_EQ(c[0], std::byte{0x44});
  EXPECT_EQ(a[0], std::byte{0});      // given back
  EXPECT_EQ(b[0], std::byte{0x22});   // kept: it was placed again
  // Enough queued bytes flush by themselves.
  std::vector<std::byte*> units;
  for (uint64_t i = 8; i < 8 + sp.deferred_release_bytes() / unit && i < 400; ++i) {
    std::byte* p = sp.Place(MakeUnitId(0, 0, i), unit);
    std::memset(p, 0x33, unit);
    sp.Release(MakeUnitId(0, 0, i), p, unit);
    units.push_back(p);
  }
  ASSERT_EQ(units.size() * unit, sp.deferred_release_bytes());
  for (std::byte* p : units) EXPECT_EQ(p[0], std::byte{0});
}

TEST(SlabPlacementTest, HugePageUnitsAreAlignedAndReleased) {
  const size_t unit = 2 << 20;
  auto s = SlabPlacement::Create({{24 * unit + 5000, unit}});
  ASSERT_TRUE(s.ok());
  std::byte* base = (*s)->base(0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % unit, 0u);  // huge-page aligned
  std::byte* p = (*s)->Place(MakeUnitId(0, 1, 3), unit);
  ASSERT_EQ(p, base + 3 * unit);
  const uint64_t before = RssBytes();
  for (int u = 0; u < 24; ++u) std::memset(base + u * unit, 0x11, unit);
  const uint64_t touched = RssBytes();
  EXPECT_GT(touched, before + 20 * unit);
  for (int u = 0; u < 24; ++u) (*s)->Release(MakeUnitId(0, 1, u), base + u * unit, unit);
  EXPECT_LT(RssBytes(), touched - 20 * unit);
  EXPECT_EQ(base[5 * unit + 77], std::byte{0});
  // The short tail past the last whole unit.
  EXPECT_EQ((*s)->Place(MakeUnitId(0, 1, 24), 8192), base + 24 * unit);
}

TEST(WeightCachePlacementTest, EntriesLiveAtTheirPlaceAndAreReleased) {
  auto slabs = SlabPlacement::Create({{16 * kUnit, kUnit}, {16 * kUnit, kUnit}}).value();
  RecordingPlacement rec(slabs.get());
  auto c = MakeCache(4 * (kUnit + 4096), &rec);  // room for a few units whatever the overhead
  const uint64_t cap = c->stats().budget_bytes / c->EntryCharge(kUnit);
  ASSERT_GE(cap, 3u);
  for (uint64_t i = 0; i < 10; ++i) {
    const UnitId id = MakeUnitId(static_cast<uint32_t>(i % 2), 1, i);
    auto r = c->Acquire(id, kUnit - 100, 0);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->is_loader());
    EXPECT_EQ(r->mutable_data(), slabs->base(static_cast<uint32_t>(i % 2)) + i * kUnit);
    EXPECT_EQ(r->capacity(), kUnit);
    std::memset(r->mutable_data(), static_cast<int>(i + 1), kUnit - 100);
    r->Publish();
    EXPECT_EQ(r->data()[0], std::byte(i + 1));
    EXPECT_LE(rec.live.size(), cap);
  }
  EXPECT_EQ(rec.released, 10 - static_cast<int>(rec.live.size()));
  // An aborted load gives its place back; an unplaceable unit is refused.
  {
    auto r = c->Acquire(MakeUnitId(0, 1, 14), kUnit, 0);
    ASSERT_TRUE(r.ok());
    r->Abort(Status::IoError("test"));
  }
  EXPECT_EQ(rec.live.count(MakeUnitId(0, 1, 14)), 0u);
  EXPECT_EQ(c->Acquire(MakeUnitId(5, 1, 0), kUnit, 0).status().code(),
            Status::Code::kInvalidArgument);
  c->EvictAll();
  EXPECT_TRUE(rec.live.empty());
}

// A unit in a slab of huge pages takes whole ones: the cache charges it that footprint and gives
// all of it back (a release of the payload alone would split the last huge page and keep the
// rest resident). Elsewhere the footprint is the payload rounded to the alignment.
TEST(WeightCachePlacementTest, UnitsInHugePagesAreChargedAndReleasedWhole) {
  const size_t huge = 2 << 20, unit = 2 * huge;
  auto slabs = SlabPlacement::Create({{4 * unit, unit}, {4 * kUnit, kUnit}}).value();
  const UnitId big = MakeUnitId(0, 1, 1), small = MakeUnitId(1, 1, 1);
  EXPECT_EQ(slabs->Footprint(big, huge + 4096), unit);
  EXPECT_EQ(slabs->Footprint(big, 4096), huge);
  EXPECT_EQ(slabs->Footprint(small, 4096), 4096u);
  // A unit rounded up to whole huge pages for its alignment: huge pages up to its payload's last
  // whole one, small pages past it.
  const SlabPlacement::Slab rounded{4 * unit, unit, huge + 8192};
  EXPECT_EQ(SlabPlacement::FootprintIn(rounded, 1, huge + 8192), huge + 8192);
  EXPECT_EQ(SlabPlacement::FootprintIn(rounded, 1, huge + 100), huge + 4096);
  EXPECT_EQ(SlabPlacement::FootprintIn(rounded, 1, 4096), huge);
  EXPECT_EQ(SlabPlacement::FootprintIn({4 * unit, 8192, 0}, 1, 100), 4096u);
  // The last unit of a slab ends where the slab does: a short tail gets small pages.
  const SlabPlacement::Slab tail{3 * unit + huge + 8192, unit, 0};
  EXPECT_EQ(SlabPlacement::FootprintIn(tail, 2, unit), unit);
  EXPECT_EQ(SlabPlacement::FootprintIn(tail, 3, huge + 8192), huge + 8192);
  EXPECT_EQ(SlabPlacement::FootprintIn({3 * unit + 8192, unit, 0}, 3, 8192), 8192u);
  auto c = MakeCache(64 << 20, slabs.get());
  const size_t payload = huge + 100;
  EXPECT_EQ(c->UnitCharge(big, payload), c->EntryCharge(unit));
  EXPECT_EQ(c->UnitCharge(small, 100), c->EntryCharge(4096));
  {
    auto r = c->Acquire(big, payload, 0);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->capacity(), unit);
    EXPECT_EQ(c->stats().current_bytes, c->EntryCharge(unit));
    // The read lands in the payload; the kernel commits the rest of the last huge page with it.
    std::memset(r->mutable_data(), 0x11, unit);
    r->Publish();
  }
  std::byte* place = slabs->base(0) + unit;
  c->EvictAll();
  EXPECT_EQ(c->stats().current_bytes, 0u);
  // Given back whole: past the payload too, the pages read as zeros again.
  EXPECT_EQ(place[payload + 4096], std::byte{0});
  EXPECT_EQ(place[unit - 1], std::byte{0});
}

TEST(WeightCachePlacementTest, AbortedLoadStillPinnedBlocksItsPlace) {
  auto slabs = SlabPlacement::Create({{16 * kUnit, kUnit}}).value();
  auto c = MakeCache(1 << 20, slabs.get());
  const UnitId id = MakeUnitId(0, 1, 2);
  auto loader = c->Acquire(id, kUnit, 0);
  ASSERT_TRUE(loader.ok());
  auto waiter = c->Acquire(id, kUnit, 0);  // joins the load: a pin on the same entry
  ASSERT_TRUE(waiter.ok());
  loader->Abort(Status::IoError("disk"));
  EXPECT_EQ(waiter->Wait().code(), Status::Code::kIoError);
  // The waiter still pins the aborted entry, whose bytes are at the unit's fixed place.
  EXPECT_EQ(c->Acquire(id, kUnit, 0).status().code(), Status::Code::kOutOfMemory);
  waiter->Reset();
  auto again = c->Acquire(id, kUnit, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->is_loader());
  again->Abort(Status::IoError("again"));
}

TEST(WeightCacheMoveTest, MovesIntoAPartitionEvictingThere) {
  for (const char* policy : {"lru", "lfu", "window", "atu"}) {
    SCOPED_TRACE(policy);
    auto c = MakeCache(0, nullptr, policy, {1, 1});
    const uint64_t charge = c->EntryCharge(4096);
    ASSERT_TRUE(c->SetBudget(2 * 3 * charge).ok());  // 3 units per partition
    auto fill = [&](UnitId id, uint32_t part) {
      auto r = c->Acquire(id, 4096, part);
      EXPECT_TRUE(r.ok());
      r->Publish();
      return std::move(r).value();
    };
    for (UnitId id = 1; id <= 3; ++id) fill(id, 0).Reset();
    CacheHandle staged = fill(10, 1);
    c->BeginToken();  // ATU may then replace units of earlier tokens
    ASSERT_TRUE(c->Move(staged, 0).ok());
    EXPECT_EQ(staged.partition(), 0u);
    EXPECT_EQ(c->partition_stats(0).entries, 3u);  // one of 1..3 went
    EXPECT_EQ(c->partition_stats(1).entries, 0u);
    EXPECT_EQ(c->partition_stats(1).current_bytes, 0u);
    EXPECT_EQ(c->partition_stats(0).pinned_bytes, charge);
    EXPECT_EQ(c->stats().evicted_entries, 1u);
    staged.Reset();
    EXPECT_EQ(c->partition_stats(0).pinned_bytes, 0u);
    // Moving to where it is, and a bad partition.
    auto h = c->Acquire(10, 4096, 0);
    ASSERT_TRUE(h.ok());
    EXPECT_TRUE(c->Move(*h, 0).ok());
    EXPECT_EQ(c->Move(*h, 9).code(), Status::Code::kInvalidArgument);
  }
}

TEST(WeightCacheMoveTest, MruAdmitsOnlyIntoFreeRoom) {
  // MRU would evict the incoming unit itself (it is the most recent): a move that needs an
  // eviction is refused and the unit stays where it is; into free room it is admitted.
  auto c = MakeCache(0, nullptr, "mru", {1, 1});
  const uint64_t charge = c->EntryCharge(4096);
  ASSERT_TRUE(c->SetBudget(2 * 2 * charge).ok());
  auto load = [&](UnitId id, uint32_t part) {
    auto r = c->Acquire(id, 4096, part);
    EXPECT_TRUE(r.ok());
    r->Publish();
    return std::move(r).value();
  };
  CacheHandle a = load(1, 1);
  EXPECT_TRUE(c->Move(a, 0).ok());  // free room
  a.Reset();
  load(2, 0).Reset();  // partition 0 is now full (1 and 2)
  CacheHandle b = load(3, 1);
  Status st = c->Move(b, 0);
  EXPECT_EQ(st.code(), Status::Code::kOutOfMemory) << st.ToString();
  EXPECT_EQ(b.partition(), 1u);
  EXPECT_EQ(c->partition_stats(0).entries, 2u);
  EXPECT_EQ(c->stats().evicted_entries, 0u);
}

TEST(WeightCacheMoveTest, HotKeepsTheLowestIndices) {
  // hot: a unit comes in only into free room or in place of a unit of higher index (colder in an
  // activation-ordered pack), and the highest index is the victim. Whatever the order of use,
  // the partition ends up holding the lowest indices it has seen.
  auto c = MakeCache(0, nullptr, "hot", {1, 1});
  const uint64_t charge = c->EntryCharge(4096);
  ASSERT_TRUE(c->SetBudget(2 * 3 * charge).ok());
  auto use = [&](uint64_t index) {
    const UnitId id = MakeUnitId(0, 1, index);
    auto r = c->Acquire(id, 4096, 1);  // lands in staging (1), then moves to the group (0)
    ASSERT_TRUE(r.ok());
    if (r->is_loader()) r->Publish();
    (void)c->Move(*r, 0);
  };
  for (uint64_t index : {9, 7, 5, 8, 2, 6, 3, 1, 4}) use(index);
  std::vector<uint64_t> kept;
  for (uint64_t index = 0; index < 10; ++index) {
    auto h = c->Lookup(MakeUnitId(0, 1, index));
    if (h && h.partition() == 0) kept.push_back(index);
  }
  EXPECT_EQ(kept, (std::vector<uint64_t>{1, 2, 3}));
  // A colder unit is refused: it would take the place of 3.
  use(9);
  auto cold = c->Lookup(MakeUnitId(0, 1, 9));
  EXPECT_TRUE(!cold || cold.partition() == 1);
  auto three = c->Lookup(MakeUnitId(0, 1, 3));
  ASSERT_TRUE(three);
  EXPECT_EQ(three.partition(), 0u);
}

TEST(WeightCacheMoveTest, HotEvictsTheLastReleasedInTheReadAheadPartition) {
  // In the partition that reads ahead land in, a unit's index says nothing about when it is
  // needed: the unit released last goes first (the read furthest ahead), as with mru, so a read
  // ahead for sooner is never dropped for one of lower index. Elsewhere the rank still rules.
  PolicyOptions po;
  po.read_ahead_partition = 1;
  CacheOptions o;
  o.alignment = 4096;
  o.partition_weights = {1, 1};
  auto made = WeightCache::Create(o, MakeEvictionPolicy("hot", po).value());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<WeightCache> c = std::move(made).value();
  const uint64_t charge = c->EntryCharge(4096);
  ASSERT_TRUE(c->SetBudget(2 * 3 * charge).ok());
  auto reserve = [&](uint32_t partition, uint64_t index) {
    auto r = c->Reserve(MakeUnitId(0, 1, index), 4096, partition);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    r->Publish();
  };
  auto held = [&](uint32_t partition, uint64_t index) {
    return static_cast<bool>(c->Lookup(MakeUnitId(0, 1, index))) &&
           c->Lookup(MakeUnitId(0, 1, index)).partition() == partition;
  };
  // Read ahead: 50 and 60 (the next layer's); then 3 is read, used and released (this
  // layer's, needed again only next token); then 70 is read ahead and needs room.
  reserve(1, 50);
  reserve(1, 60);
  {
    auto used = c->Acquire(MakeUnitId(0, 1, 3), 4096, 1);
    ASSERT_TRUE(used.ok());
    used->Publish();
  }
  reserve(1, 70);
  EXPECT_FALSE(held(1, 3));  // released last: the victim (by rank it would have been 60)
  EXPECT_TRUE(held(1, 50));
  EXPECT_TRUE(held(1, 60));
  EXPECT_TRUE(held(1, 70));
  // The group partition keeps the lowest indices, as before.
  for (uint64_t index : {40, 30, 20, 10}) reserve(0, index);
  EXPECT_FALSE(held(0, 40));
  EXPECT_TRUE(held(0, 10));
}

TEST(WeightCacheMoveTest, RefusedWhenTheTargetIsPinned) {
  auto c = MakeCache(0, nullptr, "lru", {1, 1});
  const uint64_t charge = c->EntryCharge(4096);
  ASSERT_TRUE(c->SetBudget(2 * 2 * charge).ok());
  std::vector<CacheHandle> pins;
  for (UnitId id = 1; id <= 2; ++id) {
    auto r = c->Acquire(id, 4096, 0);
    ASSERT_TRUE(r.ok());
    r->Publish();
    pins.push_back(std::move(r).value());
  }
  auto s = c->Acquire(7, 4096, 1);
  ASSERT_TRUE(s.ok());
  s->Publish();
  Status st = c->Move(*s, 0);
  EXPECT_EQ(st.code(), Status::Code::kOutOfMemory);
  EXPECT_NE(st.message().find("pinned"), std::string::npos);
  EXPECT_EQ(s->partition(), 1u);  // unchanged
  EXPECT_EQ(c->partition_stats(1).entries, 1u);
}

TEST(WeightCacheMoveTest, SetBudgetWithNewWeights) {
  auto c = MakeCache(0, nullptr, "lru", {1, 1});
  const uint64_t charge = c->EntryCharge(4096);
  ASSERT_TRUE(c->SetBudget(4 * charge).ok());  // 2 + 2
  for (UnitId id = 1; id <= 2; ++id) {
    auto r = c->Acquire(id, 4096, 0);
    ASSERT_TRUE(r.ok());
    r->Publish();
  }
  EXPECT_EQ(c->partition_stats(0).entries, 2u);
  // 1 : 3 -> partition 0 keeps one unit (the other is evicted), partition 1 gets three.
  ASSERT_TRUE(c->SetBudget(4 * charge, {1, 3}).ok());
  EXPECT_EQ(c->partition_stats(0).budget_bytes, charge);
  EXPECT_EQ(c->partition_stats(1).budget_bytes, 3 * charge);
  EXPECT_EQ(c->partition_stats(0).entries, 1u);
  // The plain form keeps the new weights.
  ASSERT_TRUE(c->SetBudget(8 * charge).ok());
  EXPECT_EQ(c->partition_stats(1).budget_bytes, 6 * charge);
  EXPECT_EQ(c->SetBudget(8 * charge, {1}).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(c->SetBudget(8 * charge, {1, 0}).code(), Status::Code::kInvalidArgument);
  // Pinned units above a new share refuse the change, which then changes nothing.
  auto pin = c->Acquire(1, 4096, 0);
  ASSERT_TRUE(pin.ok());
  EXPECT_EQ(c->SetBudget(8 * charge, {1, 100}).code(), Status::Code::kOutOfMemory);
  EXPECT_EQ(c->partition_stats(1).budget_bytes, 6 * charge);
}

// Records the requests of every batch it is given.
class RecordingDevice : public MemoryDevice {
 public:
  using MemoryDevice::MemoryDevice;
  Status Read(std::span<ReadRequest> requests) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const ReadRequest& r : requests) lengths.push_back(r.length);
    }
    return MemoryDevice::Read(requests);
  }
  std::mutex mu;
  std::vector<size_t> lengths;
};

TEST(PrefetcherMergeTest, ContiguousUnitsAreOneRead) {
  // 12 units of 8 KiB placed back to back in a slab, enqueued in order with a gap after unit 5:
  // the I/O thread reads them as (at most) two merged requests, and every unit gets its bytes.
  std::string bytes(12 * kUnit + 4096, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>((i * 31 + i / 4096) & 0xff);
  RecordingDevice dev("merge", bytes);
  auto slabs = SlabPlacement::Create({{12 * kUnit, kUnit}}).value();
  auto c = MakeCache(1 << 20, slabs.get());
  auto pf = Prefetcher::Create(c.get(), {}).value();
  {
    // Hold the I/O thread back until everything is queued, so that it sees one batch.
    std::lock_guard<std::mutex> lock(dev.mu);
    for (uint64_t i = 0; i < 12; ++i) {
      if (i == 6) continue;  // the gap
      ASSERT_TRUE(pf->Enqueue({MakeUnitId(0, 1, i), 0, &dev, i * kUnit, kUnit}).ok());
    }
  }
  for (uint64_t i = 0; i < 12; ++i) {
    if (i == 6) continue;
    auto h = pf->Wait(MakeUnitId(0, 1, i));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_EQ(0, std::memcmp(h->data(), bytes.data() + i * kUnit, kUnit)) << i;
  }
  std::lock_guard<std::mutex> lock(dev.mu);
  size_t total = 0;
  for (size_t l : dev.lengths) total += l;
  EXPECT_EQ(total, 11 * kUnit);
  EXPECT_LE(dev.lengths.size(), 4u);  // two runs, possibly split across batches
  EXPECT_GT(*std::max_element(dev.lengths.begin(), dev.lengths.end()), kUnit);
}

TEST(MruPolicyTest, CyclicScanKeepsAStableSet) {
  // A scan of 10 units in the same order, 6 times, through a cache of 4: LRU never hits after
  // the first pass; MRU keeps a stable set (at least C - 1 = 3 hits a pass) and is never better
  // than Belady's optimum on the same trace.
  std::vector<UnitId> trace;
  for (int pass = 0; pass < 6; ++pass) {
    for (UnitId id = 0; id < 10; ++id) trace.push_back(id);
  }
  std::map<std::string, uint64_t> hits;
  for (const char* policy : {"lru", "mru", "belady"}) {
    CacheOptions o;
    o.alignment = 64;
    PolicyOptions po;
    po.belady_trace = trace;
    auto c = WeightCache::Create(o, MakeEvictionPolicy(policy, po).value()).value();
    ASSERT_TRUE(c->SetBudget(4 * c->EntryCharge(100)).ok());
    for (size_t i = 0; i < trace.size(); ++i) {
      if (i == 10) hits[policy] = c->stats().hits;  // count from the second pass on
      auto r = c->Acquire(trace[i], 100, 0);
      ASSERT_TRUE(r.ok());
      if (r->is_loader()) r->Publish();
    }
    hits[policy] = c->stats().hits - hits[policy];
  }
  EXPECT_EQ(hits["lru"], 0u);
  EXPECT_GE(hits["mru"], 5u * 3u);
  EXPECT_LE(hits["mru"], hits["belady"]);
}

}  // namespace
}  // namespace weir::storage
