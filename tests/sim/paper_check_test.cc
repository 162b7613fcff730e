// The simulator against the dense rows of DIP's Table 2 (and the dense rows of its appendix D
// tables 5 and 6), with one set of assumptions for every row (docs/simulator.md):
//   4-bit weights everywhere except F32 norms, F16 KV cache at 1024 tokens (the average length
//   of DIP's 2048-token WikiText sequences), GB = 1e9 bytes, all static tensors (attention,
//   token embeddings, output head, norms, KV) in DRAM, the MLP streamed, LFU cache, flash and
//   DRAM time added (no overlap), no compute time, steady state (the cold first token is not
//   counted).
#include <gtest/gtest.h>

#include <cstdio>

#include "sim/device_profile.h"
#include "sim/simulator.h"
#include "sim/synthetic_masks.h"
#include "testing/testing.h"

namespace weir::sim {
namespace {

struct Row {
  const char* model;
  double dram_gb;
  double flash_gbps;
  double paper_tok_s;
};

double SimulateDense(const Row& row) {
  auto profile = LoadDeviceProfile(testing::SourceDir() + "/profiles/a18.json");
  EXPECT_TRUE(profile.ok()) << profile.status().ToString();
  DeviceProfile dev = *profile;
  dev.storage_read.ScaleToPeak(row.flash_gbps * kGB);
  auto shape = ModelPreset(row.model);
  EXPECT_TRUE(shape.ok());
  auto layout = MakeMaskLayout(*shape, StreamSet::kMlp);
  EXPECT_TRUE(layout.ok());
  auto source = MakeSyntheticSource(*layout, SyntheticSpec{}, 4);
  EXPECT_TRUE(source.ok());
  SimConfig cfg;
  cfg.memory_bytes = row.dram_gb * kGB;
  cfg.bits = WeightBits::Uniform(4);
  cfg.kv_bits = 16;
  cfg.kv_len = 1024;
  cfg.policy = CachePolicy::kLfu;
  cfg.warmup_tokens = 1;
  auto r = Simulate(*shape, dev, cfg, source->get());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return 0;
  // Dense masks: the hit rate is the cached fraction of the MLP.
  EXPECT_NEAR(r->hit_rate, r->plan.cache_bytes / r->plan.streamed_bytes, 2e-3);
  return r->tokens_per_second;
}

TEST(PaperCheckTest, DenseRowsOfDipTable2WithinTenPercent) {
  const Row rows[] = {
      {"phi-3-medium", 4.0, 1.0, 0.29},
      {"phi-3-mini", 1.5, 1.0, 1.15},
      {"llama-3-8b", 2.5, 1.0, 0.57},
      {"mistral-7b", 2.0, 1.0, 0.54},
  };
  for (const Row& row : rows) {
    double tok_s = SimulateDense(row);
    std::printf("%-14s DRAM %.1f GB flash %.1f GB/s: simulated %.3f tok/s, paper %.2f (%+.1f%%)\n",
                row.model, row.dram_gb, row.flash_gbps, tok_s, row.paper_tok_s,
                100 * (tok_s / row.paper_tok_s - 1));
    EXPECT_NEAR(tok_s / row.paper_tok_s, 1.0, 0.10)
        << row.model << " with " << row.dram_gb << " GB: simulated " << tok_s << " tok/s, paper "
        << row.paper_tok_s;
  }
}

TEST(PaperCheckTest, DenseRowsOfDipAppendixDWithinTenPercent) {
  const Row rows[] = {
      // Table 5: Phi-3-Medium at 2 and 6 GB DRAM, 1 GB/s flash.
      {"phi-3-medium", 2.0, 1.0, 0.19},
      {"phi-3-medium", 6.0, 1.0, 0.71},
      // Table 6: Phi-3-Medium at 4 GB DRAM, 0.5 and 2 GB/s flash.
      {"phi-3-medium", 4.0, 0.5, 0.15},
      {"phi-3-medium", 4.0, 2.0, 0.59},
  };
  for (const Row& row : rows) {
    double tok_s = SimulateDense(row);
    std::printf("%-14s DRAM %.1f GB flash %.1f GB/s: simulated %.3f tok/s, paper %.2f (%+.1f%%)\n",
                row.model, row.dram_gb, row.flash_gbps, tok_s, row.paper_tok_s,
                100 * (tok_s / row.paper_tok_s - 1));
    EXPECT_NEAR(tok_s / row.paper_tok_s, 1.0, 0.10)
        << row.model << " with " << row.dram_gb << " GB, " << row.flash_gbps
        << " GB/s flash: simulated " << tok_s << " tok/s, paper " << row.paper_tok_s;
  }
}

}  // namespace
}  // namespace weir::sim
