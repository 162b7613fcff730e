// Faults while a streamed pack decodes: the real streaming path -- a pack file on disk
// read by the pread or io_uring device, a budget that makes every token read from storage, dense
// bundles and DIP-CA over columns -- with the storage breaking under it. Each fault must end in a
// clean IoError or, where the fault is transient (a slow read, an -EAGAIN completion, a short read
// the device completes), in the resident run's tokens and logits bit for bit. Never a crash, a hang
// or a wrong token. Faults are seeded or counted, never timed, so the tests do not depend on the
// speed of the machine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "format/model_file.h"
#include "format/synth_llama.h"
#include "format/weir_pack_writer.h"
#include "model/sampler.h"
#include "model/session.h"
#include "model/streaming_model.h"
#include "model/streaming_test_util.h"
#include "sparsity/policy.h"
#include "storage/fault_injecting_device.h"
#include "storage/file_device.h"
#include "storage/uring_device.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

using streaming_test::Config;
using streaming_test::Trace;

struct Packs {
  std::string bundles, columns;
};

const Packs& MakePacks() {
  static const Packs packs = [] {
    Packs p;
    const std::string dir = testing::TempDir();
    const std::string gguf = dir + "/faults.gguf";
    EXPECT_TRUE(
        format::WriteRandomLlamaGguf(streaming_test::SmallLlama(), DType::kQ8_0, 11, gguf, nullptr)
            .ok());
    auto m = format::LoadModel(gguf).value();
    format::PackOptions o;
    o.layout = format::PackLayout::kBundles;
    p.bundles = dir + "/faults-bundles.weir";
    EXPECT_TRUE(format::WritePack(m, p.bundles, o).ok());
    o.layout = format::PackLayout::kColumns;
    p.columns = dir + "/faults-columns.weir";
    EXPECT_TRUE(format::WritePack(m, p.columns, o).ok());
    return p;
  }();
  return packs;
}

// One streamed decode, step by step: `between(step)` runs before each generated token's forward
// call (truncating the file, changing the budget). Greedy, as streaming_test::Generate. The budget
// is the minimum plus `budget_fraction` of the streamed bytes (1.0: all resident).
Result<Trace> Decode(const std::string& pack, std::unique_ptr<storage::BlockDevice> device,
                     const std::string& sparsity, double budget_fraction, ThreadPool* pool,
                     int steps, int prefetch_layers,
                     const std::function<Status(int, StreamingModel&)>& between = {},
                     MemoryPlan* plan_out = nullptr) {
  std::unique_ptr<sparsity::SparsityPolicy> policy;
  if (!sparsity.empty()) {
    WEIR_ASSIGN_OR_RETURN(policy, sparsity::ParseSparsity(sparsity, nullptr));
  }
  StreamingConfig c = Config(UINT64_MAX, "lru");
  c.stream.prefetch_layers = prefetch_layers;
  WEIR_ASSIGN_OR_RETURN(auto sm, StreamingModel::Open(pack, std::move(device), c));
  SessionOptions so = streaming_test::SessionFor(&sm->streamer(), policy.get());
  WEIR_ASSIGN_OR_RETURN(auto s, Session::Create(sm->model(), pool, so));
  WEIR_RETURN_IF_ERROR(sm->Fit(s->allocated_bytes()));
  if (budget_fraction < 1.0) {
    const MemoryPlan& p = sm->plan();
    WEIR_RETURN_IF_ERROR(sm->SetMemoryBudget(
        p.minimum() +
        static_cast<uint64_t>(budget_fraction * static_cast<double>(p.streamed_bytes))));
  }
  if (plan_out) *plan_out = sm->plan();
  const int vocab = sm->model().config().vocab_size;
  std::vector<int32_t> prompt = {1, 17, 250, 3, 99};
  Trace t;
  WEIR_ASSIGN_OR_RETURN(const float* l, s->Prefill(prompt));
  for (int i = 0; i < steps; ++i) {
    t.logits.insert(t.logits.end(), l, l + vocab);
    const int32_t tok = Sampler::Argmax(l, vocab);
    t.tokens.push_back(tok);
    if (between) WEIR_RETURN_IF_ERROR(between(i, *sm));
    WEIR_ASSIGN_OR_RETURN(l, s->Forward(std::span<const int32_t>(&tok, 1), LogitsFor::kLast));
  }
  t.logits.insert(t.logits.end(), l, l + vocab);
  return t;
}

std::unique_ptr<storage::BlockDevice> Pread(const std::string& path) {
  auto d = storage::FileDevice::Open(path, {});
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return std::move(d).value();
}

// nullptr when this kernel refuses io_uring (the caller skips).
std::unique_ptr<storage::BlockDevice> Uring(const std::string& path,
                                            std::function<int(uint64_t, int)> fault = {}) {
  storage::UringDevice::Options o;
  o.completion_fault = std::move(fault);
  auto d = storage::UringDevice::Open(path, o);
  if (!d.ok()) {
    EXPECT_EQ(d.status().code(), Status::Code::kUnsupported) << d.status().ToString();
    return nullptr;
  }
  return std::move(d).value();
}

struct Case {
  const char* name;
  bool columns;
  const char* sparsity;
  // DIP-CA's mask reads the cache while the I/O thread fills it, so with read-ahead its output
  // depends on the timing of the reads (docs/reliability.md, section 3): bitwise comparisons of
  // DIP-CA runs need read-ahead off. Dense bundles keep the I/O thread reading ahead.
  int prefetch_layers;
};
const Case kCases[] = {{"bundles dense", false, "", 1}, {"columns dip-ca", true, "dip-ca:0.5", -1}};

const std::string& PackOf(const Case& c) {
  return c.columns ? MakePacks().columns : MakePacks().bundles;
}

// The reference: the same pack with every weight resident, read from memory.
const Trace& Resident(const Case& c, ThreadPool* pool) {
  static std::map<std::string, Trace> done;
  auto it = done.find(c.name);
  if (it == done.end()) {
    auto t = Decode(PackOf(c), streaming_test::Memory(PackOf(c)), c.sparsity, 1.0, pool, 8,
                    c.prefetch_layers);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    it = done.emplace(c.name, t.ok() ? *t : Trace{}).first;
  }
  return it->second;
}

constexpr double kQuarter = 0.25;  // of the streamed bytes: most tokens read from storage

void ExpectCleanOrSame(const Result<Trace>& got, const Trace& want, bool* failed) {
  if (got.ok()) {
    EXPECT_TRUE(streaming_test::Same(*got, want));
  } else {
    *failed = true;
    EXPECT_EQ(got.status().code(), Status::Code::kIoError) << got.status().ToString();
    EXPECT_FALSE(got.status().message().empty());
  }
}

TEST(StreamingFaultsTest, RandomEioIsAnIoErrorNeverAWrongToken) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Trace& want = Resident(c, &pool);
    bool failed = false;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      storage::FaultOptions fo;
      fo.fail_probability = 0.02;
      fo.seed = seed;
      auto dev = std::make_unique<storage::FaultInjectingDevice>(Pread(PackOf(c)), fo);
      ExpectCleanOrSame(
          Decode(PackOf(c), std::move(dev), c.sparsity, kQuarter, &pool, 8, c.prefetch_layers),
          want, &failed);
    }
    EXPECT_TRUE(failed);  // 2 % of hundreds of reads: some run must have met a fault
  }
}

TEST(StreamingFaultsTest, ShortReadsAreAnIoErrorNeverPartialWeights) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Trace& want = Resident(c, &pool);
    bool failed = false;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      storage::FaultOptions fo;
      fo.short_read_probability = 0.02;
      fo.seed = seed;
      auto dev = std::make_unique<storage::FaultInjectingDevice>(Pread(PackOf(c)), fo);
      ExpectCleanOrSame(
          Decode(PackOf(c), std::move(dev), c.sparsity, kQuarter, &pool, 8, c.prefetch_layers),
          want, &failed);
    }
    EXPECT_TRUE(failed);
  }
}

TEST(StreamingFaultsTest, SlowReadsGiveTheResidentTokens) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    storage::FaultOptions fo;
    fo.delay = std::chrono::microseconds(300);  // every read; the result must not change
    auto dev = std::make_unique<storage::FaultInjectingDevice>(Pread(PackOf(c)), fo);
    auto got = Decode(PackOf(c), std::move(dev), c.sparsity, kQuarter, &pool, 8, c.prefetch_layers);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(streaming_test::Same(*got, Resident(c, &pool)));
  }
}

// A completion that reports an error fails the read it belongs to: the decode ends in an IoError
// naming the errno, unless nobody needed that read (a read-ahead the I/O thread does again on
// demand), when it must give the resident tokens. Completion 0 belongs to the static tensors,
// read at open: it always fails the run. Which completion serves which read depends on the I/O
// thread's merging and timing, so the others are checked by that rule, not by a fixed outcome.
TEST(StreamingFaultsTest, UringCompletionErrorsAreIoErrors) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    std::atomic<uint64_t> count{0};
    auto counting = Uring(PackOf(c), [&count](uint64_t, int res) {
      ++count;
      return res;
    });
    if (counting == nullptr) GTEST_SKIP() << "io_uring unavailable";
    auto clean =
        Decode(PackOf(c), std::move(counting), c.sparsity, kQuarter, &pool, 8, c.prefetch_layers);
    ASSERT_TRUE(clean.ok()) << clean.status().ToString();
    EXPECT_TRUE(streaming_test::Same(*clean, Resident(c, &pool)));
    const uint64_t n = count.load();
    ASSERT_GT(n, 3u);
    for (int err : {EIO, ENOSPC, EBADF}) {
      for (uint64_t at : {uint64_t{0}, n / 4, n / 2, n - 1}) {
        SCOPED_TRACE(std::to_string(err) + " at completion " + std::to_string(at) + " of about " +
                     std::to_string(n));
        auto dev =
            Uring(PackOf(c), [err, at](uint64_t k, int res) { return k == at ? -err : res; });
        auto got =
            Decode(PackOf(c), std::move(dev), c.sparsity, kQuarter, &pool, 8, c.prefetch_layers);
        if (at == 0) {
          ASSERT_FALSE(got.ok());
        }
        if (got.ok()) {
          EXPECT_TRUE(streaming_test::Same(*got, Resident(c, &pool)));
        } else {
          EXPECT_EQ(got.status().code(), Status::Code::kIoError) << got.status().ToString();
          EXPECT_NE(got.status().message().find(std::strerror(err)), std::string::npos)
              << got.status().ToString();
        }
      }
    }
  }
}

// A completion of 0 bytes before the end of the read is the end of the file: an IoError.
TEST(StreamingFaultsTest, UringEofCompletionIsAnIoError) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    for (uint64_t at : {0, 20}) {
      SCOPED_TRACE(std::string(c.name) + " at completion " + std::to_string(at));
      auto dev = Uring(PackOf(c), [at](uint64_t k, int res) { return k == at ? 0 : res; });
      if (dev == nullptr) GTEST_SKIP() << "io_uring unavailable";
      auto got =
          Decode(PackOf(c), std::move(dev), c.sparsity, kQuarter, &pool, 8, c.prefetch_layers);
      if (at == 0) {
        ASSERT_FALSE(got.ok());
      }
      if (got.ok()) {
        EXPECT_TRUE(streaming_test::Same(*got, Resident(c, &pool)));
      } else {
        EXPECT_EQ(got.status().code(), Status::Code::kIoError) << got.status().ToString();
        EXPECT_NE(got.status().message().find("unexpected end of file"), std::string::npos)
            << got.status().ToString();
      }
    }
  }
}

// -EAGAIN / -EINTR completions are retried and short completions are resumed: the decode succeeds
// with the resident run's tokens.
TEST(StreamingFaultsTest, UringTransientCompletionsAreRetried) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    std::atomic<uint64_t> injected{0};
    auto dev = Uring(PackOf(c), [&injected](uint64_t n, int res) {
      if (res <= 0) return res;
      switch (n % 5) {
        case 1:
          ++injected;
          return -EAGAIN;
        case 3:
          ++injected;
          return -EINTR;
        case 4:
          ++injected;
          return res > 1 ? res / 2 : res;  // short: the rest is read again
        default:
          return res;
      }
    });
    if (dev == nullptr) GTEST_SKIP() << "io_uring unavailable";
    auto got = Decode(PackOf(c), std::move(dev), c.sparsity, kQuarter, &pool, 8, c.prefetch_layers);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(streaming_test::Same(*got, Resident(c, &pool)));
    EXPECT_GT(injected.load(), 10u);
  }
}

// An -EAGAIN that never stops is given up on (bounded retries), not retried forever.
TEST(StreamingFaultsTest, UringEndlessEagainEndsInAnError) {
  ThreadPool pool(2);
  const Case& c = kCases[0];
  auto dev = Uring(PackOf(c), [](uint64_t n, int res) { return n >= 5 ? -EAGAIN : res; });
  if (dev == nullptr) GTEST_SKIP() << "io_uring unavailable";
  auto got = Decode(PackOf(c), std::move(dev), c.sparsity, kQuarter, &pool, 8, c.prefetch_layers);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Status::Code::kIoError) << got.status().ToString();
}

// The pack file is cut short while a decode runs. The device knows the old size, so reads pass its
// range check and meet the end of the file: every later step that needs bytes past the cut fails
// cleanly. With everything resident nothing is read again and the tokens stay right.
TEST(StreamingFaultsTest, PackTruncatedUnderARunningDecode) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    for (const char* kind : {"pread", "io_uring"}) {
      for (double budget : {kQuarter, 1.0}) {
        SCOPED_TRACE(std::string(c.name) + " " + kind + " budget " + std::to_string(budget));
        const std::string copy = testing::TempDir() + "/truncated.weir";
        std::filesystem::copy_file(PackOf(c), copy,
                                   std::filesystem::copy_options::overwrite_existing);
        const uint64_t full = std::filesystem::file_size(copy);
        auto dev = std::string(kind) == "pread" ? Pread(copy) : Uring(copy);
        if (dev == nullptr) continue;  // no io_uring here
        auto cut = [&](int step, StreamingModel&) {
          if (step == 2) {
            std::filesystem::resize_file(copy, full / 3);
          }
          return Status::Ok();
        };
        auto got =
            Decode(copy, std::move(dev), c.sparsity, budget, &pool, 8, c.prefetch_layers, cut);
        if (budget >= 1.0) {
          ASSERT_TRUE(got.ok()) << got.status().ToString();
          EXPECT_TRUE(streaming_test::Same(*got, Resident(c, &pool)));
        } else {
          ASSERT_FALSE(got.ok());
          EXPECT_EQ(got.status().code(), Status::Code::kIoError) << got.status().ToString();
        }
        std::filesystem::remove(copy);
      }
    }
  }
}

// The pack replaced (a new file renamed over its path) under a running decode: the open device
// keeps reading the file it opened, so the decode goes on with the original weights.
TEST(StreamingFaultsTest, PackReplacedUnderARunningDecodeKeepsTheOpenFile) {
  ThreadPool pool(2);
  const Case& c = kCases[0];
  const std::string copy = testing::TempDir() + "/replaced.weir";
  std::filesystem::copy_file(PackOf(c), copy, std::filesystem::copy_options::overwrite_existing);
  auto replace = [&](int step, StreamingModel&) {
    if (step == 2) {
      const std::string other = copy + ".new";
      testing::WriteFile(other, std::string(4096, 'x'));
      std::filesystem::rename(other, copy);
    }
    return Status::Ok();
  };
  auto got = Decode(copy, Pread(copy), c.sparsity, kQuarter, &pool, 8, c.prefetch_layers, replace);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(streaming_test::Same(*got, Resident(c, &pool)));
  std::filesystem::remove(copy);
}

// The budget shrunk to the minimum and grown back while decoding: the cache follows, the tokens do
// not change.
TEST(StreamingFaultsTest, BudgetShrunkAndGrownWhileDecoding) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    auto resize = [](int step, StreamingModel& sm) {
      const MemoryPlan& p = sm.plan();
      const uint64_t sizes[] = {p.minimum(), p.minimum() + p.streamed_bytes * 2,
                                p.minimum() + p.streamed_bytes / 8};
      WEIR_RETURN_IF_ERROR(sm.SetMemoryBudget(sizes[step % 3]));
      const storage::CacheStats cs = sm.streamer().cache_stats();
      if (cs.current_bytes > cs.budget_bytes) {
        return Status::Internal(StrFormat("cache holds %llu bytes over its budget %llu",
                                          static_cast<unsigned long long>(cs.current_bytes),
                                          static_cast<unsigned long long>(cs.budget_bytes)));
      }
      return Status::Ok();
    };
    auto got = Decode(PackOf(c), Pread(PackOf(c)), c.sparsity, kQuarter, &pool, 8,
                      c.prefetch_layers, resize);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(streaming_test::Same(*got, Resident(c, &pool)));
  }
}

}  // namespace
}  // namespace weir::model
