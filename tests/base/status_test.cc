#include "base/status.h"

#include <gtest/gtest.h>

#include "base/checked_math.h"
#include "base/thread_pool.h"
#include "base/units.h"

namespace weir {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument(StrFormat("odd value %d", x));
  return x / 2;
}

Status UseHalf(int x, int* out) {
  WEIR_ASSIGN_OR_RETURN(*out, Half(x));
  return Status::Ok();
}

TEST(StatusTest, ResultCarriesValueOrError) {
  int v = 0;
  EXPECT_TRUE(UseHalf(8, &v).ok());
  EXPECT_EQ(v, 4);
  Status st = UseHalf(3, &v);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.ToString(), "invalid argument: odd value 3");
  EXPECT_EQ(st.WithContext("f.gguf").message(), "f.gguf: odd value 3");
}

TEST(CheckedMathTest, DetectsOverflow) {
  uint64_t out;
  EXPECT_FALSE(CheckedAdd(~0ull, 1, &out));
  EXPECT_FALSE(CheckedMul(1ull << 40, 1ull << 40, &out));
  EXPECT_TRUE(CheckedMul(1ull << 20, 1ull << 20, &out));
  EXPECT_EQ(out, 1ull << 40);
  EXPECT_TRUE(RangeInside(10, 5, 15));
  EXPECT_FALSE(RangeInside(10, 6, 15));
  EXPECT_FALSE(RangeInside(~0ull, 2, 15));
}

TEST(UnitsTest, ParsesByteSizes) {
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("2KiB"), 2048u);
  EXPECT_EQ(*ParseBytes("1.5GiB"), 1610612736u);
  EXPECT_EQ(*ParseBytes("512m"), 512ull << 20);
  EXPECT_FALSE(ParseBytes("-1").ok());
  EXPECT_FALSE(ParseBytes("12XB").ok());
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("1e30GiB").ok());
}

TEST(ThreadPoolTest, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (size_t n : {0u, 1u, 7u, 100u, 1001u}) {
      std::vector<int> hits(n, 0);
      for (int rep = 0; rep < 3; ++rep) {
        pool.ParallelFor(n, [&](size_t b, size_t e, int) {
          for (size_t i = b; i < e; ++i) hits[i]++;
        }, 4);
      }
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i], 3) << "n=" << n << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace weir
