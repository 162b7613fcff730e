// A mixture-of-experts layer with F32 weights built in memory, for the MoE tests
// (moe_test.cc, moe_sparse_test.cc).
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "format/arch_spec.h"
#include "format/model_file.h"
#include "model/llama_weights.h"

namespace weir::model {

// One MoE layer with F32 weights built in memory.
struct MoeLayerFixture {
  static constexpr int kD = 32, kF = 64, kE = 6, kK = 2;
  std::vector<float> router, gate, up, down;  // [E, D], [E, F, D], [E, F, D], [E, D, F]
  LlamaWeights weights;
  format::LlamaConfig config;

  explicit MoeLayerFixture(bool identical_experts, uint32_t seed = 5) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, 0.3f);
    auto fill = [&](std::vector<float>* v, size_t count) {
      v->resize(count);
      for (float& x : *v) x = n(rng);
    };
    fill(&router, kE * kD);
    fill(&gate, kE * kF * kD);
    fill(&up, kE * kF * kD);
    fill(&down, kE * kD * kF);
    if (identical_experts) {
      for (int e = 1; e < kE; ++e) {
        std::copy(gate.begin(), gate.begin() + kF * kD, gate.begin() + e * kF * kD);
        std::copy(up.begin(), up.begin() + kF * kD, up.begin() + e * kF * kD);
        std::copy(down.begin(), down.begin() + kD * kF, down.begin() + e * kD * kF);
      }
    }
    config.arch = format::FindArch("mixtral");
    config.d_model = kD;
    config.n_layers = 1;
    config.d_ff = kF;
    config.n_expert = kE;
    config.n_expert_used = kK;
    config.layers = {{4, 4, kF}};
    weights.layers.resize(1);
    LayerWeights& L = weights.layers[0];
    L.ffn_gate_inp = View(router, Shape{kE, kD});
    L.w_gate_exps = View(gate, Shape{kE, kF, kD});
    L.w_up_exps = View(up, Shape{kE, kF, kD});
    L.w_down_exps = View(down, Shape{kE, kD, kF});
  }
  static TensorView View(const std::vector<float>& v, Shape s) {
    TensorView t;
    t.dtype = DType::kF32;
    t.shape = s;
    t.data = v.data();
    return t;
  }
};

}  // namespace weir::model
