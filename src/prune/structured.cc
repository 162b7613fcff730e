#include "prune/structured.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "prune/metric.h"

namespace weir::prune {

namespace {

// Per-thread partial sums of size n, folded at the end.
struct Partials {
  Partials(ThreadPool* pool, size_t n)
      : sums(static_cast<size_t>(pool ? std::max(1, pool->size()) : 1),
             std::vector<double>(n, 0.0)) {}
  std::vector<double> Fold() const {
    std::vector<double> out(sums[0].size(), 0.0);
    for (const auto& s : sums) {
      for (size_t i = 0; i < s.size(); ++i) out[i] += s[i];
    }
    return out;
  }
  std::vector<std::vector<double>> sums;
};

// Adds each row's omega sum to unit row / width.
void AddRowSums(const TensorView& w, const float* norm, int width, ThreadPool* pool,
                Partials* acc) {
  ScanRows(w, norm, pool, [&](int t, int64_t r, const float*, const float* o) {
    double s = 0;
    for (int64_t j = 0; j < w.cols(); ++j) s += o[j];
    acc->sums[static_cast<size_t>(t)][static_cast<size_t>(r / width)] += s;
  });
}

// Adds each column's omega (over all rows) to unit column / width.
void AddColumnSums(const TensorView& w, const float* norm, int width, ThreadPool* pool,
                   Partials* acc) {
  ScanRows(w, norm, pool, [&](int t, int64_t, const float*, const float* o) {
    std::vector<double>& s = acc->sums[static_cast<size_t>(t)];
    for (int64_t j = 0; j < w.cols(); ++j) s[static_cast<size_t>(j / width)] += o[j];
  });
}

// Indices of the `keep` largest scores, ascending; ties to the lower index.
std::vector<int> TopIndices(std::span<const double> score, int keep) {
  std::vector<int> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
    return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)];
  });
  idx.resize(static_cast<size_t>(std::clamp<int>(keep, 0, static_cast<int>(idx.size()))));
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace

HeadImportance AttentionImportance(const LayerProjections& L,
                                   const std::array<const float*, kNumProjections>& norms,
                                   ThreadPool* pool) {
  const int hd = L.head_dim;
  Partials heads(pool, static_cast<size_t>(L.n_head)),
      groups(pool, static_cast<size_t>(L.n_head_kv));
  AddRowSums(L[Projection::kQ], norms[static_cast<size_t>(Projection::kQ)], hd, pool, &heads);
  AddColumnSums(L[Projection::kO], norms[static_cast<size_t>(Projection::kO)], hd, pool, &heads);
  AddRowSums(L[Projection::kK], norms[static_cast<size_t>(Projection::kK)], hd, pool, &groups);
  AddRowSums(L[Projection::kV], norms[static_cast<size_t>(Projection::kV)], hd, pool, &groups);
  return {heads.Fold(), groups.Fold()};
}

std::vector<double> NeuronImportance(const LayerProjections& L,
                                     const std::array<const float*, kNumProjections>& norms,
                                     ThreadPool* pool) {
  Partials acc(pool, static_cast<size_t>(L.d_ff));
  AddRowSums(L[Projection::kGate], norms[static_cast<size_t>(Projection::kGate)], 1, pool, &acc);
  AddRowSums(L[Projection::kUp], norms[static_cast<size_t>(Projection::kUp)], 1, pool, &acc);
  AddColumnSums(L[Projection::kDown], norms[static_cast<size_t>(Projection::kDown)], 1, pool, &acc);
  return acc.Fold();
}

int64_t AttentionParams(HeadCounts c, int head_dim, int64_t d_model) {
  const int64_t unit =
      2 * int64_t{head_dim} * d_model;  // one head's q rows + o columns; one group's k + v rows
  return int64_t{c.n_head_kv} * unit + int64_t{c.n_head()} * unit;
}

HeadCounts ChooseHeadCounts(int n_head, int n_head_kv, int head_dim, int64_t d_model,
                            double sparsity, int o_block) {
  const HeadCounts full{n_head_kv, n_head / n_head_kv};
  if (!(sparsity > 0)) return full;
  const double want =
      (1 - sparsity) * static_cast<double>(AttentionParams(full, head_dim, d_model));
  HeadCounts best = full;
  double best_err = std::fabs(static_cast<double>(AttentionParams(full, head_dim, d_model)) - want);
  for (int g = n_head_kv; g >= 1; --g) {
    for (int h = full.heads_per_group; h >= 1; --h) {
      const HeadCounts c{g, h};
      if ((int64_t{c.n_head()} * head_dim) % std::max(1, o_block) != 0) continue;
      const int64_t params = AttentionParams(c, head_dim, d_model);
      const double err = std::fabs(static_cast<double>(params) - want);
      const double eps = 1e-9 * std::max(want, 1.0);
      const bool tie_more =
          std::fabs(err - best_err) <= eps && params > AttentionParams(best, head_dim, d_model);
      if (err < best_err - eps || tie_more) best = c, best_err = err;
    }
  }
  return best;
}

int ChooseNeuronCount(int d_ff, double sparsity, int down_block) {
  if (!(sparsity > 0)) return d_ff;
  const int step = std::max(1, down_block);
  const double want = (1 - sparsity) * d_ff;
  int best = d_ff;
  double best_err = std::fabs(d_ff - want);
  for (int n = (d_ff / step) * step; n >= step; n -= step) {
    const double err = std::fabs(n - want);
    if (err < best_err - 1e-9) best = n, best_err = err;
  }
  return best;
}

HeadSelection SelectHeads(const HeadImportance& imp, int n_head, int n_head_kv, HeadCounts counts) {
  const int G = n_head / n_head_kv;
  std::vector<std::vector<int>> best_heads(static_cast<size_t>(n_head_kv));
  std::vector<double> group_score(static_cast<size_t>(n_head_kv));
  for (int g = 0; g < n_head_kv; ++g) {
    std::span<const double> hs(imp.head.data() + static_cast<size_t>(g) * G,
                               static_cast<size_t>(G));
    std::vector<int> top = TopIndices(hs, counts.heads_per_group);
    double s = imp.group[static_cast<size_t>(g)];
    for (int& h : top) {
      s += hs[static_cast<size_t>(h)];
      h += g * G;
    }
    best_heads[static_cast<size_t>(g)] = std::move(top);
    group_score[static_cast<size_t>(g)] = s;
  }
  HeadSelection sel;
  sel.groups = TopIndices(group_score, counts.n_head_kv);
  for (int g : sel.groups) {
    for (int h : best_heads[static_cast<size_t>(g)]) sel.heads.push_back(h);
  }
  return sel;
}

std::vector<int> SelectNeurons(std::span<const double> importance, int keep) {
  return TopIndices(importance, keep);
}

std::vector<int64_t> UnitIndices(std::span<const int> units, int width) {
  std::vector<int64_t> out;
  out.reserve(units.size() * static_cast<size_t>(width));
  for (int u : units) {
    for (int i = 0; i < width; ++i) out.push_back(int64_t{u} * width + i);
  }
  return out;
}

}  // namespace weir::prune
