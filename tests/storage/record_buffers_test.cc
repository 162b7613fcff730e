// RecordBuffers: whatever a read-ahead guessed (all, some, none, more, a different region), Read
// puts every asked record at the place it reports, byte-exact, and reads only what the guess
// missed; a failed read-ahead is not an error; no read-ahead when off; what does not fit is refused.
#include "storage/record_buffers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "storage/fault_injecting_device.h"
#include "storage/memory_device.h"
#include "storage/open_device.h"
#include "storage_test_util.h"

namespace weir::storage {
namespace {

void ExpectPlaced(const RecordBuffers& b, const std::string& file, uint64_t base,
                  uint64_t record_bytes, const std::vector<int64_t>& slots,
                  const std::vector<int32_t>& places) {
  std::vector<int32_t> seen = places;
  std::sort(seen.begin(), seen.end());
  ASSERT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "two records, one place";
  for (size_t k = 0; k < slots.size(); ++k) {
    const uint64_t at = base + static_cast<uint64_t>(slots[k]) * record_bytes;
    ASSERT_EQ(0, std::memcmp(b.data() + static_cast<uint64_t>(places[k]) * record_bytes,
                             file.data() + at, record_bytes))
        << "record " << k << " (slot " << slots[k] << ", place " << places[k] << ")";
  }
}

using test::RandomSlots;

TEST(RecordBuffersTest, EveryGuessGivesTheRecordsAtTheirPlaces) {
  constexpr uint64_t kRecord = 25344 + 40, kBase = 12345;
  constexpr int64_t kRecords = 200;
  test::RandomFile f = test::MakeRandomFile(kBase + kRecords * kRecord + 999, 17);
  for (const char* kind : {"pread", "io_uring+direct"}) {
    SCOPED_TRACE(kind);
    DeviceOptions o;
    o.kind = kind;
    auto dev = OpenDevice(f.path, o);
    if (!dev.ok() && dev.status().code() == Status::Code::kUnsupported) continue;
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    // Room for every record in each buffer.
    auto b = RecordBuffers::Create(dev->get(), kRecords * kRecord + (1 << 20), true).value();
    std::vector<int64_t> prev = RandomSlots(kRecords, 0.25, 1);
    std::vector<int32_t> places(prev.size(), -1);
    ASSERT_TRUE(*b->Read(kBase, kRecord, prev.data(), static_cast<int64_t>(prev.size()),
                         places.data()));
    ExpectPlaced(*b, f.bytes, kBase, kRecord, prev, places);
    uint64_t ahead = 0, used = 0;
    for (int round = 0; round < 12; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      const std::vector<int64_t> want = RandomSlots(kRecords, 0.25, 100 + round);
      std::vector<int64_t> guess;
      switch (round % 6) {
        case 0: guess = want; break;                         // all right
        case 1: guess = prev; break;                         // the previous selection
        case 2: guess = RandomSlots(kRecords, 0.6, round); break;  // more than asked
        case 3: guess = RandomSlots(kRecords, 0.05, round); break;  // fewer than asked
        case 4: guess = {}; break;                           // nothing
        case 5: {                                            // disjoint
          std::set_difference(prev.begin(), prev.end(), want.begin(), want.end(),
                              std::back_inserter(guess));
          break;
        }
      }
      std::vector<int64_t> hits;
      std::set_intersection(want.begin(), want.end(), guess.begin(), guess.end(),
                            std::back_inserter(hits));
      const uint64_t records_before = b->stats().reads.records;
      const bool started = b->ReadAhead(kBase, kRecord, guess);
      EXPECT_EQ(started, !guess.empty());
      places.assign(want.size(), -1);
      ASSERT_TRUE(*b->Read(kBase, kRecord, want.data(), static_cast<int64_t>(want.size()),
                           places.data()));
      ExpectPlaced(*b, f.bytes, kBase, kRecord, want, places);
      if (started) {
        ahead += guess.size();
        used += hits.size();
        // The guess's records plus only the misses.
        EXPECT_EQ(b->stats().reads.records - records_before,
                  guess.size() + want.size() - hits.size());
      }
      EXPECT_EQ(b->stats().ahead_records, ahead);
      EXPECT_EQ(b->stats().ahead_records_used, used);
      prev = want;
    }
    // A read-ahead of another region (or record size) is not used.
    const std::vector<int64_t> some = {1, 5, 9};
    ASSERT_TRUE(b->ReadAhead(kBase + 1, kRecord, some));
    places.assign(3, -1);
    ASSERT_TRUE(*b->Read(kBase, kRecord, some.data(), 3, places.data()));
    ExpectPlaced(*b, f.bytes, kBase, kRecord, some, places);
    EXPECT_EQ(b->stats().ahead_records_used, used);
  }
}

TEST(RecordBuffersTest, NoReadAheadWhenOffAndRecordsThatDoNotFitAreRefused) {
  test::RandomFile f = test::MakeRandomFile(400 * 1000, 5);
  MemoryDevice dev("m", f.bytes);
  const std::vector<int64_t> slots = {0, 10, 20, 30};
  std::vector<int32_t> places(4);
  auto off = RecordBuffers::Create(&dev, 1 << 20, false).value();
  ASSERT_TRUE(*off->Read(0, 1000, slots.data(), 4, places.data()));
  ExpectPlaced(*off, f.bytes, 0, 1000, slots, places);
  EXPECT_FALSE(off->ReadAhead(0, 1000, slots));
  // Records that do not fit are refused before reading, the caller takes another way; with a
  // guess that left no room for the misses too.
  auto small = RecordBuffers::Create(&dev, 40 << 10, true).value();
  ASSERT_TRUE(*small->Read(0, 1000, slots.data(), 4, places.data()));
  const std::vector<int64_t> many = RandomSlots(400, 0.5, 3);
  places.resize(many.size());
  EXPECT_FALSE(*small->Read(0, 1000, many.data(), static_cast<int64_t>(many.size()),
                            places.data()));
  const std::vector<int64_t> guess = RandomSlots(400, 0.09, 4);
  ASSERT_TRUE(small->ReadAhead(0, 1000, guess));
  EXPECT_FALSE(*small->Read(0, 1000, many.data(), static_cast<int64_t>(many.size()),
                            places.data()));
  // What fits is still read right after that.
  places.resize(4);
  ASSERT_TRUE(*small->Read(0, 1000, slots.data(), 4, places.data()));
  ExpectPlaced(*small, f.bytes, 0, 1000, slots, places);
  EXPECT_EQ(RecordBuffers::Create(nullptr, 4096, true).status().code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(RecordBuffers::Create(&dev, 0, true).status().code(), Status::Code::kInvalidArgument);
}

TEST(RecordBuffersTest, AFailedReadAheadIsNotAnErrorButAFailedReadIs) {
  test::RandomFile f = test::MakeRandomFile(400 * 1000, 6);
  FaultOptions fo;
  fo.fail_after_reads = 1;  // the first read works, every later one fails
  FaultInjectingDevice bad(std::make_unique<MemoryDevice>("m", f.bytes), fo);
  auto b = RecordBuffers::Create(&bad, 1 << 20, true).value();
  const std::vector<int64_t> slots = {0, 1, 2, 3};  // adjacent: one read
  std::vector<int32_t> places(4);
  ASSERT_TRUE(*b->Read(0, 1000, slots.data(), 4, places.data()));
  ExpectPlaced(*b, f.bytes, 0, 1000, slots, places);
  ASSERT_TRUE(b->ReadAhead(0, 1000, slots));  // fails on its thread
  auto r = b->Read(0, 1000, slots.data(), 4, places.data());
  EXPECT_EQ(r.status().code(), Status::Code::kIoError);  // read again itself, and that fails
  EXPECT_EQ(b->stats().ahead_records, 0u);
}

}  // namespace
}  // namespace weir::storage
