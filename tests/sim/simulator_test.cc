// The simulator's memory plan, byte accounting, time model, policies and tiers, on small shapes
// where every number can be worked out by hand.
#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "sim/synthetic_masks.h"
#include "sim/sim_test_util.h"
#include "testing/testing.h"

namespace weir::sim {
namespace {

// 2 layers, d_model 64, 4 heads of 16 (2 kv heads), d_ff 128, vocab 100.
ModelShape Tiny() { return UniformShape("tiny", 64, 2, 4, 2, 16, 128, 100); }

DeviceProfile FlatDevice(double mem_gbps, double flash_gbps) {
  DeviceProfile d;
  d.name = "flat";
  d.memory_bandwidth = mem_gbps * kGB;
  d.storage_read = BandwidthCurve::Flat(flash_gbps * kGB);
  return d;
}


SimConfig BaseConfig(double memory_bytes) {
  SimConfig c;
  c.memory_bytes = memory_bytes;
  c.bits = WeightBits::Uniform(8);  // 1 byte per weight keeps the arithmetic obvious
  c.kv_bits = 16;
  c.kv_len = 10;
  return c;
}

TEST(SimulatorTest, MemoryPlanCountsStaticTensors) {
  ModelShape s = Tiny();
  auto layout = MakeMaskLayout(s, StreamSet::kMlp);
  ASSERT_TRUE(layout.ok());
  SimConfig c = BaseConfig(1e6);
  auto p = PlanMemory(s, *layout, FlatDevice(10, 1), c);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  // Attention per layer: q 64x64 + k,v 32x64 each + o 64x64 = 12288 weights, 1 byte each.
  EXPECT_DOUBLE_EQ(p->attention_bytes, 2 * 12288);
  EXPECT_DOUBLE_EQ(p->embedding_bytes, 6400);
  EXPECT_DOUBLE_EQ(p->output_bytes, 6400);
  EXPECT_DOUBLE_EQ(p->norm_bytes, (2 * 2 * 64 + 64) * 4.0);  // F32 norms
  EXPECT_DOUBLE_EQ(p->kv_bytes, 2 * 2.0 * 32 * 2 * 10);      // layers * K,V * kv_dim * 2 B * len
  EXPECT_DOUBLE_EQ(p->streamed_bytes, 2 * 3 * 128 * 64);
  EXPECT_DOUBLE_EQ(p->cache_bytes, p->streamed_bytes);  // 1 MB holds everything
  ASSERT_EQ(p->cache_units.size(), 2u);
  EXPECT_EQ(p->cache_units[0], 128u);
  EXPECT_DOUBLE_EQ(p->unit_bytes[0], 3 * 64);

  // A budget below the static tensors is refused, with the minimum in the message.
  c.memory_bytes = 20000;
  auto small = PlanMemory(s, *layout, FlatDevice(10, 1), c);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("static tensors"), std::string::npos);
  EXPECT_NE(small.status().message().find(StrFormat("(%.0f bytes) of static", p->static_bytes)),
            std::string::npos)
      << small.status().ToString();

  // Half the MLP fits: 64 of 128 units per layer.
  c.memory_bytes = p->static_bytes + p->streamed_bytes / 2;
  auto half = PlanMemory(s, *layout, FlatDevice(10, 1), c);
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->cache_units[0], 64u);
  EXPECT_EQ(half->cache_units[1], 64u);
}

TEST(SimulatorTest, DenseBytesAndTimeByHand) {
  ModelShape s = Tiny();
  auto layout = MakeMaskLayout(s, StreamSet::kMlp);
  ASSERT_TRUE(layout.ok());
  DeviceProfile dev = FlatDevice(1e-3, 1e-4);  // 1 MB/s memory, 100 kB/s flash
  SimConfig c = BaseConfig(0);
  auto full = PlanMemory(s, *layout, dev, BaseConfig(1e9));
  ASSERT_TRUE(full.ok());
  c.memory_bytes = full->static_bytes + 3 * 64 * 40 * 2;  // 40 units per layer
  c.warmup_tokens = 1;
  for (CachePolicy p :
       {CachePolicy::kLru, CachePolicy::kLfu, CachePolicy::kBelady, CachePolicy::kStatic}) {
    c.policy = p;
    auto src = MakeSyntheticSource(*layout, SyntheticSpec{}, 5);
    ASSERT_TRUE(src.ok());
    auto r = Simulate(s, dev, c, src->get());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->plan.cache_units[0], 40u);
    EXPECT_NEAR(r->hit_rate, 40.0 / 128, 1e-12) << CachePolicyName(p);
    EXPECT_DOUBLE_EQ(r->density, 1.0);
    // Misses: 88 units x 3 tensors x 64 bytes per layer, as one request per tensor.
    EXPECT_DOUBLE_EQ(r->storage_bytes_per_token, 2 * 88 * 192.0);
    EXPECT_EQ(r->storage_requests_per_token, 2u * 3u);
    // Memory: static per layer (attention 12288 + norms 512 + KV 2*32*2*10 = 1280) + hits
    // 40*192, and the head stage: output 6400 + norm 256 + one embedding row 64.
    double layer_mem = 12288 + 512 + 1280 + 40 * 192.0;
    EXPECT_DOUBLE_EQ(r->memory_bytes_per_token, 2 * layer_mem + 6400 + 256 + 64);
    double expect_s = 2 * (layer_mem / 1e6 + 88 * 192.0 / 1e5) + (6400 + 256 + 64) / 1e6;
    EXPECT_NEAR(r->seconds_per_token, expect_s, 1e-12);
    EXPECT_NEAR(r->tokens_per_second, 1 / expect_s, 1e-9);
    ASSERT_EQ(r->layers.size(), 2u);
    EXPECT_EQ(r->layers[1].hits, 4u * 40u);
    EXPECT_EQ(r->layers[1].misses, 4u * 88u);
  }
  // Concurrent I/O: each stage takes the larger of memory and flash time.
  c.policy = CachePolicy::kLru;
  c.concurrent_io = 1;
  auto src = MakeSyntheticSource(*layout, SyntheticSpec{}, 5);
  auto r = Simulate(s, dev, c, src->get());
  ASSERT_TRUE(r.ok());
  double layer_mem = 12288 + 512 + 1280 + 40 * 192.0;
  double expect_s = 2 * std::max(layer_mem / 1e6, 88 * 192.0 / 1e5) + (6400 + 256 + 64) / 1e6;
  EXPECT_NEAR(r->seconds_per_token, expect_s, 1e-12);
}

TEST(SimulatorTest, RequestsFollowRunsOfMissesAndRequestSize) {
  ModelShape s = UniformShape("one", 64, 1, 4, 4, 16, 128, 100);
  auto stream = MakeMaskStream(s, 0, "ffn_up", 128, 0);
  ASSERT_TRUE(stream.ok());
  MaskLayout layout{1, {*stream}};
  // Token 0: units 0,1,2 and 5,6 and 100 -> three runs; no cache.
  TokenMasks tok;
  tok.masks.emplace_back(128);
  for (uint32_t u : {0u, 1u, 2u, 5u, 6u, 100u}) tok.masks[0].Set(u);
  DeviceProfile dev = FlatDevice(1, 1);
  // 64-byte requests at 1 MB/s, 192-byte requests at 2 MB/s.
  dev.storage_read.points = {{64, 1e6}, {192, 2e6}};
  SimConfig c = BaseConfig(0);
  auto plan = PlanMemory(s, layout, dev, BaseConfig(1e9));
  ASSERT_TRUE(plan.ok());
  c.memory_bytes = plan->static_bytes;  // no cache
  VectorSource src(layout, {tok});
  auto r = Simulate(s, dev, c, &src);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->storage_requests_per_token, 3u);
  EXPECT_DOUBLE_EQ(r->storage_bytes_per_token, 6 * 64.0);
  double f = std::log(128.0 / 64) / std::log(3.0);  // 128-byte run: log-interpolated
  double bw128 = 1e6 + f * 1e6;
  EXPECT_NEAR(r->storage_s, 192 / 2e6 + 128 / bw128 + 64 / 1e6, 1e-15);
}

TEST(SimulatorTest, BeladyBeatsLruAndLayerGroupsDoNotChangeIt) {
  ModelShape s = UniformShape("four", 64, 4, 4, 4, 16, 512, 100);
  auto layout = MakeMaskLayout(s, StreamSet::kMlp);
  ASSERT_TRUE(layout.ok());
  DeviceProfile dev = FlatDevice(10, 1);
  auto full = PlanMemory(s, *layout, dev, BaseConfig(1e9));
  SimConfig c = BaseConfig(full->static_bytes + full->streamed_bytes * 0.2);
  auto spec = ParseSyntheticSpec("zipf:d=0.3,s=0.8,r=0.3,seed=4");
  ASSERT_TRUE(spec.ok());
  auto run = [&](CachePolicy p, uint64_t limit) {
    c.policy = p;
    c.belady_memory_limit = limit;
    auto src = MakeSyntheticSource(*layout, *spec, 80);
    auto r = Simulate(s, dev, c, src->get());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return *r;
  };
  SimResult belady = run(CachePolicy::kBelady, 1ull << 30);
  SimResult grouped = run(CachePolicy::kBelady, 1);  // one layer per group
  SimResult lru = run(CachePolicy::kLru, 0);
  SimResult lfu = run(CachePolicy::kLfu, 0);
  for (int l = 0; l < 4; ++l) {
    EXPECT_EQ(belady.layers[l].hits, grouped.layers[l].hits);
    EXPECT_GE(belady.layers[l].hits, lru.layers[l].hits);
    EXPECT_GE(belady.layers[l].hits, lfu.layers[l].hits);
  }
  EXPECT_DOUBLE_EQ(belady.seconds_per_token, grouped.seconds_per_token);
  EXPECT_GT(belady.hit_rate, lru.hit_rate);
  EXPECT_GE(belady.tokens_per_second, lru.tokens_per_second);
  EXPECT_NEAR(belady.density, 0.3, 0.002);
}

TEST(SimulatorTest, HostTierServesMissesOverTheLink) {
  ModelShape s = Tiny();
  auto layout = MakeMaskLayout(s, StreamSet::kMlp);
  DeviceProfile dev = FlatDevice(100, 1);
  dev.has_host = true;
  dev.host_capacity_bytes = 1e9;  // holds the whole MLP
  dev.host_link_bandwidth = 10 * kGB;
  auto full = PlanMemory(s, *layout, dev, BaseConfig(1e9));
  SimConfig c = BaseConfig(full->static_bytes);  // no room in GPU memory
  c.warmup_tokens = 0;  // the host tier starts warm: not even the first token reads storage
  auto src = MakeSyntheticSource(*layout, SyntheticSpec{}, 4);
  auto r = Simulate(s, dev, c, src->get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->storage_bytes_per_token, 0);  // warm host cache
  EXPECT_DOUBLE_EQ(r->link_bytes_per_token, full->streamed_bytes);
  EXPECT_NEAR(r->link_s, full->streamed_bytes / (10 * kGB), 1e-15);
  // A host tier holding a quarter of the MLP: the rest comes from storage every token.
  dev.host_capacity_bytes = full->streamed_bytes / 4;
  auto src_q = MakeSyntheticSource(*layout, SyntheticSpec{}, 4);
  auto rq = Simulate(s, dev, c, src_q->get());
  ASSERT_TRUE(rq.ok());
  EXPECT_DOUBLE_EQ(rq->storage_bytes_per_token, 0.75 * full->streamed_bytes);
  EXPECT_EQ(rq->layers[0].host_hits, 4u * 32u);
  // Without the host tier the same misses come from storage.
  dev.has_host = false;
  auto src2 = MakeSyntheticSource(*layout, SyntheticSpec{}, 4);
  auto r2 = Simulate(s, dev, c, src2->get());
  ASSERT_TRUE(r2.ok());
  EXPECT_DOUBLE_EQ(r2->storage_bytes_per_token, full->streamed_bytes);
}

TEST(SimulatorTest, RecordedEventsAndComputeAreReported) {
  ModelShape s = Tiny();
  auto layout = MakeMaskLayout(s, StreamSet::kMlp);
  std::vector<TokenMasks> toks(3);
  for (auto& t : toks) {
    for (int i = 0; i < 2; ++i) {
      t.masks.emplace_back(128);
      t.masks.back().SetAll();
      t.events.push_back({5, 7, 1, 1000});
    }
  }
  VectorSource src(*layout, toks);
  DeviceProfile dev = FlatDevice(1, 1);
  dev.flops_per_s = 1e3;  // absurdly slow compute: every stage is compute bound
  SimConfig c = BaseConfig(1e9);
  auto r = Simulate(s, dev, c, &src);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->has_recorded);
  EXPECT_EQ(r->recorded.hits, 3u * 2 * 5);
  EXPECT_EQ(r->recorded.bytes_read, 3u * 2 * 1000);
  EXPECT_TRUE(r->compute_modeled);
  // FLOPs per layer: 2 * (attention 12288 + MLP 3*128*64) + 4 * heads 4 * 16 * kv_len 10.
  double layer_flops = 2 * (12288 + 3 * 128 * 64.0) + 4 * 4 * 16 * 10.0;
  EXPECT_DOUBLE_EQ(r->flops_per_token, 2 * layer_flops + 2 * 6400);
  EXPECT_GT(r->compute_s, r->memory_s);
  // Masks of the wrong size are an error, not a crash.
  toks[1].masks[0].Resize(12);
  VectorSource bad(*layout, toks);
  EXPECT_FALSE(Simulate(s, dev, c, &bad).ok());
}

TEST(SimulatorTest, LayoutsFromTraceKindsAreChecked) {
  ModelShape s = Tiny();
  // gate+up+down neurons: 3 * 64 weights per unit.
  auto ok = MakeMaskStream(s, 1, "ffn_gate+ffn_up+ffn_down", 128, 192);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->UnitWeights(), 192u);
  // DIP's input channels of ffn_up: d_model units of d_ff weights.
  auto in = MakeMaskStream(s, 0, "ffn_up", 64, 0);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->weights_per_unit[0], 128u);
  EXPECT_FALSE(MakeMaskStream(s, 0, "ffn_up", 100, 0).ok());            // does not divide
  EXPECT_FALSE(MakeMaskStream(s, 0, "ffn_gate+ffn_up", 128, 64).ok());  // wrong hint
  EXPECT_FALSE(MakeMaskStream(s, 2, "ffn_up", 128, 0).ok());            // no layer 2
  EXPECT_FALSE(MakeMaskStream(s, 0, "mlp", 128, 0).ok());               // unknown kind
  EXPECT_FALSE(MakeMaskStream(s, 0, "ffn_up+ffn_up", 128, 0).ok());
}

TEST(SimulatorTest, PresetsHavePublishedSizes) {
  struct Want {
    const char* name;
    double params_b;
  } wants[] = {{"phi-3-mini", 3.82},   {"phi-3-medium", 13.96}, {"llama-2-7b", 6.74},
               {"llama-2-13b", 13.02}, {"llama-2-70b", 68.98},  {"llama-3-8b", 8.03},
               {"mistral-7b", 7.24},   {"mixtral-8x7b", 46.70}, {"llama-1b", 1.10},
               {"qwen3-30b-a3b", 30.53}};
  for (const Want& w : wants) {
    auto s = ModelPreset(w.name);
    ASSERT_TRUE(s.ok()) << w.name;
    EXPECT_TRUE(ValidateShape(*s).ok());
    EXPECT_NEAR(s->TotalParams() / 1e9, w.params_b, 0.01 * w.params_b) << w.name;
  }
  EXPECT_FALSE(ModelPreset("gpt-5").ok());
  auto bits = ParseWeightBits("4,attn=8,ffn_down=6,embd=16");
  ASSERT_TRUE(bits.ok());
  EXPECT_EQ(bits->Of(TensorKind::kAttnK), 8);
  EXPECT_EQ(bits->Of(TensorKind::kFfnDown), 6);
  EXPECT_EQ(bits->Of(TensorKind::kFfnUp), 4);
  EXPECT_EQ(bits->Of(TensorKind::kTokenEmbd), 16);
  EXPECT_EQ(bits->Of(TensorKind::kNorm), 32);
  EXPECT_FALSE(ParseWeightBits("0").ok());
  EXPECT_FALSE(ParseWeightBits("4,mlp=3").ok());
}

TEST(SimulatorTest, BandwidthCurveEnds) {
  BandwidthCurve c;
  c.points = {{4096, 1e8}, {65536, 1e9}};
  EXPECT_DOUBLE_EQ(c.At(4096), 1e8);
  EXPECT_DOUBLE_EQ(c.At(1 << 20), 1e9);            // clamped above
  EXPECT_DOUBLE_EQ(c.At(16384), 1e8 + 0.5 * 9e8);  // halfway in log(size)
  EXPECT_DOUBLE_EQ(c.At(2048), 5e7);               // constant IOPS below the smallest point
  EXPECT_DOUBLE_EQ(c.Seconds(512), c.Seconds(4096));
  c.ScaleToPeak(2e9);
  EXPECT_DOUBLE_EQ(c.At(4096), 2e8);
  BandwidthCurve flat = BandwidthCurve::Flat(3e9);
  EXPECT_DOUBLE_EQ(flat.At(1), 3e9);
  EXPECT_DOUBLE_EQ(flat.At(1e9), 3e9);
}

TEST(SimulatorTest, ProfilesInTheRepositoryLoad) {
  for (const char* name : {"a18", "ufs4", "ufs3.1", "ufs2.2", "raspberry-pi-5", "rtx3090-pcie3"}) {
    auto p = LoadDeviceProfile(testing::SourceDir() + "/profiles/" + name + ".json");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->name, name);
    // Round trip through JSON.
    auto again = ParseDeviceProfile(DeviceProfileToJson(*p), "again");
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_DOUBLE_EQ(again->storage_read.Peak(), p->storage_read.Peak());
    EXPECT_EQ(again->has_host, p->has_host);
  }
  auto a18 = LoadDeviceProfile(testing::SourceDir() + "/profiles/a18.json");
  EXPECT_DOUBLE_EQ(a18->memory_bandwidth, 60e9);
  EXPECT_DOUBLE_EQ(a18->storage_read.At(12345), 1e9);
  EXPECT_FALSE(ParseDeviceProfile("{\"name\":\"x\"}", "x.json").ok());
  auto bad =
      ParseDeviceProfile(R"({"name":"x","memory":{"bandwidth_GBps":1},"storage":{"read":[)"
                         R"({"request_bytes":8192,"GBps":1},{"request_bytes":4096,"GBps":1}]}})",
                         "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("increasing"), std::string::npos);
}

}  // namespace
}  // namespace weir::sim
