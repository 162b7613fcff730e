// StreamingWeights: the MLP computed from a pack's neuron bundles streamed through the cache gives
// bit for bit the output of the same computation with everything resident, for every policy,
// budget (from nothing cached to everything), partition scheme, lane size, device and group
// size; matches an independent double-precision MLP of the source model; turns read failures
// into errors; never exceeds its cache budget.
#include "model/streaming_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "format/model_file.h"
#include "format/synth_llama.h"
#include "format/weir_pack_reader.h"
#include "format/weir_pack_writer.h"
#include "storage/fault_injecting_device.h"
#include "storage/memory_device.h"
#include "storage/open_device.h"
#include "tensor/quantize.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

struct Packed {
  std::string dir, gguf, pack;
  format::ModelFile src;
  std::unique_ptr<format::PackFile> file;
};

Packed MakePacked(DType type, int group, int n_layers = 3, int d_ff = 96) {
  Packed p;
  p.dir = testing::TempDir();
  format::SynthSpec s;
  s.d_model = 64;
  s.n_layers = n_layers;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.d_ff = d_ff;
  s.vocab_size = 270;
  p.gguf = p.dir + "/m.gguf";
  EXPECT_TRUE(format::WriteRandomLlamaGguf(s, type, 21, p.gguf, nullptr).ok());
  p.src = format::LoadModel(p.gguf).value();
  format::PackOptions o;
  o.group_size = group;
  p.pack = p.dir + "/m.weir";
  EXPECT_TRUE(format::WritePack(p.src, p.pack, o).ok());
  p.file = std::make_unique<format::PackFile>(format::PackFile::Open(p.pack).value());
  return p;
}

// Random inputs [n_tokens, d_model] per (token step).
std::vector<float> Inputs(int count, int d, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(count) * d);
  for (float& v : x) v = nd(rng);
  return x;
}

// Runs `steps` token steps; step s feeds n_of(s) tokens to every layer and records outputs.
Result<std::vector<float>> RunSteps(StreamingWeights& mlp, const format::PackFile& pack, int steps,
                                    ThreadPool* pool) {
  const int d = pack.config().d_model, L = pack.config().n_layers;
  std::vector<float> outs;
  for (int s = 0; s < steps; ++s) {
    const int n = s == 0 ? 3 : 1;  // a small prefill, then decode steps
    mlp.BeginToken();
    for (int l = 0; l < L; ++l) {
      std::vector<float> x = Inputs(n, d, static_cast<uint64_t>(s * 100 + l));
      std::vector<float> out(static_cast<size_t>(n) * d, -1.0f);
      WEIR_RETURN_IF_ERROR(mlp.Forward(l, x.data(), n, out.data(), pool));
      outs.insert(outs.end(), out.begin(), out.end());
    }
  }
  return outs;
}

std::unique_ptr<storage::BlockDevice> MemoryOf(const std::string& path) {
  return std::make_unique<storage::MemoryDevice>("pack", testing::ReadFile(path), 1);
}

StreamingOptions Opts(uint64_t budget, const std::string& policy, int lane = 32) {
  StreamingOptions o;
  o.cache_budget = budget;
  o.policy = policy;
  o.block_bytes = 4096;
  o.lane_channels = lane;
  o.prefetch_layers = 1;
  o.policy_options.window_tokens = 2;
  return o;
}

// The reference: everything resident (budget far above the pack), one thread.
std::vector<float> Resident(const Packed& p, int steps, int lane = 32) {
  auto dev = MemoryOf(p.pack);
  auto mlp = StreamingWeights::Create(*p.file, dev.get(), Opts(1ull << 30, "lru", lane)).value();
  EXPECT_TRUE(mlp->resident_mode());
  auto out = RunSteps(*mlp, *p.file, steps, nullptr);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return std::move(out).value();
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(StreamingWeightsTest, MatchesDoublePrecisionMlpOfTheSource) {
  for (DType type : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
    for (int group : {1, 2}) {
     // d_ff 80 ends in a chunk of 16 neurons (float types only).
     for (int ff : {96, 80}) {
      if (ff % 32 != 0 && (type == DType::kQ8_0 || type == DType::kQ4_0)) continue;
      SCOPED_TRACE(std::string(DTypeName(type)) + " group " + std::to_string(group) + " d_ff " +
                   std::to_string(ff));
      Packed p = MakePacked(type, group, 3, ff);
      auto dev = MemoryOf(p.pack);
      auto mlp = StreamingWeights::Create(*p.file, dev.get(), Opts(0, "lru")).value();
      const int d = 64;
      for (int l = 0; l < 3; ++l) {
        std::vector<float> x = Inputs(1, d, 7 + static_cast<uint64_t>(l)), out(d);
        ASSERT_TRUE(mlp->Forward(l, x.data(), 1, out.data(), nullptr).ok());
        const std::string b = StrFormat("blk.%d.", l);
        const TensorView gate = *p.src.Find(b + "ffn_gate.weight"),
                         up = *p.src.Find(b + "ffn_up.weight"),
                         down = *p.src.Find(b + "ffn_down.weight");
        std::vector<float> row(d), drow(ff);
        std::vector<double> h(ff), want(d, 0.0);
        for (int c = 0; c < ff; ++c) {
          double g = 0, u = 0;
          DequantizeRow(gate, c, row.data());
          for (int i = 0; i < d; ++i) g += double{row[i]} * x[i];
          DequantizeRow(up, c, row.data());
          for (int i = 0; i < d; ++i) u += double{row[i]} * x[i];
          h[c] = g / (1 + std::exp(-g)) * u;
        }
        for (int r = 0; r < d; ++r) {
          DequantizeRow(down, r, drow.data());
          for (int c = 0; c < ff; ++c) want[r] += double{drow[c]} * h[c];
        }
        double err = 0, norm = 0;
        for (int r = 0; r < d; ++r) {
          err += (out[r] - want[r]) * (out[r] - want[r]);
          norm += want[r] * want[r];
        }
        // F32/F16: summation order only. Q8_0/Q4_0: the activation's 8-bit rounding (x and
        // h; the weights are the source's own blocks).
        const double tol = type == DType::kF32 || type == DType::kF16 ? 1e-5 : 0.02;
        EXPECT_LT(std::sqrt(err / norm), tol) << "layer " << l;
      }
     }
    }
  }
}

TEST(StreamingWeightsTest, BitIdenticalToResidentForEveryPolicyAndBudget) {
  Packed p = MakePacked(DType::kQ8_0, 1);
  const std::vector<float> want = Resident(p, 5);
  ThreadPool pool(2);
  std::vector<std::string> policies = {"lru", "lfu", "atu", "window", "mru"};
  auto dev = MemoryOf(p.pack);
  uint64_t all = 0;
  {
    auto probe = StreamingWeights::Create(*p.file, dev.get(), Opts(0, "lru")).value();
    all = probe->all_blocks_charge();
  }
  // A run records its accesses for belady.
  {
    auto opt = Opts(all / 3, "lru");
    opt.record_trace = true;
    auto mlp = StreamingWeights::Create(*p.file, dev.get(), opt).value();
    ASSERT_TRUE(RunSteps(*mlp, *p.file, 5, &pool).ok());
    policies.push_back("belady");
    auto trace = mlp->TakeTrace();
    ASSERT_FALSE(trace.empty());
    for (const char* parts_name : {"uniform", "proportional", "shared"}) {
      const std::string parts = parts_name;
      for (const std::string& policy : policies) {
        for (uint64_t budget : {uint64_t{0}, all / 10, all / 3, all * 2 / 3, all + (1 << 20)}) {
          SCOPED_TRACE(parts + " " + policy + " budget " + std::to_string(budget));
          auto o = Opts(budget, policy);
          o.partitions = parts;
          o.policy_options.belady_trace = trace;
          auto m = StreamingWeights::Create(*p.file, dev.get(), o);
          ASSERT_TRUE(m.ok()) << m.status().ToString();
          auto got = RunSteps(**m, *p.file, 5, &pool);
          ASSERT_TRUE(got.ok()) << got.status().ToString();
          EXPECT_TRUE(BitEqual(*got, want));
          const storage::CacheStats cs = (*m)->cache_stats();
          EXPECT_LE(cs.current_bytes, cs.budget_bytes);
          const StreamStats st = (*m)->stats();
          EXPECT_EQ(st.tokens, 5u);
          EXPECT_GE(st.block_accesses, st.block_hits);
          if (budget == 0) {
            EXPECT_EQ(st.block_hits, 0u);
            EXPECT_EQ(st.transient_bytes, st.storage_bytes);  // nothing could be cached
          }
          if (budget > all) {
            EXPECT_TRUE((*m)->resident_mode());
            // Read once, then everything from DRAM.
            EXPECT_LE(st.storage_bytes,
                      (*m)->streamed_bytes() + 4096 * (p.file->groups().size() + 3));
          }
        }
      }
    }
  }
}

TEST(StreamingWeightsTest, BitIdenticalAcrossLanesGroupsTypesAndThreads) {
  for (DType type : {DType::kF32, DType::kQ4_0}) {
    for (int group : {1, 2, 3}) {
      // F32 with d_ff 80: lanes end in a narrower chunk.
      Packed p = MakePacked(type, group, 4, type == DType::kF32 ? 80 : 96);
      for (int lane : {32, 64, 96, 256}) {
        SCOPED_TRACE(std::string(DTypeName(type)) + " group " + std::to_string(group) + " lane " +
                     std::to_string(lane));
        const std::vector<float> want = Resident(p, 3, lane);
        auto dev = MemoryOf(p.pack);
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          auto m = StreamingWeights::Create(*p.file, dev.get(), Opts(20000, "lfu", lane)).value();
          auto got = RunSteps(*m, *p.file, 3, &pool);
          ASSERT_TRUE(got.ok()) << got.status().ToString();
          EXPECT_TRUE(BitEqual(*got, want)) << threads << " threads";
        }
      }
    }
  }
}

TEST(StreamingWeightsTest, FileDevices) {
  Packed p = MakePacked(DType::kQ4_0, 2, 4);
  const std::vector<float> want = Resident(p, 4);
  ThreadPool pool(2);
  for (const char* kind : {"pread", "direct", "io_uring", "io_uring+direct", "mmap"}) {
    SCOPED_TRACE(kind);
    storage::DeviceOptions dopt;
    dopt.kind = kind;
    auto dev = storage::OpenDevice(p.pack, dopt);
    if (!dev.ok() && dev.status().code() == Status::Code::kUnsupported) continue;  // no io_uring
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    for (uint64_t budget : {uint64_t{0}, uint64_t{30000}, uint64_t{1} << 30}) {
      auto m = StreamingWeights::Create(*p.file, dev->get(), Opts(budget, "lru"));
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      auto got = RunSteps(**m, *p.file, 4, &pool);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_TRUE(BitEqual(*got, want)) << "budget " << budget;
    }
  }
}

TEST(StreamingWeightsTest, ReadFailuresAreErrorsNeverWrongOutput) {
  Packed p = MakePacked(DType::kQ8_0, 1, 4);
  const std::vector<float> want = Resident(p, 4);
  const size_t per_step = 4 * 64;  // floats a decode step writes (4 layers)
  for (uint64_t budget : {uint64_t{0}, uint64_t{40000}, uint64_t{1} << 30}) {
    for (int trial = 0; trial < 12; ++trial) {
      SCOPED_TRACE("budget " + std::to_string(budget) + " trial " + std::to_string(trial));
      storage::FaultOptions fo;
      fo.seed = static_cast<uint64_t>(trial) + 1;
      if (trial % 3 == 0) fo.fail_after_reads = static_cast<uint64_t>(trial) * 2;  // EIO mid-run
      if (trial % 3 == 1) fo.fail_probability = 0.2;
      if (trial % 3 == 2) fo.short_read_probability = 0.2;
      storage::FaultInjectingDevice dev(MemoryOf(p.pack), fo);
      auto m = StreamingWeights::Create(*p.file, &dev, Opts(budget, "lfu")).value();
      ThreadPool pool(2);
      // Step by step: every step that succeeds gives the resident output; a failure is an I/O
      // error, and the run stops there.
      const int d = 64, L = 4;
      size_t at = 0;
      bool failed = false;
      for (int s = 0; s < 4 && !failed; ++s) {
        const int n = s == 0 ? 3 : 1;
        m->BeginToken();
        for (int l = 0; l < L && !failed; ++l) {
          std::vector<float> x = Inputs(n, d, static_cast<uint64_t>(s * 100 + l));
          std::vector<float> out(static_cast<size_t>(n) * d);
          Status st = m->Forward(l, x.data(), n, out.data(), &pool);
          if (!st.ok()) {
            EXPECT_EQ(st.code(), Status::Code::kIoError) << st.ToString();
            failed = true;
            break;
          }
          ASSERT_EQ(0, std::memcmp(out.data(), want.data() + at, out.size() * sizeof(float)))
              << "wrong output after step " << s << " layer " << l;
          at += out.size();
        }
      }
      (void)per_step;
      // A failed prefetch is retried on demand, so a fault need not stop the run; but a run
      // without faults succeeds, and one where every read fails does not.
      if (dev.injected_faults() == 0) {
        EXPECT_FALSE(failed);
      }
      if (fo.fail_after_reads == 0) {
        EXPECT_TRUE(failed);
      }
    }
  }
}

TEST(StreamingWeightsTest, BudgetChangesAtRunTime) {
  Packed p = MakePacked(DType::kQ8_0, 1, 4);
  const std::vector<float> want = Resident(p, 6);
  auto dev = MemoryOf(p.pack);
  ThreadPool pool(2);
  auto m = StreamingWeights::Create(*p.file, dev.get(), Opts(1ull << 30, "lru")).value();
  ASSERT_TRUE(m->resident_mode());
  const int d = 64, L = 4;
  size_t at = 0;
  const uint64_t all = m->all_blocks_charge();
  const uint64_t budgets[] = {1ull << 30, all / 4, 0, all / 2, 1ull << 30, all / 8};
  for (int s = 0; s < 6; ++s) {
    ASSERT_TRUE(m->SetCacheBudget(budgets[s]).ok());
    EXPECT_EQ(m->resident_mode(), budgets[s] > all + (1 << 16));
    const int n = s == 0 ? 3 : 1;
    m->BeginToken();
    for (int l = 0; l < L; ++l) {
      std::vector<float> x = Inputs(n, d, static_cast<uint64_t>(s * 100 + l));
      std::vector<float> out(static_cast<size_t>(n) * d);
      ASSERT_TRUE(m->Forward(l, x.data(), n, out.data(), &pool).ok());
      ASSERT_EQ(0, std::memcmp(out.data(), want.data() + at, out.size() * sizeof(float))) << s;
      at += out.size();
      const storage::CacheStats cs = m->cache_stats();
      EXPECT_LE(cs.current_bytes, budgets[s]);
    }
  }
}

TEST(StreamingWeightsTest, RejectsBadOptions) {
  Packed p = MakePacked(DType::kF32, 1, 2);
  auto dev = MemoryOf(p.pack);
  auto o = Opts(0, "lru");
  o.block_bytes = 1000;
  EXPECT_FALSE(StreamingWeights::Create(*p.file, dev.get(), o).ok());
  o = Opts(0, "lru", 6);
  EXPECT_FALSE(StreamingWeights::Create(*p.file, dev.get(), o).ok());
  o = Opts(0, "nope");
  EXPECT_FALSE(StreamingWeights::Create(*p.file, dev.get(), o).ok());
  o = Opts(0, "lru");
  o.partitions = "half";
  EXPECT_FALSE(StreamingWeights::Create(*p.file, dev.get(), o).ok());
  storage::MemoryDevice small("small", std::string(100, 'x'));
  auto r = StreamingWeights::Create(*p.file, &small, Opts(0, "lru"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("holds 100 bytes"), std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace weir::model
