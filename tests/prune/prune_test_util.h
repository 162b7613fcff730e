// Helpers for the pruning tests: a generated tiny model of any architecture, a tiny Llama
// (format/synth_llama.h preset "tiny": d_model 64, 2 layers, 4 heads / 2 kv heads of 16 dims, d_ff
// 192, vocab 320), its logits for a token sequence, random activation norms, a calibration text.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "format/synth_llama.h"
#include "model/model.h"
#include "model/session.h"
#include "prune/activation_norms.h"
#include "testing/testing.h"

namespace weir::prune::testutil {

inline std::string WriteTinyModel(DType type = DType::kF32, uint64_t seed = 7) {
  auto spec = format::SynthPreset("tiny");
  EXPECT_TRUE(spec.ok());
  const std::string path = testing::TempDir() + "/tiny.gguf";
  Status st = format::WriteRandomLlamaGguf(*spec, type, seed, path, nullptr);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return path;
}

// A generated tiny model of architecture `arch` (the row's "tiny" preset, format/synth_llama.h),
// written to <TempDir>/tiny-<arch><suffix>.gguf. `edit` may change the spec first.
template <typename Edit>
inline std::string WriteTinyArchModel(const std::string& arch, Edit edit,
                                      const std::string& suffix = "", DType type = DType::kF32,
                                      uint64_t seed = 7) {
  auto spec = format::SynthPreset("tiny", arch);
  EXPECT_TRUE(spec.ok()) << arch;
  if (!spec.ok()) return "";
  edit(*spec);
  const std::string path = testing::TempDir() + "/tiny-" + arch + suffix + ".gguf";
  Status st = format::WriteRandomLlamaGguf(*spec, type, seed, path, nullptr);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return path;
}
inline std::string WriteTinyArchModel(const std::string& arch) {
  return WriteTinyArchModel(arch, [](format::SynthSpec&) {});
}

inline std::unique_ptr<model::Model> LoadOrDie(const std::string& path) {
  auto m = model::Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

inline std::unique_ptr<model::Model> FromFileOrDie(format::ModelFile file) {
  auto m = model::Model::FromFile(std::move(file));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

// Logits [tokens.size(), vocab] of a fresh session.
inline std::vector<float> Logits(const model::Model& m, const std::vector<int32_t>& tokens) {
  model::SessionOptions so;
  so.ctx = static_cast<int>(tokens.size());
  so.n_batch = static_cast<int>(tokens.size());
  auto s = model::Session::Create(m, nullptr, so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return {};
  auto r = (*s)->Forward(tokens, model::LogitsFor::kAll);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  const size_t n = tokens.size() * static_cast<size_t>(m.config().vocab_size);
  return std::vector<float>(*r, *r + n);
}

inline std::vector<int32_t> SomeTokens(int n, int vocab, uint32_t seed = 3) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  t[0] = 1;  // BOS
  return t;
}

// Norms with a few large channels, like real activations.
inline ActivationNorms RandomNorms(const format::LlamaConfig& c, uint32_t seed = 11) {
  ActivationNorms n = ActivationNorms::ForConfig(c);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.5, 2.0);
  for (int l = 0; l < n.n_layers(); ++l) {
    for (int s = 0; s < sparsity::kNumSites; ++s) {
      const auto site = static_cast<sparsity::Site>(s);
      std::vector<double> v(static_cast<size_t>(n.width(l, site)));
      for (auto& x : v) x = u(rng);
      for (size_t i = 0; i < v.size(); i += 13) v[i] *= 400;  // outlier channels (norm x20)
      EXPECT_TRUE(n.SetSumSquares(l, site, v).ok());
    }
  }
  return n;
}

// A calibration text of ordinary words (the tiny model's vocabulary tokenizes anything).
inline std::string CalibrationText(int words = 3000) {
  static const char* kWords[] = {"once",  "upon", "a",   "time",  "there", "was",  "little", "girl",
                                 "named", "lily", "she", "loved", "to",    "play", "in",     "the",
                                 "park",  "with", "her", "ball",  "one",   "day",  "saw",    "big",
                                 "red",   "dog",  "and", "they",  "ran"};
  std::mt19937 rng(5);
  std::string s;
  for (int i = 0; i < words; ++i) {
    s += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
    s += (i % 12 == 11) ? ".\n" : " ";
  }
  return s;
}

}  // namespace weir::prune::testutil
