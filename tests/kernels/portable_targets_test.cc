// The portable (Highway) path picks its instruction set at run time; on an x86 test machine that
// is AVX-512 or AVX2, so the narrower targets (SSE4, SSSE3, the 128-bit emulation that a phone's
// NEON code resembles in shape) would go untested. This test forces each target Highway built
// and checks the portable kernels on it against the references.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "hwy/targets.h"
#include "kernels/gather.h"
#include "kernels/isa.h"
#include "kernels/kernel_test_util.h"
#include "kernels/matvec.h"
#include "kernels/ops.h"

namespace weir::kernels {
namespace {

using testing::AbsDot;
using testing::AllDTypes;
using testing::EffectiveX;
using testing::IsQuantized;
using testing::kRel;
using testing::RandomFloats;
using testing::RandomWeights;
using testing::RawQuantWeights;
using testing::Weights;

class RestoreHighwayTargets {
 public:
  ~RestoreHighwayTargets() { hwy::SetSupportedTargetsForTest(0); }
};

TEST(PortableTargetsTest, EveryHighwayTargetMatchesReference) {
  RestoreHighwayTargets restore;
  ScopedIsaOverride use(Isa::kPortable);
  std::mt19937 rng(41);
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string tname = hwy::TargetName(target);
    for (DType t : AllDTypes()) {
      const std::vector<int64_t> cols_list =
          testing::ValidColsList(t, IsBlockQuantized(t) ? std::vector<int64_t>{32, 96, 4128}
                                                        : std::vector<int64_t>{7, 67, 4128});
      for (int64_t cols : cols_list) {
        const int64_t rows = 17, n = 5;
        Weights w = IsBlockQuantized(t) ? RawQuantWeights(rng, t, rows, cols)
                                        : RandomWeights(rng, t, rows, cols);
        std::vector<float> x = RandomFloats(rng, n * cols, -2, 2);
        std::vector<float> y(static_cast<size_t>(n * rows)), want(y.size());
        MatMul(w.view(), x.data(), n, y.data(), nullptr);
        ref::MatMul(w.view(), x.data(), n, want.data());
        for (int64_t tok = 0; tok < n; ++tok) {
          std::vector<float> xe = EffectiveX(t, x.data() + tok * cols, cols);
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_NEAR(y[tok * rows + r], want[tok * rows + r],
                        kRel * AbsDot(&w.values[r * cols], xe.data(), cols) + 1e-30)
                << tname << " " << DTypeName(t) << " cols " << cols << " tok " << tok;
          }
        }
        // Column form over the same bytes read as wt [rows, cols] (cols outputs).
        std::vector<int32_t> idx = {0, 2, 3, 7, 8, 9, 16};
        std::vector<float> yc(static_cast<size_t>(cols)), wc(yc.size());
        GatherMatVecCols(w.view(), idx.data(), 7, x.data(), yc.data(), nullptr);
        ref::GatherMatVecCols(w.view(), idx.data(), 7, x.data(), wc.data());
        for (int64_t j = 0; j < cols; ++j) {
          double abs_sum = 0;
          for (int32_t i : idx) abs_sum += std::fabs(x[i] * w.values[i * cols + j]);
          ASSERT_NEAR(yc[j], wc[j], kRel * abs_sum + 1e-30)
              << tname << " " << DTypeName(t) << " cols " << cols << " output " << j;
        }
      }
    }
    for (int64_t n : {7, 67}) {
      std::vector<float> a = RandomFloats(rng, n, -20, 20), b = RandomFloats(rng, n);
      std::vector<float> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      RmsNorm(got.data(), a.data(), b.data(), n, 1e-6f);
      ref::RmsNorm(want.data(), a.data(), b.data(), n, 1e-6f);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]));
      got = a;
      want = a;
      Softmax(got.data(), n);
      ref::Softmax(want.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-5 * want[i] + 1e-12);
      got = a;
      want = a;
      SiluMul(got.data(), b.data(), n);
      ref::SiluMul(want.data(), b.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]));
      got = a;
      want = a;
      GeluTanhMul(got.data(), b.data(), n);
      ref::GeluTanhMul(want.data(), b.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-30);
    }
  }
}

}  // namespace
}  // namespace weir::kernels
