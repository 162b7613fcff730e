// Sparse streaming: a column-layout pack (weir pack --layout columns) run through Session with a
// DIP / DIP-CA / GLU policy and its MLP streamed. Generated tokens and logits are bit for bit
// those of the same pack with everything resident, for every cache policy and budget from the
// minimum up; they equal the GGUF session's sparse path (the same gathered calls on the same
// transposed bytes); bytes read from storage fall with the density; DIP-CA with everything
// cached selects as DIP does, and under a small budget it hits the cache more often; policies
// that streaming cannot serve are refused; read failures are errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "format/model_file.h"
#include "format/synth_llama.h"
#include "format/weir_pack_reader.h"
#include "format/weir_pack_writer.h"
#include "model/sampler.h"
#include "model/session.h"
#include "model/streaming_model.h"
#include "sparsity/policy.h"
#include "storage/fault_injecting_device.h"
#include "storage/memory_device.h"
#include "storage/open_device.h"
#include "tensor/quantize.h"
#include "model/streaming_test_util.h"
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
  std::string gguf, pack, bundles;
};

Files MakeFiles(DType type, int group = 1, int n_layers = 3) {
  Files f;
  const std::string dir = testing::TempDir();
  const format::SynthSpec s = streaming_test::SmallLlama(n_layers);
  f.gguf = dir + "/m.gguf";
  EXPECT_TRUE(format::WriteRandomLlamaGguf(s, type, 9, f.gguf, nullptr).ok());
  auto m = format::LoadModel(f.gguf).value();
  format::PackOptions o;
  o.group_size = group;
  o.layout = format::PackLayout::kColumns;
  f.pack = dir + "/m.weir";
  EXPECT_TRUE(format::WritePack(m, f.pack, o).ok());
  o.layout = format::PackLayout::kBundles;
  f.bundles = dir + "/b.weir";
  EXPECT_TRUE(format::WritePack(m, f.bundles, o).ok());
  return f;
}

// The model of `gguf` as a column pack whose channels and neurons are stored in the order of
// random activation scores (weir pack --calib); "" on failure.
std::string WriteOrderedPack(const std::string& gguf, int group, unsigned seed) {
  auto m = format::LoadModel(gguf);
  if (!m.ok()) return "";
  format::PackOptions o;
  o.group_size = group;
  o.layout = format::PackLayout::kColumns;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  for (const format::LayerDims& l : m->config.layers) {
    std::vector<double> in(static_cast<size_t>(m->config.d_model));
    std::vector<double> down(static_cast<size_t>(l.d_ff));
    for (double& v : in) v = u(rng);
    for (double& v : down) v = u(rng);
    o.in_score.push_back(in);
    o.down_score.push_back(down);
  }
  const std::string path = testing::TempDir() + "/ordered.weir";
  return format::WritePack(*m, path, o).ok() ? path : "";
}

TEST(StreamingColumnsTest, SparseStreamedEqualsResidentAndTheGgufSparsePath) {
  ThreadPool pool(2);
  const int steps = 5;
  for (DType type : {DType::kF32, DType::kQ8_0, DType::kQ4_0}) {
    const Files f = MakeFiles(type);
    for (const char* spec : {"dip:0.5", "glu:0.4", "dip:0.3,up=0.6,down=0.2"}) {
      SCOPED_TRACE(std::string(DTypeName(type)) + " " + spec);
      auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), spec, &pool, steps);
      ASSERT_TRUE(resident.ok()) << resident.status().ToString();
      // The GGUF session computes the same gathered products on the same transposed bytes.
      auto gguf = RunGguf(f.gguf, spec, &pool, steps);
      ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
      if (std::string(spec).starts_with("dip")) {
        EXPECT_TRUE(Same(resident->trace, *gguf));
      } else {  // glu keeps every input column: the GGUF runs its dense kernel there
        double err = 0, ref = 0;
        for (size_t i = 0; i < gguf->logits.size(); ++i) {
          err = std::max<double>(err, std::fabs(gguf->logits[i] - resident->trace.logits[i]));
          ref = std::max<double>(ref, std::fabs(gguf->logits[i]));
        }
        EXPECT_LT(err / ref, type == DType::kF32 ? 1e-5 : 0.05);
      }
      EXPECT_EQ(resident->trace.traffic.mlp_used, gguf->traffic.mlp_used);
      const uint64_t model_bytes = resident->plan.streamed_bytes + resident->plan.static_bytes;
      for (const char* policy : {"lru", "lfu", "atu", "window", "mru"}) {
        // The minimum depends on the policy's own bookkeeping.
        auto probe = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, policy), spec, &pool, 0);
        ASSERT_TRUE(probe.ok()) << probe.status().ToString();
        const uint64_t minimum = probe->plan.minimum();
        for (uint64_t budget : {minimum, minimum + model_bytes / 8, minimum + model_bytes / 2}) {
          SCOPED_TRACE(std::string(policy) + " budget " + std::to_string(budget));
          auto got = RunPack(f.pack, Memory(f.pack), Config(budget, policy), spec, &pool, steps);
          ASSERT_TRUE(got.ok()) << got.status().ToString();
          EXPECT_TRUE(Same(got->trace, resident->trace));
        }
      }
    }
  }
}

// Span mode (dip span=N on a pack grouped by N layers): the group's first layer pins the kept
// channels' records for all its layers (and W_down whole when down=1), the next group's records
// are read ahead by prediction. The logits equal the resident run's and the GGUF session's with
// the same policy, bit for bit, at every budget and policy.
TEST(StreamingColumnsTest, SpanSelectionOverGroupedRecordsEqualsResidentAndTheGguf) {
  ThreadPool pool(2);
  const int steps = 5;
  for (DType type : {DType::kF32, DType::kQ8_0}) {
    const Files f = MakeFiles(type, /*group=*/2);
    for (const char* spec : {"dip:0.6,down=1,span=2", "dip:0.5,span=2", "dip-ca:0.6,down=1,span=2"}) {
      SCOPED_TRACE(std::string(DTypeName(type)) + " " + spec);
      auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), spec, &pool, steps);
      ASSERT_TRUE(resident.ok()) << resident.status().ToString();
      auto gguf = RunGguf(f.gguf, spec, &pool, steps);
      ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
      if (std::string(spec).find("down=1") == std::string::npos) {
        EXPECT_TRUE(Same(resident->trace, *gguf));
      } else {  // W_down whole: the GGUF session runs its dense kernel there (another sum order)
        double err = 0, ref = 0;
        for (size_t i = 0; i < gguf->logits.size(); ++i) {
          err = std::max<double>(err, std::fabs(gguf->logits[i] - resident->trace.logits[i]));
          ref = std::max<double>(ref, std::fabs(gguf->logits[i]));
        }
        EXPECT_LT(err / ref, type == DType::kF32 ? 1e-5 : 0.05);
      }
      const uint64_t model_bytes = resident->plan.streamed_bytes + resident->plan.static_bytes;
      for (const char* policy : {"lru", "mru", "lfu"}) {
        auto probe = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, policy), spec, &pool, 0);
        ASSERT_TRUE(probe.ok()) << probe.status().ToString();
        const uint64_t minimum = probe->plan.minimum();
        for (uint64_t budget : {minimum, minimum + model_bytes / 8, minimum + model_bytes / 2}) {
          SCOPED_TRACE(std::string(policy) + " budget " + std::to_string(budget));
          auto got = RunPack(f.pack, Memory(f.pack), Config(budget, policy), spec, &pool, steps);
          ASSERT_TRUE(got.ok()) << got.status().ToString();
          if (std::string(spec).starts_with("dip-ca") && budget != minimum) continue;
          EXPECT_TRUE(Same(got->trace, resident->trace));
        }
      }
    }
  }
}

// Span mode reads the kept records into one compact buffer (StreamingOptions::compact_span, on by
// default) instead of pinning their blocks through the cache. Both ways give the resident run's
// logits bit for bit, on a pack in natural and in activation order, through a real O_DIRECT
// device, at the minimum budget and above; the compact way does read records, the other none.
TEST(StreamingColumnsTest, SpanRecordsReadCompactlyEqualTheCachedWay) {
  ThreadPool pool(2);
  const int steps = 4;
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    // Four layers: two groups of two, so that each group reads the other's records ahead.
    const Files f = MakeFiles(type, /*group=*/2, /*n_layers=*/4);
    // The same model with its channels stored in a random activation order.
    const std::string ordered = WriteOrderedPack(f.gguf, /*group=*/2, /*seed=*/11);
    ASSERT_FALSE(ordered.empty());
    for (const std::string& pack : {f.pack, ordered}) {
      for (const char* spec : {"dip:0.5,span=2", "dip:0.6,down=1,span=2"}) {
        SCOPED_TRACE(std::string(DTypeName(type)) + " " + spec + " " + pack);
        auto resident = RunPack(pack, Memory(pack), Config(UINT64_MAX, "lru"), spec, &pool, steps);
        ASSERT_TRUE(resident.ok()) << resident.status().ToString();
        auto probe = RunPack(pack, Memory(pack), Config(UINT64_MAX, "mru"), spec, &pool, 0);
        ASSERT_TRUE(probe.ok()) << probe.status().ToString();
        const uint64_t model_bytes = resident->plan.streamed_bytes + resident->plan.static_bytes;
        for (uint64_t budget : {probe->plan.minimum(), probe->plan.minimum() + model_bytes / 4,
                                probe->plan.minimum() + model_bytes / 2}) {
          for (const char* way : {"compact", "compact both", "compact token", "compact layer",
                                  "compact off", "cached"}) {
            SCOPED_TRACE("budget " + std::to_string(budget) + " " + way);
            const bool compact = std::string(way) != "cached";
            StreamingConfig c = Config(budget, "mru");
            c.stream.compact_span = compact;
            // The next group's records read ahead by each guess, or not at all.
            const std::string ahead = std::string(way).substr(std::min<size_t>(8, strlen(way)));
            if (!ahead.empty()) c.stream.span_read_ahead = *ParseSpanAhead(ahead);
            storage::DeviceOptions d;
            d.kind = "direct";
            auto dev = storage::OpenDevice(pack, d);
            if (!dev.ok()) dev = storage::OpenDevice(pack, storage::DeviceOptions{});
            ASSERT_TRUE(dev.ok()) << dev.status().ToString();
            auto got = RunPack(pack, std::move(*dev), c, spec, &pool, steps);
            ASSERT_TRUE(got.ok()) << got.status().ToString();
            EXPECT_TRUE(Same(got->trace, resident->trace));
            const StreamStats& st = got->stats;
            if (compact) {
              EXPECT_GT(st.records_read, 0u);
              // The record reads are a part of the device reads, counted apart.
              EXPECT_GT(st.record_reads, 0u);
              EXPECT_LE(st.record_reads, st.storage_reads);
              EXPECT_LE(st.record_bytes, st.storage_bytes);
              EXPECT_LE(st.record_io_seconds, st.io_seconds);
            } else {
              EXPECT_EQ(st.records_read, 0u);
              EXPECT_EQ(st.record_bytes, 0u);
              EXPECT_EQ(st.record_reads, 0u);
            }
            // The read-ahead buffer is given when the cache keeps as much again: never at the
            // minimum, always with half the model above it (these packs' buffers are a tenth).
            const bool ahead_given = got->plan.record_ahead_bytes > 0;
            if (budget == probe->plan.minimum()) {
              EXPECT_FALSE(ahead_given);
            }
            if (budget == probe->plan.minimum() + model_bytes / 2 && compact) {
              EXPECT_EQ(ahead_given, c.stream.span_read_ahead != SpanAhead::kOff);
            }
            if (ahead_given) {
              EXPECT_GT(got->stats.records_ahead, 0u);
              EXPECT_GT(got->stats.records_ahead_used, 0u);
            } else {
              EXPECT_EQ(got->stats.records_ahead, 0u);
            }
          }
        }
      }
    }
  }
}

// Span mode's reserve loan (StreamPlan::span_lendable_bytes): the transient reserve beyond the
// record buffer is lent to the cache when no read can be transient -- the cache can pin what is
// pinned at once, and every selection's records fit their buffer. Lent or not, the logits are the
// resident run's; when lent, nothing was read outside the cache and the plan still sums to the
// budget.
TEST(StreamingColumnsTest, SpanModeLendsTheReserveOnlyWhenNoReadCanBeTransient) {
  ThreadPool pool(2);
  const int steps = 4;
  const Files f = MakeFiles(DType::kQ4_0, /*group=*/2, /*n_layers=*/4);
  for (const char* spec : {"dip:0.5,span=2", "dip:0.6,down=1,span=2", ""}) {
    SCOPED_TRACE(std::string("spec '") + spec + "'");
    auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), spec, &pool, steps);
    ASSERT_TRUE(resident.ok()) << resident.status().ToString();
    StreamingConfig base = Config(UINT64_MAX, "mru");
    base.stream.partitions = "shared";
    auto probe = RunPack(f.pack, Memory(f.pack), base, spec, &pool, 0);
    ASSERT_TRUE(probe.ok()) << probe.status().ToString();
    const uint64_t model_bytes = resident->plan.streamed_bytes + resident->plan.static_bytes;
    for (uint64_t budget : {probe->plan.minimum(), probe->plan.minimum() + model_bytes / 8,
                            probe->plan.minimum() + model_bytes / 2}) {
      for (const char* way : {"default", "read-ahead", "uniform", "cached"}) {
        SCOPED_TRACE("budget " + std::to_string(budget) + " " + way);
        StreamingConfig c = base;
        c.memory_budget = budget;
        const std::string w = way;
        if (w == "read-ahead") c.stream.span_read_ahead = SpanAhead::kBoth;
        if (w == "uniform") c.stream.partitions = "uniform";
        if (w == "cached") c.stream.compact_span = false;
        auto got = RunPack(f.pack, Memory(f.pack), c, spec, &pool, steps);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        EXPECT_TRUE(Same(got->trace, resident->trace));
        const MemoryPlan& p = got->plan;
        EXPECT_EQ(p.minimum() + p.record_ahead_bytes + p.cache_bytes - p.reserve_lent_bytes,
                  budget);
        if (w != "default") {
          EXPECT_EQ(p.reserve_lent_bytes, 0u);  // a read may be transient there
          continue;
        }
        // Half the model above the minimum: the cache can pin everything, so the loan is made.
        if (budget > probe->plan.minimum() + model_bytes / 4) EXPECT_GT(p.reserve_lent_bytes, 0u);
        if (p.reserve_lent_bytes > 0) EXPECT_EQ(got->stats.transient_bytes, 0u);
      }
    }
  }
}

// A pack whose channels and neurons are stored in an activation order (weir pack --calib) gives
// the same logits bit for bit: the products still sum the kept columns in channel order, only
// where each column lies in the file changes (and so which columns share a block).
TEST(StreamingColumnsTest, OrderedColumnPackGivesTheSameLogits) {
  ThreadPool pool(2);
  const int steps = 4;
  for (int group : {1, 2}) {
    SCOPED_TRACE("group " + std::to_string(group));
    const Files f = MakeFiles(DType::kQ8_0, group);
    const std::string ordered = WriteOrderedPack(f.gguf, group, /*seed=*/5);
    ASSERT_FALSE(ordered.empty());
    auto pack = format::PackFile::Open(ordered);
    ASSERT_TRUE(pack.ok()) << pack.status().ToString();
    ASSERT_FALSE(pack->groups()[0].in_order.empty());
    ASSERT_FALSE(pack->groups()[0].down_order.empty());
    EXPECT_NE(pack->groups()[0].in_order[0], 0);  // random scores: not the natural order
    for (const char* spec : {"dip:0.5", "dip-ca:0.5", ""}) {
      SCOPED_TRACE(spec);
      auto plain = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), spec, &pool, steps);
      ASSERT_TRUE(plain.ok()) << plain.status().ToString();
      auto resident = RunPack(ordered, Memory(ordered), Config(UINT64_MAX, "lru"), spec, &pool, steps);
      ASSERT_TRUE(resident.ok()) << resident.status().ToString();
      EXPECT_TRUE(Same(resident->trace, plain->trace));
      auto probe = RunPack(ordered, Memory(ordered), Config(UINT64_MAX, "lfu"), spec, &pool, 0);
      ASSERT_TRUE(probe.ok());
      const uint64_t model_bytes = resident->plan.streamed_bytes + resident->plan.static_bytes;
      for (uint64_t budget : {probe->plan.minimum(), probe->plan.minimum() + model_bytes / 4}) {
        auto got = RunPack(ordered, Memory(ordered), Config(budget, "lfu"), spec, &pool, steps);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        if (std::string(spec) != "dip-ca:0.5") {  // DIP-CA's mask follows the cache by design
          EXPECT_TRUE(Same(got->trace, plain->trace)) << "budget " << budget;
        }
      }
    }
  }
}

TEST(StreamingColumnsTest, DenseColumnPackEqualsResidentAndIsCloseToTheSource) {
  ThreadPool pool(2);
  const Files f = MakeFiles(DType::kF32, 2);
  auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lfu"), "", &pool, 5);
  ASSERT_TRUE(resident.ok()) << resident.status().ToString();
  const uint64_t minimum = resident->plan.minimum();
  for (uint64_t budget : {minimum, minimum + resident->plan.streamed_bytes / 3}) {
    auto got = RunPack(f.pack, Memory(f.pack), Config(budget, "lfu"), "", &pool, 5);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(Same(got->trace, resident->trace));
  }
  auto gguf = RunGguf(f.gguf, "", &pool, 5);
  ASSERT_TRUE(gguf.ok());
  EXPECT_EQ(gguf->tokens, resident->trace.tokens);
  double err = 0, ref = 0;
  for (size_t i = 0; i < gguf->logits.size(); ++i) {
    err = std::max<double>(err, std::fabs(gguf->logits[i] - resident->trace.logits[i]));
    ref = std::max<double>(ref, std::fabs(gguf->logits[i]));
  }
  EXPECT_LT(err / ref, 1e-5);  // F32: only the order of the sums differs
}

TEST(StreamingColumnsTest, BytesReadFollowTheDensity) {
  ThreadPool pool(2);
  const Files f = MakeFiles(DType::kF32);
  auto probe = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), "", &pool, 1);
  ASSERT_TRUE(probe.ok());
  const uint64_t budget = probe->plan.minimum();  // next to nothing cached: reads follow masks
  uint64_t previous = UINT64_MAX;
  for (const char* spec : {"", "dip:0.7", "dip:0.5", "dip:0.25"}) {
    SCOPED_TRACE(spec);
    auto got = RunPack(f.pack, Memory(f.pack), Config(budget, "lru"), spec, &pool, 6);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_LT(got->stats.storage_bytes, previous);
    previous = got->stats.storage_bytes;
    const double density = got->trace.traffic.mlp_density();
    if (*spec == '\0') {
      EXPECT_EQ(density, 1.0);
    }
  }
}

TEST(StreamingColumnsTest, DipCaReadsTheCacheState) {
  ThreadPool pool(2);
  const Files f = MakeFiles(DType::kF32);
  // Everything cached: DIP-CA's scores are DIP's.
  auto dip = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), "dip:0.5", &pool, 6);
  auto ca = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), "dip-ca:0.5", &pool, 6);
  ASSERT_TRUE(dip.ok() && ca.ok());
  EXPECT_TRUE(Same(dip->trace, ca->trace));
  // A cache of about half the streamed bytes: DIP-CA prefers what is resident, so it hits more
  // often and reads less, at the same number of columns.
  auto probe = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lfu"), "dip:0.5", &pool, 0);
  ASSERT_TRUE(probe.ok());
  const uint64_t budget = probe->plan.minimum() + probe->plan.streamed_bytes / 2;
  // No read-ahead: every block is read on demand, so the counters compared below do not depend
  // on how fast the I/O thread ran (this failed once under ctest -j2 with read-ahead on).
  StreamingConfig small = Config(budget, "lfu");
  small.stream.prefetch_layers = -1;
  auto dip_small = RunPack(f.pack, Memory(f.pack), small, "dip:0.5", &pool, 12);
  auto ca_small = RunPack(f.pack, Memory(f.pack), small, "dip-ca:0.5,gamma=0.2", &pool, 12);
  ASSERT_TRUE(dip_small.ok() && ca_small.ok());
  EXPECT_GT(ca_small->stats.hit_rate(), dip_small->stats.hit_rate());
  EXPECT_LT(ca_small->stats.storage_bytes, dip_small->stats.storage_bytes);
  EXPECT_EQ(ca_small->trace.traffic.mlp_used, dip_small->trace.traffic.mlp_used);
  for (float v : ca_small->trace.logits) ASSERT_TRUE(std::isfinite(v));
}

// DIP-CA's mask reads the cache, which the I/O thread fills while the compute runs: with
// read-ahead on, the mask must still come out the same on every run (it sees the groups'
// partitions, not staging). Found by the soak (docs/reliability.md): 4 of 10 repeat runs differed.
TEST(StreamingColumnsTest, DipCaWithReadAheadIsReproducible) {
  ThreadPool pool(2);
  const Files f = MakeFiles(DType::kF32);
  auto probe = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "mru"), "", &pool, 0);
  ASSERT_TRUE(probe.ok());
  for (const char* policy : {"mru", "lfu"}) {
    SCOPED_TRACE(policy);
    StreamingConfig c =
        Config(probe->plan.minimum() + probe->plan.streamed_bytes / 2, policy);
    c.stream.prefetch_layers = 1;
    auto first = RunPack(f.pack, Memory(f.pack), c, "dip-ca:0.5,gamma=0.2", &pool, 10);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    for (int run = 0; run < 4; ++run) {
      auto again = RunPack(f.pack, Memory(f.pack), c, "dip-ca:0.5,gamma=0.2", &pool, 10);
      ASSERT_TRUE(again.ok());
      EXPECT_TRUE(Same(first->trace, again->trace)) << "run " << run;
    }
  }
}

TEST(StreamingColumnsTest, RefusesWhatStreamingCannotServe) {
  ThreadPool pool(2);
  const Files f = MakeFiles(DType::kQ8_0);
  auto attention = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), "topk-all:0.5",
                           &pool, 1);
  ASSERT_FALSE(attention.ok());
  EXPECT_EQ(attention.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(attention.status().message().find("MLP columns only"), std::string::npos)
      << attention.status().ToString();
  auto gate = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), "gate:0.5", &pool, 1);
  ASSERT_FALSE(gate.ok());
  auto bundles =
      RunPack(f.bundles, Memory(f.bundles), Config(UINT64_MAX, "lru"), "dip:0.5", &pool, 1);
  ASSERT_FALSE(bundles.ok());
  EXPECT_NE(bundles.status().message().find("--layout columns"), std::string::npos)
      << bundles.status().ToString();
}

TEST(StreamingColumnsTest, ReadFailureIsAnErrorNotWrongTokens) {
  ThreadPool pool(2);
  // Per layer (group 1), and span mode's compact record reads (group 2).
  for (const auto& [group, spec] : {std::pair<int, const char*>{1, "dip:0.5"},
                                    std::pair<int, const char*>{2, "dip:0.5,span=2"}}) {
    SCOPED_TRACE(spec);
    const Files f = MakeFiles(DType::kQ4_0, group);
    auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), spec, &pool, 6);
    ASSERT_TRUE(resident.ok());
    bool failed = false;
    uint64_t records = 0;
    for (uint64_t after : {0, 5, 40, 200, 600}) {
      SCOPED_TRACE(after);
      storage::FaultOptions fo;
      fo.fail_after_reads = after;
      auto dev = std::make_unique<storage::FaultInjectingDevice>(Memory(f.pack), fo);
      auto got = RunPack(f.pack, std::move(dev), Config(resident->plan.minimum() + 30000, "lru"),
                         spec, &pool, 6);
      if (got.ok()) {
        EXPECT_TRUE(Same(got->trace, resident->trace));
        records += got->stats.records_read;
      } else {
        failed = true;
        EXPECT_EQ(got.status().code(), Status::Code::kIoError) << got.status().ToString();
      }
    }
    EXPECT_TRUE(failed);
    if (group == 2) {
      EXPECT_GT(records, 0u);  // the compact reads ran before the faults began
    }
  }
}

// Zeroes about `zero` of every MLP weight of the synthetic model (unstructured pruning stands
// in) and writes it as a column pack and as a sparse column pack.
struct PrunedFiles {
  std::string columns, sparse;
};
struct Buffers : format::Backing {
  std::vector<std::vector<uint8_t>> data;
};

PrunedFiles MakePruned(DType type, double zero) {
  const Files f = MakeFiles(type);
  auto m = format::LoadModel(f.gguf).value();
  auto keep = std::make_shared<Buffers>();
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int l = 0; l < m.config.n_layers; ++l) {
    for (const char* t : {"ffn_gate", "ffn_up", "ffn_down"}) {
      const std::string name = StrFormat("blk.%d.%s.weight", l, t);
      const TensorView w = *m.Find(name);
      std::vector<uint8_t> bytes(static_cast<size_t>(w.nbytes()));
      std::vector<float> row(static_cast<size_t>(w.cols()));
      for (int64_t r = 0; r < w.rows(); ++r) {
        DequantizeRow(w, r, row.data());
        for (float& v : row) v = u(rng) < zero ? 0.0f : v;
        QuantizeRow(w.dtype, row.data(), bytes.data() + r * w.row_bytes(), w.cols());
      }
      m.tensors[name] = TensorView{w.dtype, w.shape, bytes.data()};
      keep->data.push_back(std::move(bytes));
    }
  }
  m.backing.push_back(keep);
  PrunedFiles p;
  const std::string dir = testing::TempDir();
  format::PackOptions o;
  o.layout = format::PackLayout::kColumns;
  p.columns = dir + "/c.weir";
  EXPECT_TRUE(format::WritePack(m, p.columns, o).ok());
  o.layout = format::PackLayout::kSparseColumns;
  p.sparse = dir + "/s.weir";
  Status st = format::WritePack(m, p.sparse, o);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return p;
}

double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max<double>(err, std::fabs(a[i] - b[i]));
    ref = std::max<double>(ref, std::fabs(b[i]));
  }
  return err / ref;
}

TEST(StreamingColumnsTest, SparseStorageOfAPrunedModelStreamsLessForTheSameLogits) {
  ThreadPool pool(2);
  for (DType type : {DType::kF32, DType::kQ8_0}) {
    const PrunedFiles p = MakePruned(type, 0.6);
    // Smaller file: 40% of the values plus one bit each.
    EXPECT_LT(testing::ReadFile(p.sparse).size(), testing::ReadFile(p.columns).size());
    for (const char* spec : {"", "dip:0.5"}) {
      SCOPED_TRACE(std::string(DTypeName(type)) + " " + spec);
      auto dense_res = RunPack(p.columns, Memory(p.columns), Config(UINT64_MAX, "lru"), spec, &pool, 5);
      auto sparse_res = RunPack(p.sparse, Memory(p.sparse), Config(UINT64_MAX, "lru"), spec, &pool, 5);
      ASSERT_TRUE(dense_res.ok()) << dense_res.status().ToString();
      ASSERT_TRUE(sparse_res.ok()) << sparse_res.status().ToString();
      // F32 values are stored as they are (only the order of the sums differs); Q8_0's packed
      // non-zero values get their own block scales.
      EXPECT_LT(MaxRelDiff(sparse_res->trace.logits, dense_res->trace.logits),
                type == DType::kF32 ? 1e-5 : 0.03);
      if (type == DType::kF32) {
        EXPECT_EQ(sparse_res->trace.tokens, dense_res->trace.tokens);
      }
      // Under the smallest budget: bit-identical to resident, and fewer bytes read.
      auto probe = RunPack(p.sparse, Memory(p.sparse), Config(UINT64_MAX, "lru"), spec, &pool, 0);
      auto dprobe = RunPack(p.columns, Memory(p.columns), Config(UINT64_MAX, "lru"), spec, &pool, 0);
      ASSERT_TRUE(probe.ok() && dprobe.ok());
      auto small = RunPack(p.sparse, Memory(p.sparse), Config(probe->plan.minimum(), "lru"), spec,
                           &pool, 5);
      auto dsmall = RunPack(p.columns, Memory(p.columns), Config(dprobe->plan.minimum(), "lru"),
                            spec, &pool, 5);
      ASSERT_TRUE(small.ok()) << small.status().ToString();
      ASSERT_TRUE(dsmall.ok()) << dsmall.status().ToString();
      EXPECT_TRUE(Same(small->trace, sparse_res->trace));
      // Attention is read dense and tiny extents round to whole pages: the MLP bytes fall by
      // more than the bytes read.
      EXPECT_LT(small->stats.storage_bytes, dsmall->stats.storage_bytes * 0.9);
      EXPECT_LT(small->trace.traffic.mlp_used, dsmall->trace.traffic.mlp_used * 0.8);
    }
  }
}

TEST(StreamingColumnsTest, DamagedSparseRecordIsAnError) {
  ThreadPool pool(2);
  const PrunedFiles p = MakePruned(DType::kF32, 0.5);
  auto pack = format::PackFile::Open(p.sparse);
  ASSERT_TRUE(pack.ok()) << pack.status().ToString();
  // Set every bit of the first bitmap word of the first ffn_in record: its size no longer fits.
  std::string bytes = testing::ReadFile(p.sparse);
  const format::PackGroup& g = pack->groups()[0];
  uint64_t first;
  std::memcpy(&first, bytes.data() + g.in_offset, 8);
  std::memset(bytes.data() + g.in_offset + first, 0xff, 8);
  auto dev = std::make_unique<storage::MemoryDevice>("pack", bytes);
  auto got = RunPack(p.sparse, std::move(dev), Config(UINT64_MAX, "lru"), "", &pool, 2);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Status::Code::kCorrupt) << got.status().ToString();
}

}  // namespace
}  // namespace weir::model
