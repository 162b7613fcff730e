// The throttled device really reads (the bytes are the file's), and the service model behind
// it has the shape the profiles promise. No wall-clock timing is asserted.
#include "storage/throttled_device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "storage/open_device.h"
#include "storage/storage_profile.h"
#include "storage_test_util.h"

namespace weir::storage {
namespace {

TEST(StorageProfileTest, KnownNamesAndErrors) {
  for (const std::string& name : StorageProfileNames()) {
    auto p = FindStorageProfile(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ(p->name, name);
    EXPECT_TRUE(ValidateProfile(*p).ok()) << name;
  }
  for (const char* name : {"ufs4", "ufs3.1", "ufs2.2", "nvme-pcie3", "a18-flash"}) {
    EXPECT_TRUE(FindStorageProfile(name).ok()) << name;
  }
  auto bad = FindStorageProfile("ufs5");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ufs4"), std::string::npos);  // lists the known ones
  StorageProfile p;
  p.name = "broken";
  p.peak_bytes_per_s = 0;
  Status st = ValidateProfile(p);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("peak_bytes_per_s"), std::string::npos);
}

TEST(StorageProfileTest, ModelShape) {
  // a18-flash is DIP's flat 1 GB/s at any size and concurrency.
  StorageProfile a18 = FindStorageProfile("a18-flash").value();
  for (size_t bytes : {size_t{4096}, size_t{65536}, size_t{1} << 20}) {
    EXPECT_NEAR(ModelThroughput(a18, bytes, 1), 1e9, 1e6);
    EXPECT_NEAR(ModelThroughput(a18, bytes, 16), 1e9, 1e6);
  }
  for (const char* name : {"ufs4", "ufs3.1", "ufs2.2", "nvme-pcie3"}) {
    StorageProfile p = FindStorageProfile(name).value();
    // One read at a time: exactly latency + overhead + transfer.
    const double qd1_4k = ModelThroughput(p, 4096, 1);
    EXPECT_NEAR(qd1_4k,
                4096 / (p.access_latency_s + p.command_overhead_s + 4096 / p.peak_bytes_per_s),
                qd1_4k * 1e-9)
        << name;
    double prev = 0;
    for (size_t bytes = 4096; bytes <= (size_t{4} << 20); bytes *= 4) {
      const double t1 = ModelThroughput(p, bytes, 1);
      const double t32 = ModelThroughput(p, bytes, 32);
      EXPECT_GT(t1, prev) << name << " " << bytes;          // bigger reads are faster
      EXPECT_GE(t32, t1 * 0.999) << name << " " << bytes;   // concurrency never hurts
      EXPECT_LE(t32, p.peak_bytes_per_s * 1.0001) << name;  // the bus is the ceiling
      prev = t1;
    }
    // Flash is slow for small reads: 4 KiB at QD1 is far below the peak, 4 MiB close to it.
    EXPECT_LT(qd1_4k, 0.05 * p.peak_bytes_per_s) << name;
    EXPECT_GT(ModelThroughput(p, size_t{4} << 20, 32), 0.9 * p.peak_bytes_per_s) << name;
  }
}

TEST(StorageProfileTest, ServiceModelSharesTheBus) {
  StorageProfile p;
  p.name = "toy";
  p.peak_bytes_per_s = 1000;  // 1000 B/s
  p.access_latency_s = 1;
  p.command_overhead_s = 0;
  p.queue_depth = 2;
  ServiceModel m(p);
  // Two requests at t=0 share the latency but not the bus; the third waits for a slot.
  EXPECT_DOUBLE_EQ(m.Schedule(0, 1000), 2.0);
  EXPECT_DOUBLE_EQ(m.Schedule(0, 1000), 3.0);
  // The first slot frees at 2.0: issued at 2.0, out of the flash at 3.0, bus free at 3.0 -> 3.5.
  EXPECT_DOUBLE_EQ(m.Schedule(0, 500), 3.5);
  // An idle device later: latency + transfer from the arrival.
  EXPECT_DOUBLE_EQ(m.Schedule(10, 1000), 12.0);
  // min_transfer_bytes bills small reads as a whole page.
  p.min_transfer_bytes = 100;
  ServiceModel paged(p);
  EXPECT_DOUBLE_EQ(paged.Schedule(0, 1), 1.1);
}

TEST(ThrottledDeviceTest, ReadsTheRealBytes) {
  test::RandomFile f = test::MakeRandomFile(300000, 5);
  for (const char* kind : {"pread", "io_uring"}) {
    DeviceOptions o;
    o.kind = kind;
    o.profile = "a18-flash";
    auto dev = OpenDevice(f.path, o);
    if (!dev.ok() && dev.status().code() == Status::Code::kUnsupported) continue;
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    EXPECT_NE((*dev)->name().find("throttled(a18-flash)"), std::string::npos);
    std::mt19937_64 rng(6);
    for (int i = 0; i < 30; ++i) {
      const size_t len = 1 + rng() % 20000;
      const uint64_t off = rng() % (300000 - len);
      std::vector<std::byte> buf(len);
      ASSERT_TRUE((*dev)->ReadAt(off, len, buf.data()).ok());
      ASSERT_EQ(0, std::memcmp(buf.data(), f.bytes.data() + off, len));
    }
    // A batch, from two threads at once.
    auto batch = [&](uint64_t seed) {
      std::mt19937_64 r(seed);
      std::vector<std::vector<std::byte>> bufs;
      std::vector<ReadRequest> reqs;
      for (int i = 0; i < 16; ++i) {
        const size_t len = 1 + r() % 8000;
        bufs.emplace_back(len);
        reqs.push_back({r() % (300000 - len), len, nullptr, Status()});
      }
      for (size_t i = 0; i < reqs.size(); ++i) reqs[i].dst = bufs[i].data();
      EXPECT_TRUE((*dev)->Read(std::span<ReadRequest>(reqs)).ok());
      for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(0, std::memcmp(bufs[i].data(), f.bytes.data() + reqs[i].offset, reqs[i].length));
      }
    };
    std::thread t1(batch, 7), t2(batch, 8);
    t1.join();
    t2.join();
    auto* throttled = dynamic_cast<ThrottledDevice*>(dev->get());
    ASSERT_NE(throttled, nullptr);
    EXPECT_EQ(throttled->stats().requests, 30u + 32u);
    // Out-of-range reads are refused before any waiting.
    std::byte b;
    EXPECT_EQ((*dev)->ReadAt(300000, 1, &b).code(), Status::Code::kInvalidArgument);
  }
}

}  // namespace
}  // namespace weir::storage
