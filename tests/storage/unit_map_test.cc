// UnitMap (the cache's open-addressing index) against std::unordered_map under random inserts,
// erases and compactions, with structured ids that would cluster under a weak hash.
#include "storage/unit_map.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace weir::storage {
namespace {

TEST(UnitMapTest, MatchesReferenceMap) {
  std::mt19937_64 rng(5);
  UnitMap<int> map;
  std::unordered_map<UnitId, int*> ref;
  std::vector<int> values(1 << 16);
  auto random_id = [&] {
    // Few layers and kinds, dense indices: the shape of real unit ids.
    return MakeUnitId(rng() % 4, rng() % 3, rng() % 3000);
  };
  for (int step = 0; step < 200000; ++step) {
    const UnitId id = random_id();
    const int op = static_cast<int>(rng() % 10);
    if (op < 5) {
      if (!ref.count(id)) {
        int* v = &values[step % values.size()];
        map.Insert(id, v);
        ref[id] = v;
      }
    } else if (op < 9) {
      int* removed = map.Erase(id);
      auto it = ref.find(id);
      ASSERT_EQ(removed, it == ref.end() ? nullptr : it->second);
      if (it != ref.end()) ref.erase(it);
    } else {
      ASSERT_EQ(map.Find(id), ref.count(id) ? ref[id] : nullptr);
    }
    if (step % 5000 == 0) {
      map.Compact();
      ASSERT_EQ(map.size(), ref.size());
      for (const auto& [k, v] : ref) ASSERT_EQ(map.Find(k), v);
      size_t seen = 0;
      map.ForEach([&](UnitId k, int* v) {
        ++seen;
        ASSERT_EQ(ref.at(k), v);
      });
      ASSERT_EQ(seen, ref.size());
    }
    // The load stays at most 1/2.
    ASSERT_LE(map.size() * 2, map.slot_count());
  }
  // Emptying it and compacting brings the table back to its minimum.
  for (const auto& [k, v] : ref) ASSERT_EQ(map.Erase(k), v);
  map.Compact();
  EXPECT_EQ(map.size(), 0u);
  EXPECT_EQ(map.slot_count(), 64u);
  EXPECT_EQ(map.Find(MakeUnitId(0, 0, 0)), nullptr);
}

TEST(UnitMapTest, CompactKeepsLoadAtLeastOneEighth) {
  UnitMap<int> map;
  int v = 0;
  for (uint64_t i = 0; i < 100000; ++i) map.Insert(i, &v);
  for (uint64_t i = 0; i < 99000; ++i) map.Erase(i);
  map.Compact();
  EXPECT_GE(map.size() * 8, map.slot_count());
  for (uint64_t i = 99000; i < 100000; ++i) ASSERT_EQ(map.Find(i), &v);
}

}  // namespace
}  // namespace weir::storage
