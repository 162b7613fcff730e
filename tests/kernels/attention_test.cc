#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/isa.h"
#include "kernels/kernel_test_util.h"
#include "tensor/quantize.h"

namespace weir::kernels {
namespace {

using testing::RandomFloats;

// A ring of `rows` rows of n_kv heads of head_dim values in `type`, filled from random floats.
struct AttnCache {
  std::vector<uint8_t> bytes;
  KvRows rows;
  // tiled: blocks of 16 positions (float types; the ring rounded up to 16).
  AttnCache(std::mt19937& rng, DType type, int n_kv, int head_dim, int ring, float range, bool tiled = false) {
    if (tiled) ring = (ring + 15) / 16 * 16;
    const size_t head = RowBytes(type, head_dim);
    bytes.assign(head * static_cast<size_t>(n_kv) * static_cast<size_t>(ring), 0);
    rows = KvRows{bytes.data(), type, head * static_cast<size_t>(n_kv), head, ring, tiled};
    for (int p = 0; p < ring; ++p) {
      for (int h = 0; h < n_kv; ++h) {
        std::vector<float> x = RandomFloats(rng, head_dim, -range, range);
        WriteKvHead(rows, bytes.data(), p, h, head_dim, x.data());
      }
    }
  }
};

struct AttnCase {
  DType k, v;
  int head_dim;
  bool tiled = false;  // keys in blocks of 16 positions
};

const AttnCase kAttnCases[] = {
    {DType::kF32, DType::kF32, 64},   {DType::kF16, DType::kF16, 64},
    {DType::kBF16, DType::kBF16, 32}, {DType::kQ8_0, DType::kQ8_0, 64},
    {DType::kQ4_0, DType::kQ4_0, 128}, {DType::kQ5_0, DType::kQ5_0, 64},
    {DType::kQ8_0, DType::kF16, 64},  {DType::kF16, DType::kQ4_0, 256},
    {DType::kQ4_K, DType::kQ6_K, 256},
    {DType::kF16, DType::kF16, 64, true}, {DType::kF32, DType::kQ8_0, 32, true},
    {DType::kBF16, DType::kF16, 256, true},
};

// The queries of a prefill call of n tokens at positions start.. of a GQA group, over a cache
// whose ring holds `ring` rows; window > 0: a sliding-window layer.
std::vector<AttnQuery> AttnQueries(const std::vector<float>& q, const KvRows* k, const KvRows* v,
                               int kv_head, int group, int n, int start, int window, int head_dim,
                               std::vector<float>* out) {
  std::vector<AttnQuery> qs;
  out->assign(static_cast<size_t>(n * group * head_dim), 0.0f);
  for (int t = 0; t < n; ++t) {
    const int pos = start + t;
    const int first = window > 0 ? std::max(0, pos + 1 - window) : 0;
    for (int g = 0; g < group; ++g) {
      const size_t i = static_cast<size_t>(t * group + g);
      qs.push_back({q.data() + i * head_dim, k, v, kv_head, first, pos, out->data() + i * head_dim});
    }
  }
  return qs;
}

// Every path against the definition (ref::Attend): the scores are the same row products, so the
// differences are the vector exponential (relative error < 1e-6), the f32 sums of the segment
// states and their merge: bounded by 2e-4 of the values' range.
TEST(AttentionTest, MatchesReferenceForEveryTypeAndPath) {
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (const AttnCase& c : kAttnCases) {
      for (int window : {0, 40}) {
        for (float softcap : {0.0f, 30.0f}) {
          std::mt19937 rng(7 + static_cast<unsigned>(c.head_dim) + static_cast<unsigned>(window));
          const int ctx = 700, n = 9, start = 600, group = 3, n_kv = 2;
          const int ring = window > 0 ? window + n - 1 : ctx;
          AttnCache k(rng, c.k, n_kv, c.head_dim, ring, 1.0f, c.tiled), v(rng, c.v, n_kv, c.head_dim, k.rows.ring, 2.0f);
          std::vector<float> q = RandomFloats(rng, static_cast<int64_t>(n) * group * c.head_dim, -2, 2);
          std::vector<float> got, want;
          auto qs = AttnQueries(q, &k.rows, &v.rows, 1, group, n, start, window, c.head_dim, &got);
          auto rs = AttnQueries(q, &k.rows, &v.rows, 1, group, n, start, window, c.head_dim, &want);
          AttnWorkspace ws;
          ASSERT_TRUE(ws.Init(c.head_dim, ctx, static_cast<int>(qs.size()), 128, 1).ok());
          const AttnShape shape{c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim)), softcap};
          Attend(qs, shape, &ws, nullptr);
          ref::Attend(rs, shape);
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_NEAR(got[i], want[i], 4e-4)
                << IsaName(isa) << " " << DTypeName(c.k) << "/" << DTypeName(c.v) << " window "
                << window << " softcap " << softcap << " i " << i;
          }
        }
      }
    }
  }
}

// Long contexts are cut into segments (more than 256 positions each past 8192) and merged: still
// the definition.
TEST(AttentionTest, LongContextSegmentsMergeToTheReference) {
  std::mt19937 rng(5);
  const int ctx = 20000, hd = 64;
  ASSERT_GT(AttnSegmentFor(ctx), 256);
  AttnCache k(rng, DType::kF16, 1, hd, ctx, 1.0f, true), v(rng, DType::kQ8_0, 1, hd, ctx, 1.0f);
  std::vector<float> q = RandomFloats(rng, 4 * hd, -3, 3);
  std::vector<float> got, want;
  auto qs = AttnQueries(q, &k.rows, &v.rows, 0, 4, 1, ctx - 1, 0, hd, &got);
  auto rs = AttnQueries(q, &k.rows, &v.rows, 0, 4, 1, ctx - 1, 0, hd, &want);
  AttnWorkspace ws;
  ASSERT_TRUE(ws.Init(hd, ctx, 4, 128, 2).ok());
  ThreadPool pool(2);
  Attend(qs, AttnShape{hd, 0.125f, 0.0f}, &ws, &pool);
  ref::Attend(rs, AttnShape{hd, 0.125f, 0.0f});
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-4) << i;
}

// A query's result does not depend on the queries computed with it or on the threads: each query
// alone (decode) gives the bits it gets inside a prefill block, on 1 or 2 threads, on every path.
// This is what keeps speculative verification exact (docs/speculative.md).
TEST(AttentionTest, QueryAloneEqualsQueryInBlockBitwise) {
  ThreadPool pool(2);
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (const AttnCase& c : kAttnCases) {
      for (int window : {0, 100}) {
        std::mt19937 rng(11);
        const int ctx = 1500, n = 20, start = 1300, group = 4;
        const int ring = window > 0 ? window + n - 1 : ctx;
        AttnCache k(rng, c.k, 1, c.head_dim, ring, 1.0f, c.tiled), v(rng, c.v, 1, c.head_dim, k.rows.ring, 1.0f);
        std::vector<float> q = RandomFloats(rng, static_cast<int64_t>(n) * group * c.head_dim, -2, 2);
        std::vector<float> block, alone;
        auto qs = AttnQueries(q, &k.rows, &v.rows, 0, group, n, start, window, c.head_dim, &block);
        auto single = AttnQueries(q, &k.rows, &v.rows, 0, group, n, start, window, c.head_dim, &alone);
        AttnWorkspace ws;
        ASSERT_TRUE(ws.Init(c.head_dim, ctx, static_cast<int>(qs.size()), 128, 2).ok());
        const AttnShape shape{c.head_dim, 0.1f, 0.0f};
        Attend(qs, shape, &ws, &pool);
        for (const AttnQuery& one : single) Attend(std::span<const AttnQuery>(&one, 1), shape, &ws, nullptr);
        ASSERT_EQ(0, std::memcmp(block.data(), alone.data(), block.size() * sizeof(float)))
            << IsaName(isa) << " " << DTypeName(c.k) << "/" << DTypeName(c.v) << " window " << window;
      }
    }
  }
}

// Gemma 2's soft-cap, by hand: q.k = {2, -1, 6, 0}, scale 0.5 gives s = {1, -0.5, 3, 0}; cap 2
// gives 2 tanh(s / 2) = {0.924234, -0.489837, 1.810297, 0}, whose softmax (exp = {2.51993,
// 0.61272, 6.11213, 1}, sum 10.24478) is below. Without the cap the weights are softmax(s), and
// the largest score takes 0.82 instead of 0.60. The values are one-hot, so out = the weights.
TEST(AttentionTest, ScaleThenSoftCapThenSoftmaxByHand) {
  const int hd = 32;
  for (Isa isa : SupportedIsas()) {
    ScopedIsaOverride use(isa);
    for (bool tiled : {false, true}) {
      const float dots[4] = {2, -1, 6, 0};
      std::vector<uint8_t> kbytes(16 * hd * 4, 0), vbytes(16 * hd * 4, 0);
      const KvRows k{kbytes.data(), DType::kF32, hd * 4, hd * 4, 16, tiled};
      const KvRows v{vbytes.data(), DType::kF32, hd * 4, hd * 4, 16, false};
      for (int p = 0; p < 4; ++p) {
        std::vector<float> key(hd, 0.0f), value(hd, 0.0f);
        key[0] = dots[p];
        value[static_cast<size_t>(p)] = 1.0f;
        WriteKvHead(k, kbytes.data(), p, 0, hd, key.data());
        WriteKvHead(v, vbytes.data(), p, 0, hd, value.data());
      }
      std::vector<float> q(hd, 0.0f), capped(hd), plain(hd);
      q[0] = 1.0f;
      AttnWorkspace ws;
      ASSERT_TRUE(ws.Init(hd, 16, 1, 8, 1).ok());
      const AttnQuery qc{q.data(), &k, &v, 0, 0, 3, capped.data()}, qp{q.data(), &k, &v, 0, 0, 3, plain.data()};
      Attend(std::span<const AttnQuery>(&qc, 1), AttnShape{hd, 0.5f, 2.0f}, &ws, nullptr);
      Attend(std::span<const AttnQuery>(&qp, 1), AttnShape{hd, 0.5f, 0.0f}, &ws, nullptr);  // 0 = no cap
      const double want_capped[] = {0.24596943, 0.05980777, 0.59661348, 0.09760932};
      const double want_plain[] = {0.11135776, 0.02484727, 0.82282873, 0.04096623};
      for (int i = 0; i < 4; ++i) {
        EXPECT_NEAR(capped[static_cast<size_t>(i)], want_capped[i], 1e-6) << IsaName(isa) << " " << i;
        EXPECT_NEAR(plain[static_cast<size_t>(i)], want_plain[i], 1e-6) << IsaName(isa) << " " << i;
      }
    }
  }
}

TEST(AttentionTest, SegmentSizes) {
  EXPECT_EQ(AttnSegmentFor(1), 256);
  EXPECT_EQ(AttnSegmentFor(8192), 256);
  EXPECT_EQ(AttnSegmentFor(8193), 320);
  EXPECT_EQ(AttnSegmentFor(32768), 1024);
  EXPECT_EQ(AttnSegmentFor(1 << 20) % 64, 0);
  EXPECT_LE((1 << 20) / AttnSegmentFor(1 << 20), 32);
}

}  // namespace
}  // namespace weir::kernels
