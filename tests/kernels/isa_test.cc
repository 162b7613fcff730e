#include "kernels/isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/gather.h"
#include "kernels/kernel_test_util.h"
#include "kernels/matvec.h"
#include "kernels/ops.h"

// Counts heap allocations in this test binary, to check that the kernels do not allocate once
// warm. Only the count is new; memory still comes from malloc.
namespace {
std::atomic<long> g_allocations{0};
}  // namespace

namespace {
void* CountedAlloc(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
}  // namespace

// Every replaceable non-aligned form, so new and delete always pair up (malloc/free).
void* operator new(size_t n) {
  if (void* p = CountedAlloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  if (void* p = CountedAlloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, const std::nothrow_t&) noexcept { return CountedAlloc(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return CountedAlloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace weir::kernels {
namespace {

TEST(IsaTest, NamesRoundTrip) {
  for (Isa isa : {Isa::kScalar, Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    ASSERT_EQ(ParseIsa(IsaName(isa)), isa);
  }
  EXPECT_FALSE(ParseIsa("avx3").has_value());
  EXPECT_FALSE(ParseIsa("").has_value());
}

TEST(IsaTest, ScalarAndPortableAlwaysSupported) {
  std::vector<Isa> s = SupportedIsas();
  ASSERT_GE(s.size(), 2u);
  EXPECT_EQ(s[0], Isa::kScalar);
  EXPECT_EQ(s[1], Isa::kPortable);
  EXPECT_TRUE(IsaSupported(BestIsa()));
  if (IsaSupported(Isa::kAvx512)) {
    EXPECT_TRUE(IsaSupported(Isa::kAvx2));
  }
}

TEST(IsaTest, OverrideNestsAndRestores) {
  const Isa before = ActiveIsa();
  {
    ScopedIsaOverride a(Isa::kScalar);
    EXPECT_EQ(ActiveIsa(), Isa::kScalar);
    {
      ScopedIsaOverride b(Isa::kPortable);
      EXPECT_EQ(ActiveIsa(), Isa::kPortable);
    }
    EXPECT_EQ(ActiveIsa(), Isa::kScalar);
  }
  EXPECT_EQ(ActiveIsa(), before);
}

TEST(IsaTest, EnvironmentValueIsValidated) {
  const char* old = std::getenv("WEIR_KERNELS");
  std::string saved = old ? old : "";
  setenv("WEIR_KERNELS", "scalar", 1);
  auto r = IsaFromEnv();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(**r, Isa::kScalar);
  setenv("WEIR_KERNELS", "sse9", 1);
  r = IsaFromEnv();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sse9"), std::string::npos);
  setenv("WEIR_KERNELS", "", 1);
  r = IsaFromEnv();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  if (old) {
    setenv("WEIR_KERNELS", saved.c_str(), 1);
  } else {
    unsetenv("WEIR_KERNELS");
  }
}

// Once warm, a decode step's kernels allocate nothing (on the caller or in the pool).
TEST(IsaTest, KernelsDoNotAllocateOnceWarm) {
  std::mt19937 rng(31);
  ThreadPool pool(2);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (DType t : testing::AllDTypes()) {
      testing::Weights w = testing::RandomWeights(rng, t, 64, 256);
      std::vector<float> x = testing::RandomFloats(rng, 256), y(256), scores(256);
      std::vector<int32_t> idx = {1, 5, 9, 30, 31, 32, 60};
      std::vector<int32_t> top(256);
      auto step = [&] {
        MatVec(w.view(), x.data(), y.data(), &pool);
        MatMul(w.view(), x.data(), 1, y.data(), &pool);
        GatherMatVecRows(w.view(), idx.data(), 7, x.data(), y.data(), &pool);
        GatherMatVecCols(w.view(), idx.data(), 7, x.data(), y.data(), &pool);
        RmsNorm(y.data(), x.data(), x.data(), 256, 1e-5f);
        SiluMul(y.data(), x.data(), 256);
        Softmax(y.data(), 256);
        TopK(x.data(), 256, 50, top.data());
      };
      step();
      const long before = g_allocations.load();
      for (int i = 0; i < 3; ++i) step();
      EXPECT_EQ(g_allocations.load() - before, 0) << IsaName(isa) << " " << DTypeName(t);
    }
  }
}

}  // namespace
}  // namespace weir::kernels
