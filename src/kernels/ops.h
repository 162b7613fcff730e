// Elementwise and small vector operations of the decoder: RMSNorm, RoPE, softmax, SwiGLU, top-k.
// Thread safety: free functions.
#pragma once

#include <cstdint>

#include "tensor/rope_style.h"

namespace weir::kernels {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]; out may alias x.
void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps);

// Rotates each of n_heads heads of x[n_heads * head_dim] in place for position pos.
// theta_i = pos * base^(-2i/rot_dim) for pair i < rot_dim/2; dims past rot_dim are untouched.
void Rope(float* x, int n_heads, int head_dim, int rot_dim, int pos, float base, RopeStyle style);

// In-place numerically stable softmax of x[n].
void Softmax(float* x, int64_t n);

// gate[i] = silu(gate[i]) * up[i]  (SwiGLU; silu(g) = g * sigmoid(g)).
void SiluMul(float* gate, const float* up, int64_t n);

// Writes into idx[k] the indices of the k largest scores[i] (any order), by partial selection
// (O(n) expected), not a full sort. Ties are broken by lower index. k is clamped to [0, n].
// Returns the number of indices written.
int64_t TopK(const float* scores, int64_t n, int64_t k, int32_t* idx);

}  // namespace weir::kernels
