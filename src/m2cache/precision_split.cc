#include "m2cache/precision_split.h"

#include <algorithm>
#include <numeric>

#include "base/check.h"

namespace weir::m2cache {

void SplitByScore(std::span<const float> score, int64_t n_high, int64_t n_low, std::vector<int32_t>* order,
                  std::vector<int32_t>* high, std::vector<int32_t>* low) {
  const int64_t n = static_cast<int64_t>(score.size());
  WEIR_CHECK(n_high >= 0 && n_low >= 0 && n_high + n_low <= n);
  order->resize(static_cast<size_t>(n));
  std::iota(order->begin(), order->end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    const float sa = score[static_cast<size_t>(a)], sb = score[static_cast<size_t>(b)];
    return sa > sb || (sa == sb && a < b);
  };
  const int64_t active = n_high + n_low;
  if (active < n) std::nth_element(order->begin(), order->begin() + active, order->end(), better);
  if (n_high < active) std::nth_element(order->begin(), order->begin() + n_high, order->begin() + active, better);
  high->assign(order->begin(), order->begin() + n_high);
  low->assign(order->begin() + n_high, order->begin() + active);
  std::sort(high->begin(), high->end());
  std::sort(low->begin(), low->end());
}

}  // namespace weir::m2cache
