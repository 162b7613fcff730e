// A random MLP of F32 weights for the m2cache tests: gate and up [f, d], down [d, f], each value
// N(0, stddev²) from a seeded generator.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "m2cache/neuron_store.h"

namespace weir::m2cache::m2test {

struct Mlp {
  int64_t d, f;
  std::vector<float> gate, up, down;
  MlpWeights view() const {
    MlpWeights w;
    w.gate = TensorView{DType::kF32, Shape{f, d}, gate.data()};
    w.up = TensorView{DType::kF32, Shape{f, d}, up.data()};
    w.down = TensorView{DType::kF32, Shape{d, f}, down.data()};
    return w;
  }
  std::vector<MlpWeights> views() const { return {view()}; }
};

inline Mlp RandomMlp(int64_t d, int64_t f, uint32_t seed, float stddev = 0.3f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, stddev);
  Mlp m{d, f, {}, {}, {}};
  for (auto* v : {&m.gate, &m.up, &m.down}) {
    v->resize(static_cast<size_t>(d * f));
    for (float& x : *v) x = n(rng);
  }
  return m;
}

}  // namespace weir::m2cache::m2test
