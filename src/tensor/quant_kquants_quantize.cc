// Quantizers of the K types (Q2_K .. Q6_K; layouts in quant_kquants.h). weir's own method, in
// three stages per 256-value super-block, all arithmetic in double so that no input that is a
// finite f32 (denormals and values near FLT_MAX included) can overflow or divide by zero:
//
//  1. Each sub-block gets a real-valued scale (and, for Q2_K/Q4_K/Q5_K, an offset min <= 0) by
//     a small search: 16 candidate inverse scales that map the value of largest magnitude to
//     0.6 .. 1.2 times the extreme code (both extremes for the signed types) are each rounded to
//     codes, the scale (and min) re-fitted to those codes by least squares, and the candidate with
//     the smallest squared error kept; a few rounds of "re-round the codes, re-fit" follow.
//  2. The sub-block scales (and mins) are themselves quantized to their 4/6/8-bit codes with the
//     same search, weighting each scale by the sum of its q^2 (the error it causes in x scales
//     with that), which fixes the f16 super-block scale(s).
//  3. With the f16 values that the file will hold, each sub-block tries the codes around the
//     rounded ones (+-1 for the scale; for the min, +-2 and then +-1 around a centre that moves
//     to the least-squares min of the re-rounded values) and keeps the pair whose values
//     dequantize (in the dequantizer's own f32 arithmetic) closest to x; then the super-block
//     scale(s) are re-fitted by least squares over the whole block for the chosen codes, and the
//     result kept only if the total error falls.
// Super-block scales are clamped to the f16 range (+-65504) and, when a non-zero scale would
// underflow, raised to the smallest f16 subnormal, so huge and tiny blocks give finite, non-NaN
// output. Deterministic: no randomness, no threads, a fixed order of operations. Cost: about
// 120-270 ns per value on one x86 core (the 32-value types take a few ns): offline work.
// Quality: 6-20% lower rms error than rounding against exact per-sub-block absmax (or min..max)
// scales on Gaussian and Laplacian rows (tests/tensor/quant_types_test.cc).
//
// Thread safety: pure functions.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tensor/quant_kquants.h"

namespace weir {
namespace {

constexpr double kF16Max = 65504.0;
constexpr int kSearchSteps = 16;  // candidate scales per extreme code in stage 1
// Stage 3 effort. Measured on Gaussian and Laplacian rows (rms error / rms value): wider searches
// (scale codes +-2, more min moves and re-fits, trying the neighbouring f16 super-block scales)
// gained under 0.3% for two to five times the time.
constexpr int kScaleReach = 1;   // scale codes tried on each side of the rounded one
constexpr int kMinRounds = 2;    // moves of the min code's centre
constexpr int kRefitRounds = 1;  // least-squares re-fits of the super-block scale(s)

// Nearest integer to v, clamped to [lo, hi]; NaN goes to lo (no undefined float->int cast).
// Branch-free: these run in every inner loop on data-dependent values.
inline int RoundClamp(double v, int lo, int hi) {
  const double c = std::min(static_cast<double>(hi), std::max(static_cast<double>(lo), v));
  return lo + static_cast<int>(c - lo + 0.5);  // c - lo >= 0: truncation rounds down
}

// The f16 that stores scale v: clamped to the f16 range; a non-zero v too small for f16 becomes
// the smallest subnormal of its sign rather than 0, so the block keeps some resolution.
inline uint16_t ScaleToF16(double v) {
  if (!(v == v)) return 0;  // NaN
  v = std::clamp(v, -kF16Max, kF16Max);
  uint16_t h = F32ToF16(static_cast<float>(v));
  if ((h & 0x7fff) == 0 && v != 0) h = v > 0 ? 0x0001 : 0x8001;
  return h;
}

// Fits x ~= s * q with integer q in [qmin, qmax], minimising sum w (x - s q)^2 (w == nullptr:
// all weights 1). Writes q and returns s (0 for an all-zero x).
double FitScale(const double* x, const double* w, int n, int qmin, int qmax, int* q) {
  double amax = 0, vmax = 0;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      vmax = x[j];
    }
  }
  std::fill(q, q + n, 0);
  if (!(amax > 0) || !std::isfinite(amax)) return 0;

  double sxx = 0;
  for (int j = 0; j < n; ++j) sxx += (w ? w[j] : 1.0) * x[j] * x[j];
  int cand[256];
  double best_err = std::numeric_limits<double>::infinity(), best_s = 0;
  // Rounds x * iscale to codes, re-fits s, and keeps the result if it is the best so far. The
  // error of the least-squares s is sxx - sxq^2 / sqq.
  auto try_codes = [&](auto code_of) {
    double sxq = 0, sqq = 0;
    for (int j = 0; j < n; ++j) {
      cand[j] = code_of(x[j]);
      const double wj = w ? w[j] : 1.0;
      sxq += wj * x[j] * cand[j];
      sqq += wj * static_cast<double>(cand[j]) * cand[j];
    }
    if (!(sqq > 0)) return false;
    const double s = sxq / sqq;
    const double err = sxx - sxq * s;
    if (!(err < best_err)) return false;
    best_err = err;
    best_s = s;
    std::copy(cand, cand + n, q);
    return true;
  };
  for (int target : {qmax, qmin}) {
    if (target == 0) continue;
    for (int k = 0; k < kSearchSteps; ++k) {
      const double f = 0.6 + 0.6 * k / (kSearchSteps - 1);
      const double iscale = target * f / vmax;
      try_codes([&](double v) { return RoundClamp(v * iscale, qmin, qmax); });
    }
  }
  for (int iter = 0; iter < 4 && best_s != 0; ++iter) {
    const double inv = 1.0 / best_s;
    if (!try_codes([&](double v) { return RoundClamp(v * inv, qmin, qmax); })) break;
  }
  return best_s;
}

// Fits x ~= lo + s * q with integer q in [0, qmax], s >= 0 and lo <= 0 (the K formats store the
// min as a non-negative code that is subtracted), minimising the plain squared error.
void FitScaleMin(const double* x, int n, int qmax, double* s_out, double* lo_out, int* q) {
  double xmin = x[0], xmax = x[0], amax = 0, sum = 0, sxx = 0;
  for (int j = 0; j < n; ++j) {
    xmin = std::min(xmin, x[j]);
    xmax = std::max(xmax, x[j]);
    amax = std::max(amax, std::fabs(x[j]));
    sum += x[j];
    sxx += x[j] * x[j];
  }
  std::fill(q, q + n, 0);
  *s_out = 0;
  *lo_out = 0;
  if (!(amax > 0) || !std::isfinite(amax)) return;
  const double lo0 = std::min(xmin, 0.0);
  const double range = xmax - lo0;
  if (!(range > 0)) {  // every value equals xmin < 0: the min alone is exact
    *lo_out = xmin;
    return;
  }

  int cand[256];
  double best_err = std::numeric_limits<double>::infinity();
  auto try_codes = [&](auto code_of) {
    double sq = 0, sqq = 0, sxq = 0;
    for (int j = 0; j < n; ++j) {
      cand[j] = code_of(x[j]);
      sq += cand[j];
      sqq += static_cast<double>(cand[j]) * cand[j];
      sxq += x[j] * cand[j];
    }
    double s = 0, lo = 0;
    const double det = n * sqq - sq * sq;
    if (det > 0) {
      s = (n * sxq - sq * sum) / det;
      lo = (sum - s * sq) / n;
      if (lo > 0) {  // the min is pinned at its bound
        lo = 0;
        s = sxq / sqq;
      }
    } else {  // all codes equal c: x ~= lo + s c is underdetermined; the min takes what it can
      lo = std::min(sum / n, 0.0);
      s = sq > 0 ? (sum - n * lo) / sq : 0;
    }
    if (!(s >= 0)) {
      s = 0;
      lo = std::min(sum / n, 0.0);
    }
    // sum (x - lo - s q)^2, expanded.
    const double err =
        sxx - 2 * lo * sum - 2 * s * sxq + n * lo * lo + 2 * lo * s * sq + s * s * sqq;
    if (!(err < best_err)) return false;
    best_err = err;
    *s_out = s;
    *lo_out = lo;
    std::copy(cand, cand + n, q);
    return true;
  };
  for (int k = 0; k < kSearchSteps; ++k) {
    const double f = 0.6 + 0.6 * k / (kSearchSteps - 1);
    const double iscale = qmax * f / range;
    try_codes([&](double v) { return RoundClamp((v - lo0) * iscale, 0, qmax); });
  }
  for (int iter = 0; iter < 4 && *s_out > 0; ++iter) {
    const double inv = 1.0 / *s_out, lo = *lo_out;
    if (!try_codes([&](double v) { return RoundClamp((v - lo) * inv, 0, qmax); })) break;
  }
}

// ---- Super-blocks with a scale and a min per sub-block (Q2_K, Q4_K, Q5_K) ----

struct MinLayout {
  int n_sub;     // sub-blocks per super-block
  int sub_len;   // values per sub-block
  int qmax;      // value codes are 0..qmax
  int code_max;  // scale and min codes are 0..code_max
};

struct MinCodes {
  uint16_t d = 0, dmin = 0;  // f16 bits
  int sc[16] = {};
  int m[16] = {};
  int q[kQK_K] = {};
};

// Re-rounds one sub-block's values for fixed scale/min codes; returns the squared error of the
// values the dequantizer will produce (x = d*sc*q - dmin*m, evaluated in f32 like it).
double AssignMinSub(const float* x, const MinLayout& L, float d, float dmin, int sc, int m,
                    int* q) {
  const float dl = d * static_cast<float>(sc);
  const float ml = dmin * static_cast<float>(m);
  const double inv = dl != 0 ? 1.0 / dl : 0.0;
  double err = 0;
  for (int l = 0; l < L.sub_len; ++l) {
    q[l] = RoundClamp((static_cast<double>(x[l]) + ml) * inv, 0, L.qmax);
    const float y = dl * static_cast<float>(q[l]) - ml;
    const double e = static_cast<double>(y) - x[l];
    err += e * e;
  }
  return err;
}

// Stage 3 for one sub-block: the best codes near sc_real/d and m_real/dmin. For each scale code
// the min code is also moved towards the least-squares min of the re-rounded values (a few
// alternations), since a sub-block's own best min can sit many min codes away from m_real when
// the min is coarse relative to the step.
double RefineMinSub(const float* x, const MinLayout& L, float d, float dmin, double sc_real,
                    double m_real, int* sc_out, int* m_out, int* q_out) {
  const int sc0 = d != 0 ? RoundClamp(sc_real / d, 0, L.code_max) : 0;
  const int m0 = dmin != 0 ? RoundClamp(m_real / dmin, 0, L.code_max) : 0;
  double best = std::numeric_limits<double>::infinity();
  int q[32];
  for (int sc = std::max(0, sc0 - kScaleReach); sc <= std::min(L.code_max, sc0 + kScaleReach);
       ++sc) {
    int m_centre = m0;
    for (int round = 0; round < kMinRounds; ++round) {
      double best_here = std::numeric_limits<double>::infinity();
      int best_m = m_centre;
      const int reach = round == 0 ? 2 : 1;
      for (int m = std::max(0, m_centre - reach); m <= std::min(L.code_max, m_centre + reach);
           ++m) {
        const double err = AssignMinSub(x, L, d, dmin, sc, m, q);
        if (err < best_here) {
          best_here = err;
          best_m = m;
        }
        if (err < best) {
          best = err;
          *sc_out = sc;
          *m_out = m;
          std::copy(q, q + L.sub_len, q_out);
        }
      }
      if (dmin == 0) break;
      // The min that fits the codes of best_m exactly: mean of (d*sc*q - x).
      AssignMinSub(x, L, d, dmin, sc, best_m, q);
      const double dl = static_cast<double>(d * static_cast<float>(sc));
      double ml = 0;
      for (int l = 0; l < L.sub_len; ++l) ml += dl * q[l] - x[l];
      const int next = RoundClamp(ml / L.sub_len / dmin, 0, L.code_max);
      if (next == best_m || next == m_centre) break;
      m_centre = next;
    }
  }
  return best;
}

// All codes of one super-block given the f16 scales: stage 3's per-sub-block search.
double RefineMinBlock(const float* x, const MinLayout& L, uint16_t d_bits, uint16_t dmin_bits,
                      const double* sc_real, const double* m_real, MinCodes* c) {
  c->d = d_bits;
  c->dmin = dmin_bits;
  const float d = F16ToF32(d_bits), dmin = F16ToF32(dmin_bits);
  double err = 0;
  for (int j = 0; j < L.n_sub; ++j) {
    err += RefineMinSub(x + j * L.sub_len, L, d, dmin, sc_real[j], m_real[j], &c->sc[j], &c->m[j],
                        c->q + j * L.sub_len);
  }
  return err;
}

void QuantizeMinBlock(const float* x, const MinLayout& L, MinCodes* out) {
  double xs[32];
  int q[32];
  double sc_real[16], m_real[16], sc_w[16];
  for (int j = 0; j < L.n_sub; ++j) {
    for (int l = 0; l < L.sub_len; ++l) xs[l] = x[j * L.sub_len + l];
    double s, lo;
    FitScaleMin(xs, L.sub_len, L.qmax, &s, &lo, q);
    sc_real[j] = s;
    m_real[j] = -lo;
    double qq = 0;
    for (int l = 0; l < L.sub_len; ++l) qq += static_cast<double>(q[l]) * q[l];
    sc_w[j] = std::max(qq, 1.0);
  }
  int codes[16];
  const double d = FitScale(sc_real, sc_w, L.n_sub, 0, L.code_max, codes);
  const double dmin = FitScale(m_real, nullptr, L.n_sub, 0, L.code_max, codes);

  MinCodes best;
  double best_err = RefineMinBlock(x, L, ScaleToF16(d), ScaleToF16(dmin), sc_real, m_real, &best);

  // Re-fit d and dmin over the whole block for the chosen codes: x ~= d * (sc q) - dmin * m.
  for (int iter = 0; iter < kRefitRounds; ++iter) {
    double saa = 0, sab = 0, sbb = 0, sxa = 0, sxb = 0;
    for (int j = 0; j < L.n_sub; ++j) {
      const double b = -static_cast<double>(best.m[j]);
      for (int l = 0; l < L.sub_len; ++l) {
        const double a = static_cast<double>(best.sc[j]) * best.q[j * L.sub_len + l];
        const double xv = x[j * L.sub_len + l];
        saa += a * a;
        sab += a * b;
        sbb += b * b;
        sxa += xv * a;
        sxb += xv * b;
      }
    }
    const double det = saa * sbb - sab * sab;
    double nd, nm;
    if (det > 0) {
      nd = (sxa * sbb - sxb * sab) / det;
      nm = (saa * sxb - sab * sxa) / det;
    } else if (saa > 0) {  // no mins in use
      nd = sxa / saa;
      nm = F16ToF32(best.dmin);
    } else {
      break;
    }
    // The codes were chosen for the old scales; rescale the real targets to the new ones so the
    // search stays centred on the same codes.
    const float od = F16ToF32(best.d), om = F16ToF32(best.dmin);
    const uint16_t nd_bits = ScaleToF16(nd), nm_bits = ScaleToF16(nm);
    double sc_t[16], m_t[16];
    for (int j = 0; j < L.n_sub; ++j) {
      sc_t[j] = static_cast<double>(best.sc[j]) * od;
      m_t[j] = static_cast<double>(best.m[j]) * om;
    }
    MinCodes trial;
    const double err = RefineMinBlock(x, L, nd_bits, nm_bits, sc_t, m_t, &trial);
    if (!(err < best_err)) break;
    best_err = err;
    best = trial;
  }
  *out = best;
}

// ---- Super-blocks with one signed scale per sub-block (Q3_K, Q6_K) ----

struct SymLayout {
  int qmin, qmax;          // value codes
  int code_min, code_max;  // sub-block scale codes
};
constexpr int kSymSubs = 16, kSymSubLen = 16;

struct SymCodes {
  uint16_t d = 0;
  int sc[kSymSubs] = {};
  int q[kQK_K] = {};
};

double RefineSymBlock(const float* x, const SymLayout& L, uint16_t d_bits, const double* sc_real,
                      SymCodes* c) {
  c->d = d_bits;
  const float d = F16ToF32(d_bits);
  double total = 0;
  int q[kSymSubLen];
  for (int j = 0; j < kSymSubs; ++j) {
    const float* xs = x + j * kSymSubLen;
    const int sc0 = d != 0 ? RoundClamp(sc_real[j] / d, L.code_min, L.code_max) : 0;
    double best = std::numeric_limits<double>::infinity();
    for (int sc = std::max(L.code_min, sc0 - kScaleReach);
         sc <= std::min(L.code_max, sc0 + kScaleReach); ++sc) {
      const float dl = d * static_cast<float>(sc);
      const double inv = dl != 0 ? 1.0 / dl : 0.0;
      double err = 0;
      for (int l = 0; l < kSymSubLen; ++l) {
        q[l] = RoundClamp(static_cast<double>(xs[l]) * inv, L.qmin, L.qmax);
        const double e = static_cast<double>(dl * static_cast<float>(q[l])) - xs[l];
        err += e * e;
      }
      if (err < best) {
        best = err;
        c->sc[j] = sc;
        std::copy(q, q + kSymSubLen, c->q + j * kSymSubLen);
      }
    }
    total += best;
  }
  return total;
}

void QuantizeSymBlock(const float* x, const SymLayout& L, SymCodes* out) {
  double xs[kSymSubLen];
  int q[kSymSubLen];
  double sc_real[kSymSubs], sc_w[kSymSubs];
  for (int j = 0; j < kSymSubs; ++j) {
    for (int l = 0; l < kSymSubLen; ++l) xs[l] = x[j * kSymSubLen + l];
    sc_real[j] = FitScale(xs, nullptr, kSymSubLen, L.qmin, L.qmax, q);
    double qq = 0;
    for (int l = 0; l < kSymSubLen; ++l) qq += static_cast<double>(q[l]) * q[l];
    sc_w[j] = std::max(qq, 1.0);
  }
  int codes[kSymSubs];
  const double d = FitScale(sc_real, sc_w, kSymSubs, L.code_min, L.code_max, codes);

  SymCodes best;
  double best_err = RefineSymBlock(x, L, ScaleToF16(d), sc_real, &best);
  for (int iter = 0; iter < kRefitRounds; ++iter) {
    double saa = 0, sxa = 0;
    for (int i = 0; i < kQK_K; ++i) {
      const double a = static_cast<double>(best.sc[i / kSymSubLen]) * best.q[i];
      saa += a * a;
      sxa += static_cast<double>(x[i]) * a;
    }
    if (!(saa > 0)) break;
    const float od = F16ToF32(best.d);
    double sc_t[kSymSubs];
    for (int j = 0; j < kSymSubs; ++j) sc_t[j] = static_cast<double>(best.sc[j]) * od;
    SymCodes trial;
    const double err = RefineSymBlock(x, L, ScaleToF16(sxa / saa), sc_t, &trial);
    if (!(err < best_err)) break;
    best_err = err;
    best = trial;
  }
  *out = best;
}

// Q4_K / Q5_K: eight 6-bit scales and mins in 12 bytes (the inverse of GetScaleMinK4 in
// quant_kquants.cc).
void PackScaleMinK4(const int* sc, const int* m, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
  }
}

}  // namespace

void QuantizeRowQ2_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ2_K*>(dst);
  constexpr MinLayout kLayout{16, 16, 3, 15};
  MinCodes c;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    QuantizeMinBlock(src + i * kQK_K, kLayout, &c);
    BlockQ2_K& b = blocks[i];
    std::memset(&b, 0, sizeof(b));
    b.d = c.d;
    b.dmin = c.dmin;
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>(c.sc[j] | (c.m[j] << 4));
    // Value 128*h + 32*s + l sits in qs[32*h + l] at bit 2*s.
    for (int v = 0; v < kQK_K; ++v) {
      const int h = v / 128, s = (v % 128) / 32, l = v % 32;
      b.qs[32 * h + l] |= static_cast<uint8_t>(c.q[v] << (2 * s));
    }
  }
}

void QuantizeRowQ3_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ3_K*>(dst);
  constexpr SymLayout kLayout{-4, 3, -32, 31};
  SymCodes c;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    QuantizeSymBlock(src + i * kQK_K, kLayout, &c);
    BlockQ3_K& b = blocks[i];
    std::memset(&b, 0, sizeof(b));
    b.d = c.d;
    for (int j = 0; j < 16; ++j) {
      const int u = c.sc[j] + 32;  // 0..63
      b.scales[j % 8] |= static_cast<uint8_t>((u & 0x0f) << (j < 8 ? 0 : 4));
      b.scales[8 + j % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (j / 4)));
    }
    // Stored u = q + 4: low two bits as Q2_K, the third in hmask[l] bit 4*h + s.
    for (int v = 0; v < kQK_K; ++v) {
      const int h = v / 128, s = (v % 128) / 32, l = v % 32;
      const int u = c.q[v] + 4;
      b.qs[32 * h + l] |= static_cast<uint8_t>((u & 3) << (2 * s));
      if (u & 4) b.hmask[l] |= static_cast<uint8_t>(1 << (4 * h + s));
    }
  }
}

void QuantizeRowQ4_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4_K*>(dst);
  constexpr MinLayout kLayout{8, 32, 15, 63};
  MinCodes c;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    QuantizeMinBlock(src + i * kQK_K, kLayout, &c);
    BlockQ4_K& b = blocks[i];
    b.d = c.d;
    b.dmin = c.dmin;
    PackScaleMinK4(c.sc, c.m, b.scales);
    // qs[32*p + l]: value 64*p + l in the low nibble, 64*p + 32 + l in the high one.
    for (int p = 0; p < 4; ++p) {
      for (int l = 0; l < 32; ++l) {
        b.qs[32 * p + l] = static_cast<uint8_t>(c.q[64 * p + l] | (c.q[64 * p + 32 + l] << 4));
      }
    }
  }
}

void QuantizeRowQ5_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_K*>(dst);
  constexpr MinLayout kLayout{8, 32, 31, 63};
  MinCodes c;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    QuantizeMinBlock(src + i * kQK_K, kLayout, &c);
    BlockQ5_K& b = blocks[i];
    std::memset(&b, 0, sizeof(b));
    b.d = c.d;
    b.dmin = c.dmin;
    PackScaleMinK4(c.sc, c.m, b.scales);
    // As Q4_K for the low four bits; the fifth of value 64*p + l is qh[l] bit 2p, of
    // 64*p + 32 + l bit 2p + 1.
    for (int p = 0; p < 4; ++p) {
      for (int l = 0; l < 32; ++l) {
        const int lo = c.q[64 * p + l], hi = c.q[64 * p + 32 + l];
        b.qs[32 * p + l] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
        b.qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * p)) | ((hi >> 4) << (2 * p + 1)));
      }
    }
  }
}

void QuantizeRowQ6_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ6_K*>(dst);
  constexpr SymLayout kLayout{-32, 31, -128, 127};
  SymCodes c;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    QuantizeSymBlock(src + i * kQK_K, kLayout, &c);
    BlockQ6_K& b = blocks[i];
    std::memset(&b, 0, sizeof(b));
    b.d = c.d;
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(c.sc[j]);
    // Stored u = q + 32. In half h, the four values 128h + 32k + l (k = 0..3) share qh[32h + l]
    // (two bits each at shift 2k); k = 0, 1 take the low nibbles of ql[64h + l], ql[64h + 32 + l]
    // and k = 2, 3 the high nibbles of the same bytes.
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        int u[4];
        for (int k = 0; k < 4; ++k) u[k] = c.q[128 * h + 32 * k + l] + 32;
        b.ql[64 * h + l] = static_cast<uint8_t>((u[0] & 0x0f) | ((u[2] & 0x0f) << 4));
        b.ql[64 * h + 32 + l] = static_cast<uint8_t>((u[1] & 0x0f) | ((u[3] & 0x0f) << 4));
        b.qh[32 * h + l] = static_cast<uint8_t>((u[0] >> 4) | ((u[1] >> 4) << 2) |
                                                ((u[2] >> 4) << 4) | ((u[3] >> 4) << 6));
      }
    }
  }
}

}  // namespace weir
