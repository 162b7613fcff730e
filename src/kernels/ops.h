// Elementwise and small vector operations of the decoder: RMSNorm, RoPE, softmax, SwiGLU, GeGLU,
// logit soft-capping, top-k (attention itself: attention.h).
// RmsNorm, Softmax and SiluMul run on the path chosen in isa.h (vectorized on AVX2 / AVX-512 /
// Highway); Rope and TopK have one implementation (they are a negligible share of a token).
//
// Thread safety: free functions. TopK's 5-argument form uses a thread_local scratch buffer.
#pragma once

#include <cstdint>

#include "tensor/rope_style.h"

namespace weir::kernels {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]; out may alias x.
void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps);

// Rotates each of n_heads heads of x[n_heads * head_dim] in place for position pos:
//   theta_i = freq_scale * pos * base^(-2i/rot_dim) / freq_factors[i]
// for pair i < rot_dim/2 (freq_factors null: every factor 1); dims past rot_dim are untouched.
// freq_scale < 1 is linear RoPE scaling (llama.cpp's freq_scale = 1 / rope.scaling.factor);
// freq_factors[rot_dim/2] are Llama 3.1's per-pair rope_freqs (llama.cpp divides the same way).
void Rope(float* x, int n_heads, int head_dim, int rot_dim, int pos, float base, RopeStyle style,
          float freq_scale = 1.0f, const float* freq_factors = nullptr);

// In-place numerically stable softmax of x[n].
void Softmax(float* x, int64_t n);

// gate[i] = silu(gate[i]) * up[i]  (SwiGLU; silu(g) = g * sigmoid(g)).
void SiluMul(float* gate, const float* up, int64_t n);

// gate[i] = gelu(gate[i]) * up[i]  (GeGLU, Gemma), with gelu's tanh approximation
//   gelu(g) = 0.5 g (1 + tanh(z)) = g sigmoid(2z),  z = sqrt(2/pi) (g + 0.044715 g^3).
// Every path computes the sigmoid form, g u / (1 + exp(-2z)): the same exponential as SiLU, and
// no cancellation in 1 + tanh(z) where g is negative.
void GeluTanhMul(float* gate, const float* up, int64_t n);

// The gated linear unit of an MLP: gate[i] = act(gate[i]) * up[i], the one place every MLP
// path (resident, sparse, streamed bundles and columns) applies its activation.
enum class Glu : uint8_t { kSilu, kGeluTanh };
void GatedActivation(Glu glu, float* gate, const float* up, int64_t n);

// x[i] = cap * tanh(x[i] / cap): logit soft-capping (Gemma 2/3); cap > 0.
void SoftCap(float* x, int64_t n, float cap);

// Rotates each of the n / block consecutive blocks of x by the orthonormal Walsh-Hadamard matrix
// H_block / sqrt(block) (block a power of two dividing n), in place, by the fast transform. The
// matrix is symmetric and its own inverse, so applying it twice gives x back, and it keeps dot
// products: (H a) . (H b) = a . b. A quantized KV cache stores rotated keys and values, which
// spreads a head's outlier dimensions over the block before the block's scale is chosen
// (model/kv_cache.h).
void HadamardRotate(float* x, int64_t n, int block);

// Writes into idx[k] the indices of the k largest scores[i] in increasing index order, by partial
// selection (O(n) expected), not a full sort. Ties are broken by lower index; NaN ranks below
// every number. k is clamped to [0, n]. Returns the number of indices written.
// The 5-argument form keeps its scratch (n floats) in a grow-only thread_local buffer, so it
// allocates only when a thread first sees a larger n; the 6-argument form uses the caller's
// scratch[n] and never allocates.
int64_t TopK(const float* scores, int64_t n, int64_t k, int32_t* idx);
int64_t TopK(const float* scores, int64_t n, int64_t k, int32_t* idx, float* scratch);

// Scalar references for the vectorized operations above.
namespace ref {
void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps);
void Softmax(float* x, int64_t n);
void SiluMul(float* gate, const float* up, int64_t n);
void GeluTanhMul(float* gate, const float* up, int64_t n);  // in double precision
}  // namespace ref

}  // namespace weir::kernels
