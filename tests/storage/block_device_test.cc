// Every device returns the bytes a plain read of the file gives, at random offsets and lengths
// (aligned and not), one at a time and in batches; bad reads are refused with a clear Status.
#include "storage/block_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "base/aligned_buffer.h"
#include "storage/file_device.h"
#include "storage/memory_device.h"
#include "storage/mmap_device.h"
#include "storage/open_device.h"
#include "storage/uring_device.h"
#include "storage_test_util.h"

namespace weir::storage {
namespace {

// 1 MiB + 1234 bytes: the file's tail is not a multiple of any O_DIRECT alignment.
constexpr size_t kFileSize = (size_t{1} << 20) + 1234;

struct DeviceCase {
  const char* label;
  DeviceOptions options;
};

std::vector<DeviceCase> AllFileDevices() {
  std::vector<DeviceCase> cases;
  auto add = [&](const char* label, const char* kind, uint32_t qd, size_t bounce) {
    DeviceOptions o;
    o.kind = kind;
    o.queue_depth = qd;
    o.bounce_bytes = bounce;
    cases.push_back({label, o});
  };
  add("pread", "pread", 32, size_t{1} << 20);
  add("direct", "direct", 32, size_t{1} << 20);
  add("direct_small_bounce", "direct", 32, 8192);  // forces multi-chunk bounces
  add("direct_4096", "direct", 32, size_t{1} << 20);
  cases.back().options.direct_alignment = 4096;  // the kernel may report 512 here
  add("io_uring_qd1", "io_uring", 1, size_t{1} << 20);
  add("io_uring_qd32", "io_uring", 32, size_t{1} << 20);
  add("io_uring_direct_qd1", "io_uring+direct", 1, 8192);
  add("io_uring_direct_qd32", "io_uring+direct", 32, size_t{1} << 20);
  // Reads cut into small pieces kept in flight together (UringDevice::Options::piece_bytes).
  add("io_uring_pieces", "io_uring", 4, size_t{1} << 20);
  cases.back().options.piece_bytes = 5000;
  add("io_uring_direct_pieces", "io_uring+direct", 8, size_t{1} << 20);
  cases.back().options.piece_bytes = 3 * 4096;
  add("mmap", "mmap", 32, 0);
  add("auto", "auto", 32, size_t{1} << 20);
  return cases;
}

// Opens or skips (O_DIRECT or io_uring may be unavailable on some file systems / kernels).
std::unique_ptr<BlockDevice> OpenOrSkip(const std::string& path, const DeviceOptions& o,
                                        bool* skipped) {
  Result<std::unique_ptr<BlockDevice>> dev = OpenDevice(path, o);
  *skipped = false;
  if (!dev.ok() && dev.status().code() == Status::Code::kUnsupported) {
    *skipped = true;
    return nullptr;
  }
  EXPECT_TRUE(dev.ok()) << dev.status().ToString();
  return dev.ok() ? std::move(dev).value() : nullptr;
}

// Random (offset, length) pairs: small and large, aligned and not, including the file's end.
std::vector<std::pair<uint64_t, size_t>> RandomRanges(uint64_t seed, size_t n, size_t size) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<uint64_t, size_t>> out;
  for (size_t i = 0; i < n; ++i) {
    size_t len;
    switch (rng() % 4) {
      case 0:
        len = 1 + rng() % 64;
        break;
      case 1:
        len = 1 + rng() % 20000;
        break;
      case 2:
        len = 4096 * (1 + rng() % 40);
        break;
      default:
        len = 1 + rng() % (300 * 1024);
        break;
    }
    len = std::min(len, size);
    uint64_t off = rng() % (size - len + 1);
    if (rng() % 3 == 0) off = off / 4096 * 4096;  // aligned start
    out.push_back({off, len});
  }
  out.push_back({size - 1, 1});        // last byte
  out.push_back({size - 1234, 1234});  // the unaligned tail exactly
  out.push_back({size - 5000, 5000});  // across the last aligned boundary
  out.push_back({0, size});            // everything
  out.push_back({4096, 0});            // empty
  return out;
}

class FileDeviceTest : public ::testing::TestWithParam<DeviceCase> {};

TEST_P(FileDeviceTest, ReadAtMatchesPlainRead) {
  test::RandomFile f = test::MakeRandomFile(kFileSize, 7);
  bool skipped;
  auto dev = OpenOrSkip(f.path, GetParam().options, &skipped);
  if (skipped) GTEST_SKIP() << "device unsupported here";
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(dev->size(), kFileSize);
  EXPECT_EQ(dev->required_alignment(), 1u);
  uint64_t seed = 11;
  for (auto [off, len] : RandomRanges(seed, 120, kFileSize)) {
    // Unaligned destination on purpose: +1 byte into an aligned buffer for odd iterations.
    AlignedBuffer buf(len + 8192, 4096);
    const size_t shift = (off % 2 == 0) ? 0 : 1;
    std::memset(buf.data(), 0xA5, buf.size());
    Status st = dev->ReadAt(off, len, buf.data() + shift);
    ASSERT_TRUE(st.ok()) << GetParam().label << " off=" << off << " len=" << len << ": "
                         << st.ToString();
    ASSERT_EQ(0, std::memcmp(buf.data() + shift, f.bytes.data() + off, len))
        << GetParam().label << " off=" << off << " len=" << len;
    // Nothing written past the requested range (bounce copies are exact).
    for (size_t i = shift + len; i < shift + len + 64 && i < buf.size(); ++i) {
      ASSERT_EQ(buf.data()[i], std::byte{0xA5}) << "overrun at " << i - shift - len;
    }
  }
}

TEST_P(FileDeviceTest, BatchReadMatchesPlainRead) {
  test::RandomFile f = test::MakeRandomFile(kFileSize, 8);
  bool skipped;
  auto dev = OpenOrSkip(f.path, GetParam().options, &skipped);
  if (skipped) GTEST_SKIP() << "device unsupported here";
  ASSERT_NE(dev, nullptr);
  auto ranges = RandomRanges(99, 70, kFileSize);
  std::vector<AlignedBuffer> bufs;
  std::vector<ReadRequest> reqs;
  for (auto [off, len] : ranges) bufs.emplace_back(len + 1, 4096);
  for (size_t i = 0; i < ranges.size(); ++i) {
    reqs.push_back({ranges[i].first, ranges[i].second, bufs[i].data() + (i % 2), Status()});
  }
  // One bad request in the middle fails alone.
  std::vector<std::byte> dummy(16);
  reqs.insert(reqs.begin() + 10, ReadRequest{kFileSize - 4, 16, dummy.data(), Status()});
  Status st = dev->Read(std::span<ReadRequest>(reqs));
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  for (size_t i = 0, k = 0; i < reqs.size(); ++i) {
    if (i == 10) {
      EXPECT_EQ(reqs[i].status.code(), Status::Code::kInvalidArgument);
      continue;
    }
    ASSERT_TRUE(reqs[i].status.ok()) << reqs[i].status.ToString();
    ASSERT_EQ(0, std::memcmp(bufs[k].data() + (k % 2), f.bytes.data() + ranges[k].first,
                             ranges[k].second))
        << GetParam().label << " request " << k;
    ++k;
  }
}

TEST_P(FileDeviceTest, RefusesReadsOutsideTheFile) {
  test::RandomFile f = test::MakeRandomFile(10000, 9);
  bool skipped;
  auto dev = OpenOrSkip(f.path, GetParam().options, &skipped);
  if (skipped) GTEST_SKIP() << "device unsupported here";
  ASSERT_NE(dev, nullptr);
  std::vector<std::byte> buf(20000);
  Status st = dev->ReadAt(9000, 1001, buf.data());
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("exceeds the device size 10000"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(f.path), std::string::npos) << st.message();
  // Overflowing offset + length is caught, not wrapped.
  EXPECT_EQ(dev->ReadAt(~uint64_t{0} - 2, 16, buf.data()).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(dev->ReadAt(0, 16, nullptr).code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(dev->ReadAt(9000, 1000, buf.data()).ok());
}

INSTANTIATE_TEST_SUITE_P(AllKinds, FileDeviceTest, ::testing::ValuesIn(AllFileDevices()),
                         [](const ::testing::TestParamInfo<DeviceCase>& info) {
                           return std::string(info.param.label);
                         });

TEST(FileDeviceTest, FileIsNotModified) {
  test::RandomFile f = test::MakeRandomFile(50000, 10);
  for (const DeviceCase& c : AllFileDevices()) {
    bool skipped;
    auto dev = OpenOrSkip(f.path, c.options, &skipped);
    if (skipped) continue;
    std::vector<std::byte> buf(50000);
    ASSERT_TRUE(dev->ReadAt(0, 50000, buf.data()).ok());
  }
  EXPECT_EQ(testing::ReadFile(f.path), f.bytes);
}

TEST(FileDeviceTest, DirectWithoutBounceRefusesUnalignedReads) {
  test::RandomFile f = test::MakeRandomFile(3 * 4096 + 100, 12);
  DeviceOptions o;
  o.kind = "direct";
  o.direct_alignment = 4096;
  o.allow_unaligned = false;
  bool skipped;
  auto dev = OpenOrSkip(f.path, o, &skipped);
  if (skipped) GTEST_SKIP() << "O_DIRECT unsupported here";
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(dev->required_alignment(), 4096u);
  AlignedBuffer buf(3 * 4096 + 4096, 4096);
  Status st = dev->ReadAt(100, 4096, buf.data());
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("not aligned to 4096"), std::string::npos) << st.message();
  EXPECT_FALSE(dev->ReadAt(0, 4096, buf.data() + 1).ok());
  // Aligned reads, and an aligned start running to the unaligned end of the file, are fine.
  ASSERT_TRUE(dev->ReadAt(4096, 4096, buf.data()).ok());
  EXPECT_EQ(0, std::memcmp(buf.data(), f.bytes.data() + 4096, 4096));
  ASSERT_TRUE(dev->ReadAt(2 * 4096, 4096 + 100, buf.data()).ok());
  EXPECT_EQ(0, std::memcmp(buf.data(), f.bytes.data() + 2 * 4096, 4096 + 100));
}

TEST(FileDeviceTest, ConcurrentReadersOnOneUringDevice) {
  test::RandomFile f = test::MakeRandomFile(kFileSize, 13);
  DeviceOptions o;
  o.kind = "io_uring";
  o.queue_depth = 8;
  o.max_rings = 2;  // fewer rings than threads: callers share and wait
  bool skipped;
  auto dev = OpenOrSkip(f.path, o, &skipped);
  if (skipped) GTEST_SKIP() << "io_uring unsupported here";
  ASSERT_NE(dev, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (auto [off, len] : RandomRanges(100 + t, 40, kFileSize)) {
        std::vector<std::byte> buf(len + 1);
        if (!dev->ReadAt(off, len, buf.data()).ok() ||
            std::memcmp(buf.data(), f.bytes.data() + off, len) != 0) {
          ++bad;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(MemoryDeviceTest, ServesItsBytesAndChecksRanges) {
  std::string bytes = "0123456789abcdef";
  MemoryDevice dev("t", bytes);
  EXPECT_EQ(dev.name(), "memory:t");
  char out[8] = {};
  ASSERT_TRUE(dev.ReadAt(10, 6, out).ok());
  EXPECT_EQ(std::string(out, 6), "abcdef");
  EXPECT_EQ(dev.ReadAt(11, 6, out).code(), Status::Code::kInvalidArgument);

  MemoryDevice aligned("a", std::string(64, 'x'), 16);
  AlignedBuffer buf(64, 64);
  EXPECT_TRUE(aligned.ReadAt(16, 32, buf.data()).ok());
  EXPECT_FALSE(aligned.ReadAt(8, 16, buf.data()).ok());
  EXPECT_FALSE(aligned.ReadAt(16, 8, buf.data()).ok());
  EXPECT_TRUE(aligned.ReadAt(48, 16, buf.data()).ok());
}

TEST(OpenDeviceTest, ErrorsNameTheProblem) {
  test::RandomFile f = test::MakeRandomFile(100, 14);
  DeviceOptions o;
  o.kind = "floppy";
  auto bad_kind = OpenDevice(f.path, o);
  ASSERT_FALSE(bad_kind.ok());
  EXPECT_NE(bad_kind.status().message().find("floppy"), std::string::npos);
  EXPECT_NE(bad_kind.status().message().find("io_uring"), std::string::npos);

  o.kind = "pread";
  auto missing = OpenDevice(f.path + ".missing", o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);

  auto dir = OpenDevice(testing::TempDir(), o);
  ASSERT_FALSE(dir.ok());

  o.profile = "ufs9";
  auto bad_profile = OpenDevice(f.path, o);
  ASSERT_FALSE(bad_profile.ok());
  EXPECT_NE(bad_profile.status().message().find("ufs9"), std::string::npos);

  o.kind = "io_uring";
  o.profile.clear();
  o.queue_depth = 0;
  EXPECT_EQ(OpenDevice(f.path, o).status().code(), Status::Code::kInvalidArgument);

  o.kind = "direct";
  o.direct_alignment = 3000;
  EXPECT_EQ(OpenDevice(f.path, o).status().code(), Status::Code::kInvalidArgument);
}

// auto takes the first of io_uring+direct, direct, pread that opens on this file system.
TEST(OpenDeviceTest, AutoPicksTheFirstKindThatOpens) {
  test::RandomFile f = test::MakeRandomFile(3 * 4096 + 7, 15);
  DeviceOptions o;
  o.kind = "auto";
  auto dev = OpenDevice(f.path, o);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  std::string expected;
  for (const char* kind : {"io_uring+direct", "direct", "pread"}) {
    DeviceOptions k;
    k.kind = kind;
    if (OpenDevice(f.path, k).ok()) {
      expected = kind;
      break;
    }
  }
  EXPECT_EQ((*dev)->name(), expected + ":" + f.path);
  std::string buf(f.bytes.size(), '\0');
  ASSERT_TRUE((*dev)->ReadAt(0, buf.size(), buf.data()).ok());
  EXPECT_EQ(buf, f.bytes);

  auto missing = OpenDevice(f.path + ".missing", o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
}

TEST(OpenDeviceTest, EmptyFile) {
  std::string path = testing::TempDir() + "/empty.bin";
  testing::WriteFile(path, "");
  for (const DeviceCase& c : AllFileDevices()) {
    bool skipped;
    auto dev = OpenOrSkip(path, c.options, &skipped);
    if (skipped) continue;
    ASSERT_NE(dev, nullptr) << c.label;
    EXPECT_EQ(dev->size(), 0u);
    char b;
    EXPECT_TRUE(dev->ReadAt(0, 0, &b).ok());
    EXPECT_FALSE(dev->ReadAt(0, 1, &b).ok());
  }
}

}  // namespace
}  // namespace weir::storage
