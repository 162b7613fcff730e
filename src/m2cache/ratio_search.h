// The offline neuron-ratio search of M2Cache (paper 004 §5.2, Algorithm 1). A budget fixes the
// weight bytes one token may read from each layer's MLP, written as the fraction B of the layer's
// neurons that fit at the low precision. With n = bytes(high neuron) / bytes(low neuron), every
// (r_high, r_low) with r_low + n · r_high = B costs the same; the search walks r_high up from 0
// in steps of s (r_low = B - n · r_high) while r_low >= 0, scores each pair with UQEst (the
// entropy of the model's predicted distributions over generated text, lower = more certain) and
// keeps the lowest. Unlike the listing, the walk starts at r_high = 0 (uniform low precision) and
// ends at r_low = 0 (uniform high precision), so both uniform mixes are candidates and the table
// shows them beside the mixes.
#pragma once

#include <functional>
#include <vector>

#include "base/status.h"

namespace weir::m2cache {

struct RatioPoint {
  double r_high = 0, r_low = 0;
  double uq = 0;  // the score (filled by Search)
};

// The candidates for budget B (0 < B <= 1 as a fraction of neurons at low precision), step s > 0
// and byte ratio n >= 1: r_high = 0, s, 2s, ... while B - n·r_high >= 0, then r_low = 0 exactly.
// r_low is capped at 1 - r_high (no more neurons than the layer has).
std::vector<RatioPoint> RatioCandidates(double budget, double step, double byte_ratio);

// Scores every candidate with `uq` and returns the index of the lowest score (the first on a tie).
Result<size_t> SearchRatios(std::vector<RatioPoint>* points,
                            const std::function<Result<double>(const RatioPoint&)>& uq);

}  // namespace weir::m2cache
