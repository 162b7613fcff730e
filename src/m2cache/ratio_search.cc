#include "m2cache/ratio_search.h"

#include <algorithm>
#include <cmath>

namespace weir::m2cache {

std::vector<RatioPoint> RatioCandidates(double budget, double step, double byte_ratio) {
  std::vector<RatioPoint> out;
  if (!(budget > 0 && step > 0 && byte_ratio >= 1)) return out;
  for (int i = 0;; ++i) {
    const double r_high = i * step;
    const double r_low = budget - byte_ratio * r_high;
    if (r_low < -1e-12) break;
    out.push_back({r_high, std::min(std::max(r_low, 0.0), 1.0 - r_high)});
    if (r_high >= 1.0) break;
  }
  const double last_high = std::min(budget / byte_ratio, 1.0);
  if (out.empty() || std::fabs(out.back().r_high - last_high) > 1e-9) out.push_back({last_high, 0.0});
  return out;
}

Result<size_t> SearchRatios(std::vector<RatioPoint>* points,
                            const std::function<Result<double>(const RatioPoint&)>& uq) {
  if (points->empty()) return Status::InvalidArgument("m2cache: no ratio to search (budget or step out of range)");
  size_t best = 0;
  for (size_t i = 0; i < points->size(); ++i) {
    WEIR_ASSIGN_OR_RETURN((*points)[i].uq, uq((*points)[i]));
    if ((*points)[i].uq < (*points)[best].uq) best = i;
  }
  return best;
}

}  // namespace weir::m2cache
