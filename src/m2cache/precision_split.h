// SplitByScore: the active neurons of one token, split by the predictor's score into the
// precisions they are loaded at (M2Cache §5.2, Fig. 3): the n_high best-scored neurons at the high
// precision, the next n_low at the low one, the rest skipped. Ties go to the lower index, so the
// split is a function of the scores alone. Both lists come out ascending.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace weir::m2cache {

// order: scratch of score.size() entries (reused across calls, so no allocation per token).
void SplitByScore(std::span<const float> score, int64_t n_high, int64_t n_low, std::vector<int32_t>* order,
                  std::vector<int32_t>* high, std::vector<int32_t>* low);

}  // namespace weir::m2cache
