// Fault injection turns reads into IoErrors (never into wrong bytes reported as Ok), at the
// device level and through the cache and the prefetcher.
#include "storage/fault_injecting_device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "storage/memory_device.h"
#include "storage/open_device.h"
#include "storage_test_util.h"

namespace weir::storage {
namespace {

std::unique_ptr<MemoryDevice> RandomMemory(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return std::make_unique<MemoryDevice>("rand", bytes);
}

TEST(FaultInjectingDeviceTest, FailsFromTheNthRead) {
  auto mem = RandomMemory(4096, 1);
  const std::vector<std::byte> ref = mem->bytes();
  FaultOptions o;
  o.fail_after_reads = 3;
  FaultInjectingDevice dev(std::move(mem), o);
  std::vector<std::byte> buf(100);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(dev.ReadAt(i * 100, 100, buf.data()).ok());
    EXPECT_EQ(0, std::memcmp(buf.data(), ref.data() + i * 100, 100));
  }
  for (int i = 0; i < 5; ++i) {
    Status st = dev.ReadAt(0, 100, buf.data());
    EXPECT_EQ(st.code(), Status::Code::kIoError);
    EXPECT_NE(st.message().find("injected"), std::string::npos);
  }
  EXPECT_EQ(dev.reads(), 8u);
  EXPECT_EQ(dev.injected_faults(), 5u);
}

TEST(FaultInjectingDeviceTest, RandomFaultsNeverYieldWrongBytes) {
  test::RandomFile f = test::MakeRandomFile(200000, 2);
  for (const char* kind : {"pread", "io_uring"}) {
    DeviceOptions dopt;
    dopt.kind = kind;
    auto inner = OpenDevice(f.path, dopt);
    if (!inner.ok() && inner.status().code() == Status::Code::kUnsupported) continue;
    ASSERT_TRUE(inner.ok()) << inner.status().ToString();
    FaultOptions o;
    o.fail_probability = 0.2;
    o.short_read_probability = 0.2;
    o.seed = 42;
    FaultInjectingDevice dev(std::move(inner).value(), o);
    std::mt19937_64 rng(3);
    int ok = 0, failed = 0;
    for (int i = 0; i < 300; ++i) {
      const size_t len = 1 + rng() % 5000;
      const uint64_t off = rng() % (200000 - len);
      std::vector<std::byte> buf(len);
      Status st;
      if (i % 2 == 0) {
        st = dev.ReadAt(off, len, buf.data());
      } else {
        ReadRequest r{off, len, buf.data(), Status()};
        st = dev.Read(std::span<ReadRequest>(&r, 1));
        EXPECT_EQ(st.code(), r.status.code());
      }
      if (st.ok()) {
        ++ok;
        ASSERT_EQ(0, std::memcmp(buf.data(), f.bytes.data() + off, len)) << kind << " read " << i;
      } else {
        ++failed;
        EXPECT_EQ(st.code(), Status::Code::kIoError) << st.ToString();
      }
    }
    // p = 0.2 + 0.8 * 0.2 = 0.36 of reads fail; with a fixed seed this is deterministic.
    EXPECT_GT(failed, 50) << kind;
    EXPECT_GT(ok, 100) << kind;
    EXPECT_EQ(dev.injected_faults(), static_cast<uint64_t>(failed));
  }
}

TEST(FaultInjectingDeviceTest, BatchFailsOnlyTheFaultyRequests) {
  auto mem = RandomMemory(10000, 4);
  const std::vector<std::byte> ref = mem->bytes();
  FaultOptions o;
  o.fail_after_reads = 2;  // requests 0 and 1 succeed, the rest fail
  FaultInjectingDevice dev(std::move(mem), o);
  std::vector<std::vector<std::byte>> bufs(4, std::vector<std::byte>(100));
  std::vector<ReadRequest> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back({uint64_t(i) * 1000, 100, bufs[i].data(), Status()});
  EXPECT_EQ(dev.Read(std::span<ReadRequest>(reqs)).code(), Status::Code::kIoError);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(reqs[i].status.ok());
    EXPECT_EQ(0, std::memcmp(bufs[i].data(), ref.data() + i * 1000, 100));
  }
  EXPECT_EQ(reqs[2].status.code(), Status::Code::kIoError);
  EXPECT_EQ(reqs[3].status.code(), Status::Code::kIoError);
}

}  // namespace
}  // namespace weir::storage
