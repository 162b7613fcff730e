// The SSD tier: the store file round trip, hostile files, and FileSource (budget, preloading,
// failed reads) against the resident store, through MixedMlp.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "random_mlp.h"
#include "m2cache/file_source.h"
#include "m2cache/mixed_mlp.h"
#include "m2cache/store_file.h"
#include "storage/fault_injecting_device.h"
#include "storage/memory_device.h"
#include "storage/open_device.h"
#include "testing/testing.h"

namespace weir::m2cache {
namespace {

using m2test::Mlp;
using m2test::RandomMlp;

// A model of `layers` random MLPs, its M2 weights and their store file's bytes.
struct Fixture {
  std::vector<Mlp> mlps;
  std::unique_ptr<M2Weights> weights;
  std::string path;
  std::string bytes;
};

Fixture Make(int layers, bool glu, int64_t d = 64, int64_t f = 192) {
  Fixture fx;
  std::vector<MlpWeights> views;
  for (int l = 0; l < layers; ++l) fx.mlps.push_back(RandomMlp(d, f, 100 + static_cast<uint32_t>(l)));
  for (const Mlp& m : fx.mlps) views.push_back(m.view());
  auto w = M2Weights::Build(views, {DType::kQ8_0, DType::kQ4_0}, 16, glu, nullptr);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  fx.weights = std::move(*w);
  fx.path = testing::TempDir() + "/store.m2s";
  const Status st = WriteStoreFile(*fx.weights, fx.path);
  EXPECT_TRUE(st.ok()) << st.ToString();
  fx.bytes = testing::ReadFile(fx.path);
  return fx;
}

std::unique_ptr<storage::BlockDevice> Memory(const std::string& bytes) {
  return std::make_unique<storage::MemoryDevice>("store", bytes);
}

bool SameRows(const LayerNeurons& a, const LayerNeurons& b) {
  if (a.d_ff != b.d_ff || a.d_model != b.d_model) return false;
  for (int p = 0; p < kNumPrecisions; ++p) {
    const TensorView* x[3] = {&a.at[p].gate, &a.at[p].up, &a.at[p].down_t};
    const TensorView* y[3] = {&b.at[p].gate, &b.at[p].up, &b.at[p].down_t};
    for (int k = 0; k < 3; ++k) {
      if (x[k]->dtype != y[k]->dtype || x[k]->nbytes() != y[k]->nbytes()) return false;
      if (std::memcmp(x[k]->data, y[k]->data, x[k]->nbytes()) != 0) return false;
    }
  }
  return true;
}

bool SamePredictor(const LowRankPredictor& a, const LowRankPredictor& b) {
  return a.rank() == b.rank() && a.a().nbytes() == b.a().nbytes() && a.u().nbytes() == b.u().nbytes() &&
         std::memcmp(a.a().data, b.a().data, a.a().nbytes()) == 0 &&
         std::memcmp(a.u().data, b.u().data, a.u().nbytes()) == 0;
}

TEST(StoreFileTest, RoundTripIsByteIdentical) {
  for (bool glu : {false, true}) {
    Fixture fx = Make(3, glu);
    EXPECT_EQ(std::memcmp(fx.bytes.data(), "WEIRM2S1", 8), 0);
    storage::DeviceOptions o;
    auto dev = storage::OpenDevice(fx.path, o);
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    auto opened = OpenStoreFile(fx.path, dev->get());
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    EXPECT_EQ(opened->predictor, glu ? PredictorKind::kLowRankGlu : PredictorKind::kLowRank);
    EXPECT_EQ(opened->index.types.high, DType::kQ8_0);
    EXPECT_EQ(opened->index.types.low, DType::kQ4_0);
    ASSERT_EQ(opened->index.layers.size(), 3u);
    ASSERT_EQ(opened->weights->predictors.size(), 3u);
    ASSERT_EQ(opened->weights->up_predictors.size(), glu ? 3u : 0u);
    EXPECT_EQ(opened->weights->store, nullptr);
    for (int l = 0; l < 3; ++l) {
      const StoreLayer& sl = opened->index.layers[static_cast<size_t>(l)];
      EXPECT_EQ(sl.extent.offset % 4096, 0u);
      EXPECT_EQ(sl.extent.bytes % 4096, 0u);
      EXPECT_TRUE(SamePredictor(opened->weights->predictors[static_cast<size_t>(l)],
                                fx.weights->predictors[static_cast<size_t>(l)]));
      if (glu) {
        EXPECT_TRUE(SamePredictor(opened->weights->up_predictors[static_cast<size_t>(l)],
                                  fx.weights->up_predictors[static_cast<size_t>(l)]));
      } else {  // lowrank: the up scales come back exactly
        ASSERT_GT(fx.weights->up_scale.size(), static_cast<size_t>(l));
        EXPECT_EQ(opened->weights->up_scale.at(static_cast<size_t>(l)), fx.weights->up_scale[static_cast<size_t>(l)]);
      }
    }
    auto src = FileSource::Create(opened->index, dev->get(), {});
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    EXPECT_EQ((*src)->fixed_layers(), 3);  // no budget: everything resident
    for (int l = 0; l < 3; ++l) {
      auto rows = (*src)->Acquire(l);
      ASSERT_TRUE(rows.ok());
      EXPECT_TRUE(SameRows(**rows, fx.weights->store->layer(l))) << "layer " << l;
      (*src)->Release(l);
    }
  }
}

TEST(StoreFileTest, WritingNeverClobbersAnUnnamedFile) {
  Fixture fx = Make(1, false);
  // An existing temporary name is refused, not overwritten.
  const std::string other = testing::TempDir() + "/x.m2s";
  testing::WriteFile(other + ".tmp." + std::to_string(::getpid()), "keep");
  EXPECT_FALSE(WriteStoreFile(*fx.weights, other).ok());
  EXPECT_EQ(testing::ReadFile(other + ".tmp." + std::to_string(::getpid())), "keep");
  EXPECT_FALSE(WriteStoreFile(*fx.weights, "/nonexistent-dir/x.m2s").ok());
  M2Weights empty;
  EXPECT_FALSE(WriteStoreFile(empty, other).ok());
}

// Replaces the JSON index of a store file (the data stays where it was).
std::string WithIndex(const std::string& file, const nlohmann::json& j) {
  const std::string text = j.dump();
  std::string out = file;
  const uint64_t n = text.size();
  EXPECT_LE(20 + n, 4096u);
  std::memcpy(out.data() + 12, &n, 8);
  std::memcpy(out.data() + 20, text.data(), text.size());
  return out;
}

nlohmann::json IndexOf(const std::string& file) {
  uint64_t n = 0;
  std::memcpy(&n, file.data() + 12, 8);
  return nlohmann::json::parse(file.substr(20, n));
}

Status OpenBytes(const std::string& bytes) {
  auto dev = Memory(bytes);
  auto opened = OpenStoreFile("hostile.m2s", dev.get());
  return opened.ok() ? Status::Ok() : opened.status();
}

TEST(StoreFileTest, HostileFilesGiveErrorsNotCrashes) {
  Fixture fx = Make(2, true);
  ASSERT_TRUE(OpenBytes(fx.bytes).ok());
  std::string bad = fx.bytes;
  bad[0] = 'X';
  EXPECT_NE(OpenBytes(bad).message().find("magic"), std::string::npos);
  bad = fx.bytes;
  bad[8] = 7;
  EXPECT_FALSE(OpenBytes(bad).ok());  // version
  // Cut at several points: inside the header, the index, a layer's extent, the predictors.
  for (size_t cut : {size_t{0}, size_t{7}, size_t{19}, size_t{100}, size_t{4096}, size_t{5000}, fx.bytes.size() / 2,
                     fx.bytes.size() - 1}) {
    const Status st = OpenBytes(fx.bytes.substr(0, cut));
    EXPECT_FALSE(st.ok()) << "cut at " << cut;
  }
  // Absurd index length.
  bad = fx.bytes;
  const uint64_t huge = uint64_t{1} << 62;
  std::memcpy(bad.data() + 12, &huge, 8);
  EXPECT_FALSE(OpenBytes(bad).ok());

  const nlohmann::json good = IndexOf(fx.bytes);
  ASSERT_TRUE(OpenBytes(WithIndex(fx.bytes, good)).ok());
  auto mutate = [&](const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = good;
    f(j);
    return OpenBytes(WithIndex(fx.bytes, j));
  };
  const std::vector<std::pair<const char*, std::function<void(nlohmann::json&)>>> cases = {
      {"extent offset beyond the file", [](auto& j) { j["layers"][0]["offset"] = uint64_t{1} << 60; }},
      {"extent offset 2^64-4096", [](auto& j) { j["layers"][1]["offset"] = UINT64_MAX - 4095; }},
      {"extent bytes absurd", [](auto& j) { j["layers"][0]["bytes"] = uint64_t{1} << 62; }},
      {"extent inside the header", [](auto& j) { j["layers"][0]["offset"] = 0; }},
      {"extent unaligned", [](auto& j) { j["layers"][0]["offset"] = j["layers"][0]["offset"].template get<uint64_t>() + 64; }},
      {"matrix size wrong", [](auto& j) { j["layers"][0]["high"]["gate"]["bytes"] = 12; }},
      {"matrix outside its extent", [](auto& j) { j["layers"][0]["low"]["down_t"]["offset"] = j["layers"][1]["offset"]; }},
      {"d_model absurd", [](auto& j) { j["layers"][0]["d_model"] = int64_t{1} << 40; }},
      {"d_model off the block", [](auto& j) { j["layers"][0]["d_model"] = 48; }},
      {"d_ff negative", [](auto& j) { j["layers"][1]["d_ff"] = -5; }},
      {"n_layers absurd", [](auto& j) { j["n_layers"] = 1000000000; }},
      {"n_layers mismatch", [](auto& j) { j["n_layers"] = 3; }},
      {"layers not an array", [](auto& j) { j["layers"] = "x"; }},
      {"unknown type", [](auto& j) { j["high"] = "q9_9"; }},
      {"type not a string", [](auto& j) { j["low"] = 4; }},
      {"predictor rank absurd", [](auto& j) { j["layers"][0]["predictor"]["rank"] = 1 << 30; }},
      {"predictor factor outside", [](auto& j) { j["layers"][1]["predictor"]["up_u"]["offset"] = uint64_t{1} << 50; }},
      {"predictor factor missing", [](auto& j) { j["layers"][1]["predictor"].erase("up_a"); }},
      {"predictor kind unknown", [](auto& j) { j["predictor"]["kind"] = "magic"; }},
      {"float offset", [](auto& j) { j["layers"][0]["offset"] = 4096.5; }},
      {"format name", [](auto& j) { j["format"] = "gguf"; }},
  };
  for (const auto& [what, f] : cases) {
    const Status st = mutate(f);
    EXPECT_FALSE(st.ok()) << what;
  }
  // Not JSON at all.
  bad = fx.bytes;
  bad[20] = '#';
  EXPECT_FALSE(OpenBytes(bad).ok());
  // Random byte flips in the header and index: an error or a valid store, never a crash.
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {
    bad = fx.bytes;
    for (int k = 0; k < 3; ++k) bad[rng() % 600] = static_cast<char>(rng());
    (void)OpenBytes(bad);
  }
}

// y of MixedMlp over `source` for `cycles` sweeps of every layer with drifting inputs.
std::vector<float> RunMlp(const M2Weights& w, LayerSource* source, bool units, int cycles, Status* status) {
  MixConfig cfg;
  cfg.r_high = 0.125;
  cfg.r_low = 0.25;
  cfg.cache_units = units;
  auto tier = MakeHostTier();
  auto mlp = MixedMlp::Create(&w, cfg, kernels::Glu::kSilu, units ? tier.get() : nullptr, nullptr, source);
  EXPECT_TRUE(mlp.ok()) << mlp.status().ToString();
  const int64_t d = source->shape(0).d_model;
  std::mt19937 rng(7);
  std::normal_distribution<float> n;
  std::vector<float> x(static_cast<size_t>(d)), y(x.size()), all;
  for (int c = 0; c < cycles; ++c) {
    for (int l = 0; l < source->n_layers(); ++l) {
      for (float& v : x) v = c == 0 && l == 0 ? n(rng) : 0.8f * v + 0.6f * n(rng);
      *status = (*mlp)->Forward(l, x.data(), y.data());
      if (!status->ok()) return all;
      all.insert(all.end(), y.begin(), y.end());
    }
  }
  return all;
}

TEST(FileSourceTest, MixedMlpOverTheSsdTierIsBitIdenticalUnderEveryBudget) {
  const int layers = 6;
  Fixture fx = Make(layers, false);
  auto dev = Memory(fx.bytes);
  auto opened = OpenStoreFile(fx.path, dev.get());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const uint64_t extent = opened->index.max_extent_bytes();
  for (bool units : {true, false}) {
    ResidentSource resident(fx.weights->store.get());
    Status st;
    const std::vector<float> want = RunMlp(*fx.weights, &resident, units, 4, &st);
    ASSERT_TRUE(st.ok());
    for (int window : {0, 1, 2, 3}) {
      // Only the window; the window and two fixed layers; everything.
      for (uint64_t budget : {static_cast<uint64_t>(window + 1) * extent, static_cast<uint64_t>(window + 3) * extent,
                              opened->index.extent_bytes()}) {
        auto src = FileSource::Create(opened->index, dev.get(), {budget, window});
        ASSERT_TRUE(src.ok()) << src.status().ToString();
        EXPECT_LE((*src)->allocated_bytes(), budget);
        const std::vector<float> got = RunMlp(*opened->weights, src->get(), units, 4, &st);
        ASSERT_TRUE(st.ok()) << st.ToString();
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "window " << window << " budget " << budget << " units " << units << ": " << (*src)->Describe();
        const SourceStats s = (*src)->stats();
        if ((*src)->fixed_layers() < layers) {
          EXPECT_GT(s.reads, static_cast<uint64_t>(layers));  // dynamic layers are read again each cycle
        } else {
          EXPECT_EQ(s.reads, static_cast<uint64_t>(layers));  // read once
        }
      }
    }
  }
}

TEST(FileSourceTest, RefusesABudgetBelowTheWindow) {
  Fixture fx = Make(4, false);
  auto dev = Memory(fx.bytes);
  auto opened = OpenStoreFile(fx.path, dev.get());
  ASSERT_TRUE(opened.ok());
  const uint64_t extent = opened->index.max_extent_bytes();
  auto src = FileSource::Create(opened->index, dev.get(), {3 * extent - 1, 2});
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(src.status().message().find(std::to_string(3 * extent)), std::string::npos) << src.status().ToString();
  EXPECT_FALSE(FileSource::Create(opened->index, dev.get(), {UINT64_MAX, -1}).ok());
  auto ok = FileSource::Create(opened->index, dev.get(), {3 * extent, 2});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->fixed_layers(), 0);
  EXPECT_EQ((*ok)->dynamic_buffers(), 3);
  EXPECT_FALSE((*ok)->Acquire(4).ok());
  EXPECT_FALSE((*ok)->Acquire(-1).ok());
}

// A device that fails every read while `broken`.
class SwitchDevice : public storage::BlockDevice {
 public:
  explicit SwitchDevice(storage::BlockDevice* inner) : inner_(inner) {}
  Status ReadAt(uint64_t offset, size_t length, void* dst) override {
    if (broken) return Status::IoError(name_ + ": injected EIO");
    return inner_->ReadAt(offset, length, dst);
  }
  uint64_t size() const override { return inner_->size(); }
  const std::string& name() const override { return name_; }
  std::atomic<bool> broken{false};

 private:
  storage::BlockDevice* inner_;
  std::string name_ = "switch";
};

TEST(FileSourceTest, AReadErrorSurfacesFromAcquireAndTheNextAcquireRecovers) {
  const int layers = 5;
  Fixture fx = Make(layers, false);
  auto mem = Memory(fx.bytes);
  auto opened = OpenStoreFile(fx.path, mem.get());
  ASSERT_TRUE(opened.ok());
  SwitchDevice dev(mem.get());
  dev.broken = true;
  // The fixed area is read at Create: its failure fails Create.
  EXPECT_FALSE(FileSource::Create(opened->index, &dev, {opened->index.max_extent_bytes() * 4, 2}).ok());
  auto src = FileSource::Create(opened->index, &dev, {opened->index.max_extent_bytes() * 3, 2});
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  auto bad = (*src)->Acquire(0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("injected EIO"), std::string::npos) << bad.status().ToString();
  dev.broken = false;
  // The layers preloaded while broken fail once each, then read again.
  for (int cycle = 0; cycle < 3; ++cycle) {
    for (int l = 0; l < layers; ++l) {
      auto rows = (*src)->Acquire(l);
      if (!rows.ok()) rows = (*src)->Acquire(l);
      ASSERT_TRUE(rows.ok()) << "cycle " << cycle << " layer " << l << ": " << rows.status().ToString();
      EXPECT_TRUE(SameRows(**rows, fx.weights->store->layer(l)));
      (*src)->Release(l);
    }
  }
}

TEST(FileSourceTest, RandomReadFailuresNeverGiveWrongRows) {
  const int layers = 5;
  Fixture fx = Make(layers, false);
  auto mem = Memory(fx.bytes);
  auto opened = OpenStoreFile(fx.path, mem.get());
  ASSERT_TRUE(opened.ok());
  storage::FaultOptions fo;
  fo.fail_probability = 0.3;
  fo.short_read_probability = 0.1;
  fo.seed = 9;
  storage::FaultInjectingDevice dev(Memory(fx.bytes), fo);
  auto src = FileSource::Create(opened->index, &dev, {opened->index.max_extent_bytes() * 3, 2});
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  int ok = 0, failed = 0;
  for (int i = 0; i < 200; ++i) {
    const int l = i % layers;
    auto rows = (*src)->Acquire(l);
    if (!rows.ok()) {
      ++failed;
      continue;
    }
    ++ok;
    ASSERT_TRUE(SameRows(**rows, fx.weights->store->layer(l))) << "step " << i;
    (*src)->Release(l);
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(failed, 0);
}

TEST(FileSourceTest, AnErrorFromAcquireFailsTheMlpStepCleanly) {
  Fixture fx = Make(3, false);
  auto mem = Memory(fx.bytes);
  auto opened = OpenStoreFile(fx.path, mem.get());
  ASSERT_TRUE(opened.ok());
  SwitchDevice dev(mem.get());
  auto src = FileSource::Create(opened->index, &dev, {opened->index.max_extent_bytes() * 2, 1});
  ASSERT_TRUE(src.ok());
  MixConfig cfg;
  auto tier = MakeHostTier();
  auto mlp = MixedMlp::Create(opened->weights.get(), cfg, kernels::Glu::kSilu, tier.get(), nullptr, src->get());
  ASSERT_TRUE(mlp.ok()) << mlp.status().ToString();
  std::vector<float> x(64, 0.5f), y(64);
  ASSERT_TRUE((*mlp)->Forward(0, x.data(), y.data()).ok());
  dev.broken = true;
  // Layer 2 is not yet loaded once 1 is (window 1: two buffers), so some step fails.
  Status st;
  for (int i = 0; i < 6 && st.ok(); ++i) st = (*mlp)->Forward(i % 3, x.data(), y.data());
  EXPECT_FALSE(st.ok());
  EXPECT_GT((*mlp)->stats().storage_reads, 0u);
}

}  // namespace
}  // namespace weir::m2cache
