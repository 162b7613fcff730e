// RecordReader: the chosen records land compactly and byte-exact, on every device kind and with
// alignment, merging and the buffer's limit; bad requests and read errors are clear errors.
#include "storage/record_reader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "storage/fault_injecting_device.h"
#include "storage/memory_device.h"
#include "storage/open_device.h"
#include "storage_test_util.h"

namespace weir::storage {
namespace {

// Every record of `slots` at its compact place.
void ExpectCompact(const RecordReader& r, const std::string& file, uint64_t base,
                   uint64_t record_bytes, const std::vector<int64_t>& slots) {
  for (size_t k = 0; k < slots.size(); ++k) {
    const uint64_t at = base + static_cast<uint64_t>(slots[k]) * record_bytes;
    ASSERT_EQ(0, std::memcmp(r.data() + k * record_bytes, file.data() + at, record_bytes))
        << "record " << k << " (slot " << slots[k] << ")";
  }
}

using test::RandomSlots;

TEST(RecordReaderTest, ChosenRecordsLandCompactOnEveryDevice) {
  // Records of an odd size at an odd base, so that runs start and end inside pages.
  constexpr uint64_t kRecord = 25344 + 40, kBase = 12345;
  constexpr int64_t kRecords = 300;
  test::RandomFile f = test::MakeRandomFile(kBase + kRecords * kRecord + 999, 7);
  for (const char* kind : {"pread", "direct", "io_uring", "io_uring+direct"}) {
    DeviceOptions o;
    o.kind = kind;
    auto dev = OpenDevice(f.path, o);
    if (!dev.ok() && dev.status().code() == Status::Code::kUnsupported) continue;
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    auto r = RecordReader::Create(dev->get(), kRecords * kRecord + (1 << 20)).value();
    for (double keep : {0.05, 0.25, 0.5, 0.9, 1.0}) {
      const std::vector<int64_t> slots = RandomSlots(kRecords, keep, 100 + keep * 10);
      ASSERT_TRUE(r->Read(kBase, kRecord, slots.data(), static_cast<int64_t>(slots.size())).ok());
      ExpectCompact(*r, f.bytes, kBase, kRecord, slots);
    }
    // The last record of the file (its read ends at the file's unaligned end).
    const std::vector<int64_t> last = {0, kRecords - 1};
    ASSERT_TRUE(r->Read(kBase, kRecord, last.data(), 2).ok()) << kind;
    ExpectCompact(*r, f.bytes, kBase, kRecord, last);
  }
}

TEST(RecordReaderTest, RunsBecomeOneReadAndNearbyRunsMerge) {
  const std::string bytes(1 << 20, 'x');
  MemoryDevice dev("m", bytes);  // alignment 1: reads are exactly the runs
  auto far = RecordReader::Create(&dev, 1 << 20, /*merge_gap=*/0).value();
  // Runs {2,3,4}, {10}, {20,21}: three reads of exactly their records.
  const std::vector<int64_t> slots = {2, 3, 4, 10, 20, 21};
  ASSERT_TRUE(far->Read(0, 1000, slots.data(), 6).ok());
  EXPECT_EQ(far->stats().reads, 3u);
  EXPECT_EQ(far->stats().bytes_read, 6000u);
  // With a 6000-byte gap allowed, {2..4} and {10} merge (5000 bytes apart), {20, 21} does not.
  auto near = RecordReader::Create(&dev, 1 << 20, /*merge_gap=*/6000).value();
  ASSERT_TRUE(near->Read(0, 1000, slots.data(), 6).ok());
  EXPECT_EQ(near->stats().reads, 2u);
  EXPECT_EQ(near->stats().bytes_read, 9000u + 2000u);
  ExpectCompact(*near, bytes, 0, 1000, slots);
}

TEST(RecordReaderTest, AlignedDevicesReadWholePages) {
  test::RandomFile f = test::MakeRandomFile(64 * 4096, 9);
  MemoryDevice dev("aligned", f.bytes, /*required_alignment=*/4096);
  auto r = RecordReader::Create(&dev, 64 * 4096, /*merge_gap=*/0).value();
  // Records of 3000 bytes: slot 5 is bytes 15000..18000 (pages 3..4), slot 40 is 120000..123000
  // (page 29..30).
  const std::vector<int64_t> slots = {5, 40};
  ASSERT_TRUE(r->Read(0, 3000, slots.data(), 2).ok());
  EXPECT_EQ(r->stats().reads, 2u);
  EXPECT_EQ(r->stats().bytes_read, 4u * 4096);
  ExpectCompact(*r, f.bytes, 0, 3000, slots);
}

TEST(RecordReaderTest, BadRequestsAndErrorsAreClear) {
  test::RandomFile f = test::MakeRandomFile(100 * 1000, 3);
  MemoryDevice dev("m", f.bytes);
  EXPECT_EQ(RecordReader::Create(nullptr, 4096).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(RecordReader::Create(&dev, 0).status().code(), Status::Code::kInvalidArgument);
  auto r = RecordReader::Create(&dev, 8192, /*merge_gap=*/0).value();
  const std::vector<int64_t> unordered = {3, 2};
  EXPECT_EQ(r->Read(0, 1000, unordered.data(), 2).code(), Status::Code::kInvalidArgument);
  const std::vector<int64_t> twice = {3, 3};
  EXPECT_EQ(r->Read(0, 1000, twice.data(), 2).code(), Status::Code::kInvalidArgument);
  const std::vector<int64_t> past = {100};
  const Status st = r->Read(0, 1000, past.data(), 1);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("past the end"), std::string::npos) << st.ToString();
  // Merged reads that would not fit are read unmerged: 0..2 and 6..8 with a gap of 3000 bytes
  // would be one read of 9000 bytes, two reads of 3000 fit.
  auto merging = RecordReader::Create(&dev, 8192, /*merge_gap=*/4000).value();
  const std::vector<int64_t> two_runs = {0, 1, 2, 6, 7, 8};
  ASSERT_TRUE(merging->Read(0, 1000, two_runs.data(), 6).ok());
  EXPECT_EQ(merging->stats().reads, 2u);
  ExpectCompact(*merging, f.bytes, 0, 1000, two_runs);
  // Nine separate 1000-byte records need 9000 bytes of reads: more than the 8192 it holds.
  const std::vector<int64_t> many = {0, 2, 4, 6, 8, 10, 12, 14, 16};
  EXPECT_EQ(r->Read(0, 1000, many.data(), 9).code(), Status::Code::kOutOfMemory);
  EXPECT_EQ(r->stats().reads, 0u);  // refused before reading
  // A device error comes back as the Status.
  FaultOptions fo;
  fo.fail_after_reads = 0;
  FaultInjectingDevice bad(std::make_unique<MemoryDevice>("m", f.bytes), fo);
  auto rb = RecordReader::Create(&bad, 8192).value();
  const std::vector<int64_t> one = {1};
  EXPECT_EQ(rb->Read(0, 1000, one.data(), 1).code(), Status::Code::kIoError);
}

}  // namespace
}  // namespace weir::storage
