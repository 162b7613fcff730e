// Sparsity inside streamed experts: a mixture of experts packed with channel records (`weir pack
// --layout experts-columns`) and run with a sparsity policy reads, per token and chosen expert,
// only the kept channels' records and W_down; its logits equal the resident pack's bit for bit at
// every budget, the GGUF session's sparse run within the products' rounding; read faults are
// errors; what cannot run is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "format/model_file.h"
#include "format/synth_llama.h"
#include "format/weir_pack_reader.h"
#include "format/weir_pack_writer.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/streaming_model.h"
#include "model/streaming_test_util.h"
#include "sparsity/policy.h"
#include "storage/fault_injecting_device.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

using streaming_test::Config;
using streaming_test::Generate;
using streaming_test::Memory;
using streaming_test::Policy;
using streaming_test::Run;
using streaming_test::RunGguf;
using streaming_test::RunPack;
using streaming_test::Same;
using streaming_test::Trace;

struct Files {
  std::string gguf, pack, plain;  // plain: the same model with whole-expert records
};

Files MakeFiles(const std::string& arch, DType type) {
  Files f;
  const std::string dir = testing::TempDir();
  auto spec = format::SynthPreset("tiny", arch);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  const std::string stem = dir + "/" + arch + "-" + DTypeName(type);
  f.gguf = stem + ".gguf";
  EXPECT_TRUE(format::WriteRandomLlamaGguf(*spec, type, 5, f.gguf, nullptr).ok());
  auto m = format::LoadModel(f.gguf);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  format::PackOptions o;
  o.layout = format::PackLayout::kExperts;
  f.plain = stem + ".weir";
  Status st = format::WritePack(*m, f.plain, o);
  EXPECT_TRUE(st.ok()) << st.ToString();
  o.expert_columns = true;
  f.pack = stem + "-columns.weir";
  st = format::WritePack(*m, f.pack, o);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return f;
}

double RelErr(const Trace& a, const Trace& b) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.logits.size() && i < b.logits.size(); ++i) {
    err = std::max<double>(err, std::fabs(a.logits[i] - b.logits[i]));
    ref = std::max<double>(ref, std::fabs(a.logits[i]));
  }
  return ref > 0 ? err / ref : err;
}

TEST(StreamingExpertColumnsTest, EachExpertIsItsChannelRecordsThenWholeDown) {
  for (DType type : {DType::kF32, DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(DTypeName(type));
    const Files f = MakeFiles("mixtral", type);
    auto pack = format::PackFile::Open(f.pack);
    ASSERT_TRUE(pack.ok()) << pack.status().ToString();
    EXPECT_EQ(pack->layout(), format::PackLayout::kExperts);
    EXPECT_TRUE(pack->expert_columns());
    auto src = format::LoadModel(f.gguf);
    ASSERT_TRUE(src.ok());
    const auto bytes = testing::ReadFile(f.pack);
    for (const format::PackGroup& g : pack->groups()) {
      ASSERT_TRUE(g.expert_columns);
      const size_t row = RowBytes(type, g.d_ff);
      EXPECT_EQ(g.channel_bytes, 2 * row);
      EXPECT_EQ(g.expert_stride % 4096, 0u);
      EXPECT_EQ(g.expert_part[2], static_cast<uint64_t>(g.d_model) * g.channel_bytes);
      const TensorView* gate = src->Find(StrFormat("blk.%d.ffn_gate_exps.weight", g.first_layer));
      const TensorView* up = src->Find(StrFormat("blk.%d.ffn_up_exps.weight", g.first_layer));
      const TensorView* down = src->Find(StrFormat("blk.%d.ffn_down_exps.weight", g.first_layer));
      ASSERT_TRUE(gate && up && down);
      const size_t down_part = down->nbytes() / static_cast<size_t>(g.n_expert);
      EXPECT_EQ(g.down_records,
                static_cast<int64_t>((down_part + g.channel_bytes - 1) / g.channel_bytes));
      std::vector<uint8_t> gt(static_cast<size_t>(g.d_model) * row), ut(gt.size());
      for (int e = 0; e < g.n_expert; ++e) {
        const uint8_t* rec = reinterpret_cast<const uint8_t*>(bytes.data()) + g.offset +
                             static_cast<size_t>(e) * g.expert_stride;
        // gate^T and up^T: the packer's transposes (exact for F32: checked against the source
        // element by element below), channel by channel.
        ASSERT_TRUE(format::TransposeWeight(ExpertSlice(*gate, e), type, gt.data()).ok());
        ASSERT_TRUE(format::TransposeWeight(ExpertSlice(*up, e), type, ut.data()).ok());
        for (int i = 0; i < g.d_model; ++i) {
          ASSERT_EQ(std::memcmp(rec + i * g.channel_bytes, gt.data() + i * row, row), 0)
              << "expert " << e << " channel " << i;
          ASSERT_EQ(std::memcmp(rec + i * g.channel_bytes + row, ut.data() + i * row, row), 0);
        }
        if (type == DType::kF32) {
          const float* w = static_cast<const float*>(gate->data) +
                           static_cast<size_t>(e) * g.d_ff * g.d_model;
          const float* t = reinterpret_cast<const float*>(rec);
          // Channel 3's gate^T row holds column 3 of expert e's gate.
          for (int r = 0; r < g.d_ff; ++r) ASSERT_EQ(t[3 * 2 * g.d_ff + r], w[r * g.d_model + 3]);
        }
        // W_down: the source's bytes, right after the channel records.
        ASSERT_EQ(std::memcmp(rec + g.expert_part[2],
                              static_cast<const uint8_t*>(down->data) + e * down_part, down_part),
                  0);
      }
    }
  }
}

TEST(StreamingExpertColumnsTest, RefusesTypesWithoutTransposesAndMixedGateUp) {
  format::PackGroup g;
  g.d_model = 256;
  g.d_ff = 512;
  g.n_expert = 4;
  g.expert_columns = true;
  g.expert_type[0] = g.expert_type[1] = DType::kQ4_K;
  g.expert_type[2] = DType::kQ6_K;
  Status st = format::FinishExpertGroup(&g);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("convert"), std::string::npos) << st.ToString();
  g.expert_type[0] = DType::kQ4_0;
  g.expert_type[1] = DType::kQ8_0;
  EXPECT_FALSE(format::FinishExpertGroup(&g).ok());
  g.expert_type[1] = DType::kQ4_0;
  g.expert_type[2] = DType::kQ6_K;  // W_down keeps any type: it is read whole, row-major
  EXPECT_TRUE(format::FinishExpertGroup(&g).ok());
}

// The invariant: every streamed run equals the resident run with the same settings, bit
// for bit; here with sparsity inside the experts, whose records are then read per token.
TEST(StreamingExpertColumnsTest, SparseStreamedEqualsResidentAtEveryBudgetAndIsCloseToTheGguf) {
  ThreadPool pool(2);
  const int steps = 5;
  for (const char* arch : {"qwen3moe", "mixtral"}) {
    for (DType type : {DType::kF32, DType::kQ8_0, DType::kQ4_0}) {
      const Files f = MakeFiles(arch, type);
      for (const char* spec : {"", "dip:0.5", "dip:0.5,down=1", "glu:0.5", "dip-ca:0.5"}) {
        SCOPED_TRACE(std::string(arch) + " " + DTypeName(type) + " '" + spec + "'");
        auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lfu"), spec, &pool,
                                steps);
        ASSERT_TRUE(resident.ok()) << resident.status().ToString();
        // The GGUF session with the same policy computes the same pruned experts from its
        // row-major copies (another summation order; requantized transposes for Q8_0/Q4_0).
        auto gguf = RunGguf(f.gguf, spec, &pool, steps);
        ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
        if (type == DType::kF32) EXPECT_LT(RelErr(*gguf, resident->trace), 1e-4);
        const uint64_t streamed = resident->plan.streamed_bytes;
        auto probe = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lfu"), spec, &pool, 0);
        ASSERT_TRUE(probe.ok());
        const uint64_t minimum = probe->plan.minimum();
        for (uint64_t budget : {minimum, minimum + streamed / 3}) {
          SCOPED_TRACE("budget " + std::to_string(budget));
          auto got = RunPack(f.pack, Memory(f.pack), Config(budget, "lfu"), spec, &pool, steps);
          ASSERT_TRUE(got.ok()) << got.status().ToString();
          EXPECT_TRUE(Same(got->trace, resident->trace));
          EXPECT_GT(got->stats.storage_bytes, 0u);
          EXPECT_EQ(got->trace.traffic.mlp_used, resident->trace.traffic.mlp_used);
          if (std::string(spec).empty()) continue;
          // Sparse: records read per use, no whole expert cached (W_down copies may be).
          EXPECT_GT(got->stats.records_read, 0u);
          EXPECT_EQ(got->stats.expert_hits, 0u);
          EXPECT_EQ(got->stats.down_uses, got->stats.expert_uses);
          EXPECT_LT(got->trace.traffic.mlp_used, got->trace.traffic.mlp_dense);
        }
      }
    }
  }
}

// The experts' W_down copies (a sparsity policy reads W_down whole at every use): at the minimum
// budget none is cached and every use reads W_down with its channels; with more memory some
// are, and a use that finds its copy reads only the kept channels, so fewer bytes. The logits
// equal the resident pack's at every budget, the cache stays within its budget and the plan
// says what a copy is charged.
// Experts at places rounded up to 2 MiB (StreamingOptions::huge_expert_places_from; here every
// expert): the channel records are still read from the expert's place in the file, and whole
// experts from their places in memory.
TEST(StreamingExpertColumnsTest, ExpertsAtHugePagePlacesEqualTheResidentRun) {
  ThreadPool pool(2);
  const Files f = MakeFiles("mixtral", DType::kQ4_0);
  for (const char* spec : {"", "dip:0.5,down=1"}) {
    SCOPED_TRACE(spec);
    auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lfu"), spec, &pool, 5);
    ASSERT_TRUE(resident.ok()) << resident.status().ToString();
    StreamingConfig c = Config(UINT64_MAX, "lfu");
    c.stream.huge_expert_places_from = 4096;
    auto probe = RunPack(f.pack, Memory(f.pack), c, spec, &pool, 0);
    ASSERT_TRUE(probe.ok()) << probe.status().ToString();
    c.memory_budget = probe->plan.minimum() + resident->plan.streamed_bytes / 3;
    auto got = RunPack(f.pack, Memory(f.pack), c, spec, &pool, 5);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(Same(got->trace, resident->trace));
    EXPECT_GT(got->stats.storage_bytes, 0u);
  }
}

TEST(StreamingExpertColumnsTest, WDownCopiesAreCachedWithinTheBudgetAndChangeNoLogit) {
  ThreadPool pool(2);
  const int steps = 12;
  const char* spec = "dip:0.5,down=1";
  for (const char* arch : {"mixtral", "qwen3moe"}) {
    for (DType type : {DType::kF32, DType::kQ4_0}) {
      SCOPED_TRACE(std::string(arch) + " " + DTypeName(type));
      const Files f = MakeFiles(arch, type);
      auto pack = format::PackFile::Open(f.pack);
      ASSERT_TRUE(pack.ok());
      const format::PackGroup& g = pack->groups()[0];
      auto resident =
          RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lfu"), spec, &pool, steps);
      ASSERT_TRUE(resident.ok()) << resident.status().ToString();
      auto probe = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lfu"), spec, &pool, 0);
      ASSERT_TRUE(probe.ok());
      const uint64_t minimum = probe->plan.minimum(), streamed = probe->plan.streamed_bytes;
      uint64_t bytes_uncached = 0;
      bool some_cached_some_not = false;
      for (uint64_t budget : {minimum, minimum + streamed / 8, minimum + streamed / 4,
                              minimum + streamed / 3, minimum + streamed / 2}) {
        SCOPED_TRACE("budget " + std::to_string(budget));
        auto got = RunPack(f.pack, Memory(f.pack), Config(budget, "lfu"), spec, &pool, steps);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        EXPECT_TRUE(Same(got->trace, resident->trace));
        const StreamStats& s = got->stats;
        EXPECT_GE(got->plan.down_copy_bytes, 4096u);  // a W_down copy, whole pages
        EXPECT_LE(got->plan.staging_bytes, got->plan.cache_bytes);
        ASSERT_GT(s.down_uses, 0u);
        EXPECT_EQ(s.down_uses, s.expert_uses);
        EXPECT_EQ(s.expert_hits, 0u);  // no whole expert is cached: its channels are read
        EXPECT_LE(s.down_hits, s.down_uses);
        // Each use read its kept channels (at most d_model records) and, without a copy, W_down.
        const uint64_t down_reads =
            (s.down_uses - s.down_hits) * static_cast<uint64_t>(g.down_records);
        EXPECT_GE(s.records_read, down_reads);
        EXPECT_LE(s.records_read, down_reads + s.down_uses * static_cast<uint64_t>(g.d_model));
        EXPECT_EQ(got->plan.down_copies_total, static_cast<uint64_t>(pack->config().n_layers) *
                                                   static_cast<uint64_t>(g.n_expert));
        EXPECT_LE(got->plan.down_copies_fit, got->plan.down_copies_total);
        if (budget == minimum) {
          EXPECT_EQ(got->plan.down_copies_fit, 0u);
          EXPECT_EQ(s.down_hits, 0u);  // no room: read as before
          bytes_uncached = s.storage_bytes;
          continue;
        }
        if (s.down_hits > 0) {
          EXPECT_LT(s.storage_bytes, bytes_uncached);
        }
        if (s.down_hits > 0 && s.down_hits < s.down_uses) some_cached_some_not = true;
      }
      EXPECT_TRUE(some_cached_some_not);
    }
  }
}

// With few kept channels a streamed expert reads fewer bytes than its whole record: the kept
// channels' pages and W_down, and the stats count what was read. (At d_model 64 a page holds 8 F32 channel records, so a tenth of
// the channels touch at most 7 of the 8 pages.)
TEST(StreamingExpertColumnsTest, ASparseExpertReadsItsKeptRecordsAndWDownOnly) {
  ThreadPool pool(2);
  const Files f = MakeFiles("mixtral", DType::kF32);
  auto pack = format::PackFile::Open(f.pack);
  ASSERT_TRUE(pack.ok());
  const format::PackGroup& g = pack->groups()[0];
  StreamingConfig c = Config(UINT64_MAX, "lfu");
  c.stream.stream_attention = false;
  auto probe = RunPack(f.pack, Memory(f.pack), c, "dip:0.1,down=1", &pool, 0);
  ASSERT_TRUE(probe.ok());
  c.memory_budget = probe->plan.minimum();
  auto sparse = RunPack(f.pack, Memory(f.pack), c, "dip:0.1,down=1", &pool, 6);
  ASSERT_TRUE(sparse.ok()) << sparse.status().ToString();
  const StreamStats& s = sparse->stats;
  ASSERT_GT(s.expert_uses, 0u);
  // A use is one token's read of one expert. Every use read W_down's records and at least one
  // channel's, at most the tenth DIP keeps.
  EXPECT_GE(s.records_read, s.expert_uses * static_cast<uint64_t>(g.down_records + 1));
  EXPECT_LE(s.records_read,
            s.expert_uses * static_cast<uint64_t>(g.down_records + g.d_model / 10 + 1));
  EXPECT_LT(s.storage_bytes, s.expert_uses * g.expert_stride);
  EXPECT_GE(s.storage_bytes, s.records_read * g.channel_bytes);
  // Those reads are the compact record reads, counted apart within the device reads.
  EXPECT_GE(s.record_bytes, s.records_read * g.channel_bytes);
  EXPECT_LE(s.record_bytes, s.storage_bytes);
  EXPECT_GT(s.record_reads, 0u);
  EXPECT_LE(s.record_reads, s.storage_reads);
}

TEST(StreamingExpertColumnsTest, ReadFailureIsAnErrorNotWrongTokens) {
  ThreadPool pool(2);
  const Files f = MakeFiles("mixtral", DType::kQ8_0);
  const char* spec = "dip:0.5";
  auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lfu"), spec, &pool, 5);
  ASSERT_TRUE(resident.ok()) << resident.status().ToString();
  bool failed = false;
  for (uint64_t after : {0, 5, 40, 200}) {
    SCOPED_TRACE(after);
    storage::FaultOptions fo;
    fo.fail_after_reads = after;
    auto dev = std::make_unique<storage::FaultInjectingDevice>(Memory(f.pack), fo);
    auto got = RunPack(f.pack, std::move(dev), Config(resident->plan.minimum(), "lfu"), spec,
                       &pool, 5);
    if (got.ok()) {
      EXPECT_TRUE(Same(got->trace, resident->trace));
    } else {
      failed = true;
      EXPECT_EQ(got.status().code(), Status::Code::kIoError) << got.status().ToString();
    }
  }
  EXPECT_TRUE(failed);
}

TEST(StreamingExpertColumnsTest, RefusesWhatCannotRunWithAReason) {
  ThreadPool pool(2);
  const Files f = MakeFiles("qwen3moe", DType::kF32);
  // Unit predictors need the whole gate or up product of an expert.
  for (const char* spec : {"up:0.5", "gate:0.5"}) {
    auto r = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lfu"), spec, &pool, 1);
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_EQ(r.status().code(), Status::Code::kUnsupported) << r.status().ToString();
    EXPECT_NE(r.status().message().find("channel records"), std::string::npos);
  }
  // A pack whose experts are whole records says which layout to write.
  auto plain = RunPack(f.plain, Memory(f.plain), Config(UINT64_MAX, "lfu"), "dip:0.5", &pool, 1);
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.status().message().find("experts-columns"), std::string::npos)
      << plain.status().ToString();
}

}  // namespace
}  // namespace weir::model
