// Structured pruning: removing whole attention heads and MLP neurons from a layer.
//
// Units and their parameters (hd = head_dim, dm = d_model):
//   query head h      q rows [h*hd, (h+1)*hd) and o columns [h*hd, (h+1)*hd)    2*hd*dm
//   key-value group g k and v rows [g*hd, (g+1)*hd), shared by the query heads
//                     g*G .. g*G+G-1 (G = n_head / n_head_kv)                  2*hd*dm
//   MLP neuron j      gate row j, up row j, down column j                       3*dm
// Grouped-query attention stays consistent: every kept group keeps the same number G' of query
// heads (so n_head' = n_head_kv' * G' and query head h' reads group h' / G' as in forward.cc),
// and a group is removed together with all its query heads.
//
// Importance is Wanda's metric summed over a unit's weights: a query head's is the sum of omega
// over its q rows and o columns, a group's that over its k and v rows (plus, when choosing
// which groups to keep, the G' best query heads it would keep), a neuron's that over its gate
// row, up row and down column. In composite pruning the metric is taken after the unstructured
// step, so weights already zeroed count nothing and units that lost most of their weights go
// first (Mosaic §3.2, Fig. 4).
//
// Counts: the kept configuration is the one whose parameter count is nearest to (1 - sparsity)
// of the block's (ties keep more), with at least one group, one head per group and one neuron,
// and with kept widths that are whole blocks of the o / down projections' element type (Q8_0
// and Q4_0 rows hold 32-value blocks).
//
// Thread safety: free functions; `pool` is used from the calling thread only.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "prune/projection.h"

namespace weir::prune {

struct HeadImportance {
  std::vector<double> head;   // [n_head]    q rows + o columns
  std::vector<double> group;  // [n_head_kv] k rows + v rows
};

// `L` gives the (possibly already zeroed) weights; norms[p] the input norms of projection p.
HeadImportance AttentionImportance(const LayerProjections& L,
                                   const std::array<const float*, kNumProjections>& norms,
                                   ThreadPool* pool);
std::vector<double> NeuronImportance(const LayerProjections& L,
                                     const std::array<const float*, kNumProjections>& norms,
                                     ThreadPool* pool);

struct HeadCounts {
  int n_head_kv = 0;        // groups kept
  int heads_per_group = 0;  // query heads kept per group
  int n_head() const { return n_head_kv * heads_per_group; }
};

// q, k, v and o parameters of a configuration.
int64_t AttentionParams(HeadCounts c, int head_dim, int64_t d_model);
HeadCounts ChooseHeadCounts(int n_head, int n_head_kv, int head_dim, int64_t d_model,
                            double sparsity, int o_block);
int ChooseNeuronCount(int d_ff, double sparsity, int down_block);

struct HeadSelection {
  std::vector<int> groups;  // kept key-value groups, ascending
  std::vector<int> heads;   // kept query heads, ascending (groups' heads in group order)
};
// The `counts.n_head_kv` groups with the highest importance (group + its best
// counts.heads_per_group heads), and in each the best heads. Ties keep the lower index.
HeadSelection SelectHeads(const HeadImportance& importance, int n_head, int n_head_kv,
                          HeadCounts counts);
// The `keep` most important neurons, ascending. Ties keep the lower index.
std::vector<int> SelectNeurons(std::span<const double> importance, int keep);

// Row (or column) indices of whole units of `width` each: unit u -> [u*width, (u+1)*width).
std::vector<int64_t> UnitIndices(std::span<const int> units, int width);

}  // namespace weir::prune
