#include "tensor/quant_iq4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tensor/dtype.h"

namespace weir {

namespace {

constexpr int kSub = 32;  // values per IQ4_NL block and per IQ4_XS sub-block
constexpr int kSubsPerXs = kQK_K / kSub;

// Index of the level nearest to v (v in units of the scale; ties to the lower level).
int NearestLevel(float v) {
  if (!(v > kIq4Levels[0])) return 0;  // also NaN, which cannot occur for finite x and d != 0
  if (v >= kIq4Levels[15]) return 15;
  int hi = 1;
  while (kIq4Levels[hi] < v) ++hi;  // kIq4Levels[hi - 1] < v <= kIq4Levels[hi]
  return (v - kIq4Levels[hi - 1] <= kIq4Levels[hi] - v) ? hi - 1 : hi;
}

float RoundToF16(float d) { return F16ToF32(F32ToF16(d)); }

// Squared error of x against d * level[q], with the codes picked for d.
double Codes(const float* x, float d, uint8_t* q) {
  double se = 0;
  const float inv = d != 0 ? 1.0f / d : 0.0f;
  for (int i = 0; i < kSub; ++i) {
    q[i] = static_cast<uint8_t>(d != 0 ? NearestLevel(x[i] * inv) : NearestLevel(0.0f));
    const double e = static_cast<double>(x[i]) - static_cast<double>(d) * kIq4Levels[q[i]];
    se += e * e;
  }
  return se;
}

// The scale (not yet rounded to f16) and codes of 32 values of least squared error among the
// candidates: the value of largest magnitude mapped onto each end of the table, nudged by up to
// 8 level units either way, each followed by the least-squares scale for its codes.
float FitScale(const float* x) {
  float big = 0;
  for (int i = 0; i < kSub; ++i) big = std::fabs(x[i]) > std::fabs(big) ? x[i] : big;
  if (big == 0 || !std::isfinite(big)) return 0;
  float best_d = big / kIq4Levels[0];
  double best_se = std::numeric_limits<double>::infinity();
  uint8_t q[kSub];
  for (const int end : {0, 15}) {
    for (int nudge = -8; nudge <= 8; ++nudge) {
      const float level = static_cast<float>(kIq4Levels[end] + nudge);
      const float d = big / level;
      const double se_d = Codes(x, d, q);
      if (std::isfinite(d) && d != 0 && se_d < best_se) best_se = se_d, best_d = d;
      double xl = 0, ll = 0;
      for (int i = 0; i < kSub; ++i) {
        xl += static_cast<double>(x[i]) * kIq4Levels[q[i]];
        ll += static_cast<double>(kIq4Levels[q[i]]) * kIq4Levels[q[i]];
      }
      const float c = ll > 0 ? static_cast<float>(xl / ll) : 0.0f;  // least squares for q
      if (std::isfinite(c) && c != 0) {
        const double se = Codes(x, c, q);
        if (se < best_se) best_se = se, best_d = c;
      }
    }
  }
  return best_d;
}

// Packs 32 codes: value j in the low nibble of byte j, value j + 16 in its high nibble.
void Pack(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < kSub / 2; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + kSub / 2] << 4));
}

void Unpack(const uint8_t* qs, float dl, float* y) {
  for (int j = 0; j < kSub / 2; ++j) {
    y[j] = dl * static_cast<float>(kIq4Levels[qs[j] & 15]);
    y[j + kSub / 2] = dl * static_cast<float>(kIq4Levels[qs[j] >> 4]);
  }
}

int XsScaleCode(const BlockIQ4_XS& b, int k) {
  return ((b.scales_l[k / 2] >> (4 * (k % 2))) & 15) | (((b.scales_h >> (2 * k)) & 3) << 4);
}

}  // namespace

void DequantizeRowIQ4_NL(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / kSub; ++i) Unpack(b[i].qs, F16ToF32(b[i].d), dst + i * kSub);
}

void DequantizeRowIQ4_XS(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(b[i].d);
    for (int k = 0; k < kSubsPerXs; ++k) {
      const float dl = d * static_cast<float>(XsScaleCode(b[i], k) - 32);
      Unpack(b[i].qs + k * (kSub / 2), dl, dst + i * kQK_K + k * kSub);
    }
  }
}

void QuantizeRowIQ4_NL(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockIQ4_NL*>(dst);
  uint8_t q[kSub];
  for (int64_t i = 0; i < n / kSub; ++i) {
    const float* x = src + i * kSub;
    const float d = RoundToF16(FitScale(x));
    Codes(x, std::isfinite(d) ? d : 0.0f, q);
    b[i].d = F32ToF16(std::isfinite(d) ? d : 0.0f);
    Pack(q, b[i].qs);
  }
}

void QuantizeRowIQ4_XS(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockIQ4_XS*>(dst);
  uint8_t q[kSub];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    float scale[kSubsPerXs];
    float big = 0;  // the sub-block scale of largest magnitude, signed
    for (int k = 0; k < kSubsPerXs; ++k) {
      scale[k] = FitScale(x + k * kSub);
      big = std::fabs(scale[k]) > std::fabs(big) ? scale[k] : big;
    }
    // Codes ls - 32 in [-32, 31]: the largest scale maps onto -32, so d has the opposite sign.
    float d = RoundToF16(big / -32.0f);
    if (!std::isfinite(d)) d = 0;
    BlockIQ4_XS& out = b[i];
    std::memset(&out, 0, sizeof(out));
    out.d = F32ToF16(d);
    for (int k = 0; k < kSubsPerXs; ++k) {
      // The rounded code or a neighbour: whichever codes the sub-block best.
      int ls = 32;
      if (d != 0) {
        const int r = static_cast<int>(std::lround(scale[k] / d)) + 32;
        double best = std::numeric_limits<double>::infinity();
        for (int c = std::max(0, r - 1); c <= std::min(63, r + 1); ++c) {
          const double se = Codes(x + k * kSub, d * static_cast<float>(c - 32), q);
          if (se < best) best = se, ls = c;
        }
      }
      out.scales_l[k / 2] |= static_cast<uint8_t>((ls & 15) << (4 * (k % 2)));
      out.scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * k));
      Codes(x + k * kSub, d * static_cast<float>(ls - 32), q);
      Pack(q, out.qs + k * (kSub / 2));
    }
  }
}

}  // namespace weir
