#include "m2cache/low_rank_predictor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/matvec.h"
#include "tensor/quantize.h"

namespace weir::m2cache {
namespace {

// Row-major dense matrix of doubles.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  Mat(int64_t r, int64_t c) : rows(r), cols(c), v(static_cast<size_t>(r * c), 0.0) {}
  double& at(int64_t r, int64_t c) { return v[static_cast<size_t>(r * cols + c)]; }
  double at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

// C = A · B (A [m, k], B [k, n]), rows of C split over the pool.
Mat Multiply(const Mat& a, const Mat& b, ThreadPool* pool) {
  Mat c(a.rows, b.cols);
  ParallelFor(pool, static_cast<size_t>(a.rows), [&](size_t begin, size_t end, int) {
    for (size_t i = begin; i < end; ++i) {
      double* ci = &c.v[i * static_cast<size_t>(c.cols)];
      for (int64_t k = 0; k < a.cols; ++k) {
        const double aik = a.at(static_cast<int64_t>(i), k);
        const double* bk = &b.v[static_cast<size_t>(k * b.cols)];
        for (int64_t j = 0; j < b.cols; ++j) ci[j] += aik * bk[j];
      }
    }
  });
  return c;
}

Mat Transposed(const Mat& a) {
  Mat t(a.cols, a.rows);
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t c = 0; c < a.cols; ++c) t.at(c, r) = a.at(r, c);
  }
  return t;
}

// Orthonormalizes the columns of y in place (modified Gram-Schmidt, twice for stability). A
// column that vanishes (rank deficiency) is set to zero.
void Orthonormalize(Mat* y) {
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t j = 0; j < y->cols; ++j) {
      for (int64_t i = 0; i < j; ++i) {
        double dot = 0;
        for (int64_t r = 0; r < y->rows; ++r) dot += y->at(r, i) * y->at(r, j);
        for (int64_t r = 0; r < y->rows; ++r) y->at(r, j) -= dot * y->at(r, i);
      }
      double norm = 0;
      for (int64_t r = 0; r < y->rows; ++r) norm += y->at(r, j) * y->at(r, j);
      norm = std::sqrt(norm);
      const double inv = norm > 1e-300 ? 1.0 / norm : 0.0;
      for (int64_t r = 0; r < y->rows; ++r) y->at(r, j) *= inv;
    }
  }
}

// Eigen-decomposition of the symmetric c [k, k] by cyclic Jacobi rotations: eigenvalues into
// `values`, eigenvectors as the columns of the returned matrix, sorted by decreasing value.
Mat SymmetricEigen(Mat c, std::vector<double>* values) {
  const int64_t k = c.rows;
  Mat e(k, k);
  for (int64_t i = 0; i < k; ++i) e.at(i, i) = 1.0;
  for (int sweep = 0; sweep < 64; ++sweep) {
    double off = 0, diag = 0;
    for (int64_t p = 0; p < k; ++p) {
      diag += c.at(p, p) * c.at(p, p);
      for (int64_t q = p + 1; q < k; ++q) off += c.at(p, q) * c.at(p, q);
    }
    if (off <= 1e-30 * std::max(diag, 1e-300)) break;
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t q = p + 1; q < k; ++q) {
        const double apq = c.at(p, q);
        if (std::fabs(apq) < 1e-300) continue;
        const double theta = (c.at(q, q) - c.at(p, p)) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double cs = 1 / std::sqrt(t * t + 1), sn = t * cs;
        for (int64_t r = 0; r < k; ++r) {  // columns p, q of c
          const double crp = c.at(r, p), crq = c.at(r, q);
          c.at(r, p) = cs * crp - sn * crq;
          c.at(r, q) = sn * crp + cs * crq;
        }
        for (int64_t r = 0; r < k; ++r) {  // rows p, q of c
          const double cpr = c.at(p, r), cqr = c.at(q, r);
          c.at(p, r) = cs * cpr - sn * cqr;
          c.at(q, r) = sn * cpr + cs * cqr;
        }
        for (int64_t r = 0; r < k; ++r) {
          const double erp = e.at(r, p), erq = e.at(r, q);
          e.at(r, p) = cs * erp - sn * erq;
          e.at(r, q) = sn * erp + cs * erq;
        }
      }
    }
  }
  std::vector<int64_t> order(static_cast<size_t>(k));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return c.at(a, a) > c.at(b, b); });
  Mat sorted(k, k);
  values->assign(static_cast<size_t>(k), 0.0);
  for (int64_t j = 0; j < k; ++j) {
    (*values)[static_cast<size_t>(j)] = c.at(order[static_cast<size_t>(j)], order[static_cast<size_t>(j)]);
    for (int64_t r = 0; r < k; ++r) sorted.at(r, j) = e.at(r, order[static_cast<size_t>(j)]);
  }
  return sorted;
}

// Standard normal numbers from a fixed seed, the same on every platform (splitmix64 + Box-Muller).
class Gaussian {
 public:
  explicit Gaussian(uint64_t seed) : s_(seed) {}
  double Next() {
    const double u1 = (static_cast<double>(Bits() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(Bits() >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t Bits() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t s_;
};

}  // namespace

Result<LowRankPredictor> LowRankPredictor::Fit(const TensorView& gate, int rank, uint64_t seed, ThreadPool* pool,
                                               std::span<const double> second_moment) {
  if (rank < 1) return Status::InvalidArgument("m2cache: the predictor's rank must be at least 1");
  if (gate.layout != Layout::kRowMajor) return Status::InvalidArgument("m2cache: the gate weights are tiled; load them row-major");
  const int64_t m = gate.rows(), n = gate.cols();
  const int64_t r = std::min<int64_t>(rank, std::min(m, n));
  const int64_t k = std::min<int64_t>(r + 8, std::min(m, n));

  if (!second_moment.empty() && static_cast<int64_t>(second_moment.size()) != n * n) {
    return Status::InvalidArgument("m2cache: the predictor's input second moment has " +
                                   std::to_string(second_moment.size()) + " values for " + std::to_string(n) + " inputs");
  }
  Mat w(m, n);
  {
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t i = 0; i < m; ++i) {
      DequantizeRow(gate, i, row.data());
      for (int64_t j = 0; j < n; ++j) w.at(i, j) = row[static_cast<size_t>(j)];
    }
  }
  // L with C + εI = L Lᵀ (lower triangular); W is replaced by W L.
  Mat chol(n, n);
  const bool whiten = !second_moment.empty();
  if (whiten) {
    double trace = 0;
    for (int64_t j = 0; j < n; ++j) trace += second_moment[static_cast<size_t>(j * n + j)];
    const double eps = std::max(1e-6 * trace / static_cast<double>(n), 1e-30);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        double v = second_moment[static_cast<size_t>(i * n + j)] + (i == j ? eps : 0.0);
        for (int64_t k = 0; k < j; ++k) v -= chol.at(i, k) * chol.at(j, k);
        if (i == j) {
          if (!(v > 0) || !std::isfinite(v)) {
            return Status::InvalidArgument("m2cache: the input second moment is not positive definite");
          }
          chol.at(i, i) = std::sqrt(v);
        } else {
          chol.at(i, j) = v / chol.at(j, j);
        }
      }
    }
    w = Multiply(w, chol, pool);
  }
  const Mat wt = Transposed(w);
  Mat omega(n, k);
  Gaussian rng(seed);
  for (double& v : omega.v) v = rng.Next();
  Mat y = Multiply(w, omega, pool);  // [m, k], the range of W sampled
  Orthonormalize(&y);
  for (int it = 0; it < 3; ++it) {
    Mat z = Multiply(wt, y, pool);  // [n, k]
    Orthonormalize(&z);
    y = Multiply(w, z, pool);
    Orthonormalize(&y);
  }
  const Mat b = Multiply(Transposed(y), w, pool);         // [k, n] = Yᵀ W
  const Mat bbt = Multiply(b, Transposed(b), pool);       // [k, k]
  std::vector<double> values;
  const Mat e = SymmetricEigen(bbt, &values);             // B Bᵀ = E Λ Eᵀ
  // W ≈ Y Yᵀ W = Y B = (Y E)(Eᵀ B): U = (Y E)[:, :r], A = (Eᵀ B)[:r, :].
  Mat e_r(k, r);
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < r; ++j) e_r.at(i, j) = e.at(i, j);
  }
  const Mat u = Multiply(y, e_r, pool);                   // [m, r]
  Mat a = Multiply(Transposed(e_r), b, pool);             // [r, n]

  LowRankPredictor p;
  const size_t a_bytes = RowBytes(DType::kF16, n) * static_cast<size_t>(r);
  const size_t u_bytes = RowBytes(DType::kF16, r) * static_cast<size_t>(m);
  if (!p.storage_.Reset(a_bytes + u_bytes)) return Status::OutOfMemory("m2cache: cannot allocate the predictor");
  uint8_t* base = p.storage_.data<uint8_t>();
  std::vector<float> row(static_cast<size_t>(std::max(n, r)));
  if (whiten) {  // A = A' L⁻¹: solve A L = A' row by row (L lower triangular: back substitution)
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = n - 1; j >= 0; --j) {
        double v = a.at(i, j);
        for (int64_t k = j + 1; k < n; ++k) v -= a.at(i, k) * chol.at(k, j);
        a.at(i, j) = v / chol.at(j, j);
      }
    }
  }
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] = static_cast<float>(a.at(i, j));
    QuantizeRow(DType::kF16, row.data(), base + static_cast<size_t>(i) * RowBytes(DType::kF16, n), n);
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < r; ++j) row[static_cast<size_t>(j)] = static_cast<float>(u.at(i, j));
    QuantizeRow(DType::kF16, row.data(), base + a_bytes + static_cast<size_t>(i) * RowBytes(DType::kF16, r), r);
  }
  p.a_ = TensorView{DType::kF16, Shape{r, n}, base};
  p.u_ = TensorView{DType::kF16, Shape{m, r}, base + a_bytes};
  return p;
}

Result<LowRankPredictor> LowRankPredictor::FromFactors(int64_t rank, int64_t d_model, int64_t d_ff,
                                                      std::span<const uint8_t> a, std::span<const uint8_t> u) {
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  if (rank < 1 || d_model < 1 || d_ff < 1 || rank > kMaxDim || d_model > kMaxDim || d_ff > kMaxDim) {
    return Status::InvalidArgument("m2cache: predictor of rank " + std::to_string(rank) + " for d_model " +
                                   std::to_string(d_model) + ", d_ff " + std::to_string(d_ff));
  }
  const size_t a_bytes = RowBytes(DType::kF16, d_model) * static_cast<size_t>(rank);
  const size_t u_bytes = RowBytes(DType::kF16, rank) * static_cast<size_t>(d_ff);
  if (a.size() != a_bytes || u.size() != u_bytes) {
    return Status::InvalidArgument("m2cache: predictor factors of " + std::to_string(a.size()) + " and " +
                                   std::to_string(u.size()) + " bytes; rank " + std::to_string(rank) + " needs " +
                                   std::to_string(a_bytes) + " and " + std::to_string(u_bytes));
  }
  LowRankPredictor p;
  if (!p.storage_.Reset(a_bytes + u_bytes)) return Status::OutOfMemory("m2cache: cannot allocate the predictor");
  uint8_t* base = p.storage_.data<uint8_t>();
  std::memcpy(base, a.data(), a_bytes);
  std::memcpy(base + a_bytes, u.data(), u_bytes);
  p.a_ = TensorView{DType::kF16, Shape{rank, d_model}, base};
  p.u_ = TensorView{DType::kF16, Shape{d_ff, rank}, base + a_bytes};
  return p;
}

void LowRankPredictor::PredictGate(const float* x, float* t, float* g_hat, ThreadPool* pool) const {
  kernels::MatVec(a_, x, t, pool);
  kernels::MatVec(u_, t, g_hat, pool);
}

void LowRankPredictor::Score(kernels::Glu glu, const float* x, float* t, float* score, ThreadPool* pool) const {
  PredictGate(x, t, score, pool);
  const int64_t d_ff = u_.rows();
  // act(ĝ) * 1: the gated activation with an up of ones.
  for (int64_t i = 0; i < d_ff; ++i) {
    const float one = 1.0f;
    kernels::GatedActivation(glu, score + i, &one, 1);
    score[i] = std::fabs(score[i]);
  }
}

}  // namespace weir::m2cache
