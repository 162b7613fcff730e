#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/check.h"
#include "kernels/internal/dispatch.h"
#include "kernels/internal/typed_dispatch.h"
#include "kernels/matvec.h"
#include "kernels/ops.h"
#include "tensor/quantize.h"
#include "tensor/tensor_view.h"

namespace weir::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The float types' value rows are widened inside the column-form kernel; the others are
// dequantized to f32 a segment at a time first (exactly, so no coefficient rounding).
bool WidenedInKernel(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

// A run of consecutive rows of the ring: positions [begin, begin + count) in rows
// [begin % ring, ...), split where the ring wraps.
template <class Fn>
void ForEachRun(int ring, int begin, int count, const Fn& fn) {
  while (count > 0) {
    const int row = begin % ring;
    const int run = std::min(count, ring - row);
    fn(begin, row, run);
    begin += run;
    count -= run;
  }
}

// Queries sharing each loaded key block and value row (the SIMD kernels' register budget).
constexpr int kKeysShared = 4;

void ScoresOfBlocks(const internal::IsaKernels& k, DType t, const uint8_t* kb, size_t stride,
                    int64_t n_blocks, int64_t hd, const float* const* q, int nq, float* const* s) {
  if (k.attn_scores16 != nullptr) {
    k.attn_scores16(t, kb, stride, n_blocks, hd, q, nq, s);
  } else {
    internal::ScalarAttnScores16(t, kb, stride, n_blocks, hd, q, nq, s);
  }
}

// Whether the path's attn_values kernel takes heads of hd values: it answers for itself (a
// call with no rows does nothing else).
bool ValuesKernelTakes(const internal::IsaKernels& k, DType t, int hd) {
  if (k.attn_values == nullptr || hd > 256) return false;
  float acc[256] = {};  // loaded and stored back unchanged: no rows
  const float* pp = acc;
  float* ap = acc;
  return k.attn_values(t, nullptr, 0, 0, hd, &pp, 1, &ap);
}

float ExpSubSum(const internal::IsaKernels& k, float* x, int64_t n, float max) {
  if (k.exp_sum != nullptr) return k.exp_sum(x, n, max);
  return internal::ScalarExpSum(x, n, max);
}

}  // namespace

void WriteKvHead(const KvRows& rows, uint8_t* data, int pos, int head, int head_dim, const float* x) {
  const size_t r = static_cast<size_t>(pos % rows.ring);
  if (!rows.tiled16) {
    QuantizeRow(rows.type, x, data + r * rows.row_bytes + static_cast<size_t>(head) * rows.head_bytes, head_dim);
    return;
  }
  const size_t elem = rows.type == DType::kF32 ? 4 : 2;
  uint8_t* block = data + (r / 16) * 16 * rows.row_bytes + static_cast<size_t>(head) * 16 * rows.head_bytes;
  for (int d = 0; d < head_dim; ++d) {
    uint8_t* e = block + (static_cast<size_t>(d) * 16 + r % 16) * elem;
    if (rows.type == DType::kF32) {
      std::memcpy(e, x + d, 4);
    } else {
      const uint16_t h = rows.type == DType::kF16 ? F32ToF16(x[d]) : F32ToBF16(x[d]);
      std::memcpy(e, &h, 2);
    }
  }
}

void ReadKvHead(const KvRows& rows, int pos, int head, int head_dim, float* out) {
  const size_t r = static_cast<size_t>(pos % rows.ring);
  if (!rows.tiled16) {
    DequantizeRow(rows.type, rows.data + r * rows.row_bytes + static_cast<size_t>(head) * rows.head_bytes, out,
                  head_dim);
    return;
  }
  const size_t elem = rows.type == DType::kF32 ? 4 : 2;
  const uint8_t* block = rows.data + (r / 16) * 16 * rows.row_bytes + static_cast<size_t>(head) * 16 * rows.head_bytes;
  for (int d = 0; d < head_dim; ++d) {
    const uint8_t* e = block + (static_cast<size_t>(d) * 16 + r % 16) * elem;
    if (rows.type == DType::kF32) {
      std::memcpy(out + d, e, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, e, 2);
      out[d] = rows.type == DType::kF16 ? F16ToF32(h) : BF16ToF32(h);
    }
  }
}

int AttnSegmentFor(int ctx) {
  const int64_t per = (int64_t{ctx} + 31) / 32;
  return static_cast<int>(std::max<int64_t>(256, (per + 63) / 64 * 64));
}

struct AttnWorkspace::Sizes {
  int segment, n_segments;
  size_t prep_stride;
  size_t partials, items, scores, prepared, values, iota;
};

AttnWorkspace::Sizes AttnWorkspace::SizesFor(int head_dim, int ctx, int max_queries, int max_block,
                                             int n_threads) {
  Sizes s{};
  s.segment = AttnSegmentFor(ctx);
  s.n_segments = (ctx + s.segment - 1) / s.segment;
  // A prepared query (int8 blocks of any type) takes at most ~2.2 bytes per value on any path;
  // f32 (float keys) takes 4.
  s.prep_stride = (static_cast<size_t>(head_dim) * 4 + 256 + 63) / 64 * 64;
  const size_t q = static_cast<size_t>(max_queries), t = static_cast<size_t>(n_threads);
  const size_t blk = static_cast<size_t>(max_block), seg = static_cast<size_t>(s.segment);
  s.partials = q * static_cast<size_t>(s.n_segments) * static_cast<size_t>(head_dim + 2) * 4;
  s.items = q * static_cast<size_t>(s.n_segments) * 4 * sizeof(int32_t);
  s.scores = t * blk * seg * 4;
  s.prepared = t * blk * s.prep_stride;
  s.values = t * seg * static_cast<size_t>(head_dim) * 4;
  s.iota = seg * sizeof(int32_t);
  return s;
}

uint64_t AttnWorkspace::BytesFor(int head_dim, int ctx, int max_queries, int max_block,
                                 int n_threads) {
  const Sizes s = SizesFor(head_dim, ctx, max_queries, max_block, n_threads);
  return s.partials + s.items + s.scores + s.prepared + s.values + s.iota;
}

uint64_t AttnWorkspace::bytes() const {
  return partials_.size() + items_.size() + scores_.size() + prepared_.size() + values_.size() +
         iota_.size();
}

Status AttnWorkspace::Init(int head_dim, int ctx, int max_queries, int max_block, int n_threads) {
  if (head_dim <= 0 || ctx <= 0 || max_queries <= 0 || max_block <= 0 || n_threads <= 0) {
    return Status::InvalidArgument(StrFormat(
        "attention workspace: head_dim %d, ctx %d, queries %d, block %d, threads %d", head_dim,
        ctx, max_queries, max_block, n_threads));
  }
  const Sizes s = SizesFor(head_dim, ctx, max_queries, max_block, n_threads);
  head_dim_ = head_dim;
  segment_ = s.segment;
  n_segments_ = s.n_segments;
  max_queries_ = max_queries;
  max_block_ = max_block;
  n_threads_ = n_threads;
  prep_stride_ = s.prep_stride;
  if (!partials_.Reset(s.partials) || !items_.Reset(s.items) || !scores_.Reset(s.scores) ||
      !prepared_.Reset(s.prepared) || !values_.Reset(s.values) || !iota_.Reset(s.iota)) {
    return Status::OutOfMemory(StrFormat("attention workspace: cannot allocate %llu bytes",
                                         static_cast<unsigned long long>(BytesFor(
                                             head_dim, ctx, max_queries, max_block, n_threads))));
  }
  int32_t* iota = iota_.data<int32_t>();
  for (int i = 0; i < segment_; ++i) iota[i] = i;
  return Status::Ok();
}

void Attend(std::span<const AttnQuery> queries, const AttnShape& shape, AttnWorkspace* ws,
            ThreadPool* pool) {
  const int nq = static_cast<int>(queries.size());
  if (nq == 0) return;
  const int hd = shape.head_dim;
  WEIR_CHECK(ws != nullptr && hd == ws->head_dim_ && nq <= ws->max_queries_);
  WEIR_CHECK(pool == nullptr || pool->size() <= ws->n_threads_);
  const int seg = ws->segment_, n_seg = ws->n_segments_;
  const size_t part_floats = static_cast<size_t>(hd + 2);
  float* partials = ws->partials_.data<float>();
  auto partial = [&](int query, int s) {
    return partials + (static_cast<size_t>(query) * n_seg + static_cast<size_t>(s)) * part_floats;
  };
  const internal::IsaKernels& kern = internal::ActiveKernels();

  // Work items: (first query, end query, segment) of each block and segment it reaches.
  int32_t* items = ws->items_.data<int32_t>();
  size_t n_items = 0;
  for (int b = 0; b < nq;) {
    const AttnQuery& lead = queries[static_cast<size_t>(b)];
    int e = b, lo = lead.first, hi = lead.last;
    while (e < nq && e - b < ws->max_block_) {
      const AttnQuery& q = queries[static_cast<size_t>(e)];
      if (q.k != lead.k || q.v != lead.v || q.kv_head != lead.kv_head) break;
      WEIR_CHECK(q.first >= 0 && q.first <= q.last && q.last < n_seg * seg);
      lo = std::min(lo, q.first);
      hi = std::max(hi, q.last);
      ++e;
    }
    for (int s = lo / seg; s <= hi / seg; ++s) {
      int32_t* it = items + 4 * n_items++;
      it[0] = b;
      it[1] = e;
      it[2] = s;
      it[3] = 0;
    }
    b = e;
  }

  ParallelForDynamic(pool, n_items, [&](size_t begin, size_t end, int thread) {
    const size_t th = static_cast<size_t>(thread);
    float* scores = ws->scores_.data<float>() + th * static_cast<size_t>(ws->max_block_) * seg;
    uint8_t* prepared = ws->prepared_.data<uint8_t>() + th * ws->max_block_ * ws->prep_stride_;
    float* values = ws->values_.data<float>() + th * static_cast<size_t>(seg) * hd;
    const int32_t* iota = ws->iota_.data<int32_t>();
    for (size_t item = begin; item < end; ++item) {
      const int32_t* it = items + 4 * item;
      const int b = it[0], e = it[1], s = it[2], nb = e - b;
      const AttnQuery& lead = queries[static_cast<size_t>(b)];
      const KvRows& K = *lead.k;
      const KvRows& V = *lead.v;
      // The positions of the segment some query of the block attends to.
      int lo = s * seg + seg, hi = s * seg;  // [lo, hi)
      for (int i = b; i < e; ++i) {
        const AttnQuery& q = queries[static_cast<size_t>(i)];
        lo = std::min(lo, std::max(q.first, s * seg));
        hi = std::max(hi, std::min(q.last + 1, s * seg + seg));
      }
      for (int i = b; i < e; ++i) {  // queries that miss the segment keep an empty state
        const AttnQuery& q = queries[static_cast<size_t>(i)];
        if (q.first >= s * seg + seg || q.last < s * seg) continue;
        float* p = partial(i, s);
        p[0] = kNegInf;
        p[1] = 0.0f;
        std::memset(p + 2, 0, sizeof(float) * static_cast<size_t>(hd));
      }
      if (lo >= hi) continue;
      const int len = hi - lo;

      // Scores, indexed by position - s * seg. Keys in rows: one pass over the segment's keys
      // for every query of the block (the row product of matvec.h). Keys in blocks of 16: each
      // query's blocks, below.
      const int base = s * seg;
      if (!K.tiled16) {
        const size_t pb = internal::TypedPrepBytes(kern, K.type, hd);
        const size_t xp_stride = pb == 0 ? static_cast<size_t>(hd) * sizeof(float) : ws->prep_stride_;
        WEIR_CHECK(xp_stride <= ws->prep_stride_);
        for (int i = 0; i < nb; ++i) {
          const float* qv = queries[static_cast<size_t>(b + i)].q;
          uint8_t* dst = prepared + static_cast<size_t>(i) * xp_stride;
          if (pb == 0) {
            std::memcpy(dst, qv, sizeof(float) * static_cast<size_t>(hd));
          } else {
            internal::TypedPrep(kern, K.type, qv, hd, dst);
          }
        }
        ForEachRun(K.ring, lo, len, [&](int pos, int row, int run) {
          internal::TypedDot(kern, K.type,
                             K.data + static_cast<size_t>(row) * K.row_bytes +
                                 static_cast<size_t>(lead.kv_head) * K.head_bytes,
                             K.row_bytes, hd, run, prepared, xp_stride, nb, scores + (pos - base),
                             static_cast<size_t>(seg), nullptr);
        });
      }

      // Quantized values: the segment's rows of this head dequantized once for the block.
      const bool widened = WidenedInKernel(V.type);
      if (!widened) {
        ForEachRun(V.ring, lo, len, [&](int pos, int row, int run) {
          for (int r = 0; r < run; ++r) {
            DequantizeRow(V.type,
                          V.data + static_cast<size_t>(row + r) * V.row_bytes +
                              static_cast<size_t>(lead.kv_head) * V.head_bytes,
                          values + static_cast<size_t>(pos - lo + r) * hd, hd);
          }
        });
      }

      // The queries in groups of up to 4 (kKeysShared): keys in blocks of 16 and value rows
      // of a float type are loaded once for the group. Each query's state is computed over its
      // own positions only; where the group's union is wider its weights are 0 (adding 0 * v
      // changes no bit), so the result does not depend on the group.
      const bool values_kernel = widened && ValuesKernelTakes(kern, V.type, hd);
      for (int g0 = 0; g0 < nb; g0 += kKeysShared) {
        const int gn = std::min(kKeysShared, nb - g0);
        const float* gq[kKeysShared];
        float* gs[kKeysShared];
        float* gacc[kKeysShared];
        int ulo = hi, uhi = lo;  // the group's union of positions in the segment
        for (int i = 0; i < gn; ++i) {
          const AttnQuery& q = queries[static_cast<size_t>(b + g0 + i)];
          gq[i] = q.q;
          gs[i] = scores + static_cast<size_t>(g0 + i) * seg;
          gacc[i] = partial(b + g0 + i, s) + 2;
          const int qlo = std::max(lo, q.first), qhi = std::min(hi, q.last + 1);
          if (qlo >= qhi) continue;
          ulo = std::min(ulo, qlo);
          uhi = std::max(uhi, qhi);
        }
        if (ulo >= uhi) continue;
        if (K.tiled16) {
          // The 16-position blocks holding [ulo, uhi); the ring's runs start on block bounds.
          const int first16 = ulo & ~15, end16 = (uhi + 15) & ~15;
          const size_t block_stride = 16 * K.row_bytes;
          ForEachRun(K.ring, first16, end16 - first16, [&](int pos, int row, int run) {
            const uint8_t* kb = K.data + static_cast<size_t>(row / 16) * block_stride +
                                static_cast<size_t>(lead.kv_head) * 16 * K.head_bytes;
            float* at[kKeysShared];
            for (int i = 0; i < gn; ++i) at[i] = gs[i] + (pos - base);
            ScoresOfBlocks(kern, K.type, kb, block_stride, (run + 15) / 16, hd, gq, gn, at);
          });
        }
        for (int i = 0; i < gn; ++i) {
          const AttnQuery& q = queries[static_cast<size_t>(b + g0 + i)];
          const int qlo = std::max(lo, q.first), qhi = std::min(hi, q.last + 1);
          float* row_scores = gs[i];
          if (qlo >= qhi) {  // no position here: weight 0 everywhere
            std::fill(row_scores + (ulo - base), row_scores + (uhi - base), 0.0f);
            continue;
          }
          const int n = qhi - qlo;
          float* sc = row_scores + (qlo - base);
          for (int j = 0; j < n; ++j) sc[j] *= shape.scale;
          if (shape.softcap > 0) SoftCap(sc, n, shape.softcap);
          float m = sc[0];
          for (int j = 1; j < n; ++j) m = std::max(m, sc[j]);
          float* p = partial(b + g0 + i, s);
          p[0] = m;
          p[1] = ExpSubSum(kern, sc, n, m);
          std::fill(row_scores + (ulo - base), row_scores + (qlo - base), 0.0f);
          std::fill(row_scores + (qhi - base), row_scores + (uhi - base), 0.0f);
          if (values_kernel) continue;  // the group's pass below
          float* acc = p + 2;
          if (widened) {
            ForEachRun(V.ring, qlo, n, [&](int pos, int row, int run) {
              internal::TypedAxpyGather(kern, V.type,
                                        V.data + static_cast<size_t>(row) * V.row_bytes +
                                            static_cast<size_t>(q.kv_head) * V.head_bytes,
                                        V.row_bytes, hd, iota, run, sc + (pos - qlo), acc);
            });
          } else {
            internal::TypedAxpyGather(kern, DType::kF32,
                                      reinterpret_cast<const uint8_t*>(
                                          values + static_cast<size_t>(qlo - lo) * hd),
                                      static_cast<size_t>(hd) * sizeof(float), hd, iota, n, sc, acc);
          }
        }
        if (values_kernel) {
          bool done = true;
          ForEachRun(V.ring, ulo, uhi - ulo, [&](int pos, int row, int run) {
            const uint8_t* rows = V.data + static_cast<size_t>(row) * V.row_bytes +
                                  static_cast<size_t>(lead.kv_head) * V.head_bytes;
            const float* gp[kKeysShared];
            for (int i = 0; i < gn; ++i) gp[i] = gs[i] + (pos - base);
            done = done && kern.attn_values(V.type, rows, V.row_bytes, run, hd, gp, gn, gacc);
          });
          WEIR_CHECK(done);  // head_dim checked when values_kernel was chosen
        }
      }
    }
  }, 1);

  // Merge each query's segments in order.
  ParallelFor(pool, static_cast<size_t>(nq), [&](size_t begin, size_t end, int) {
    for (size_t i = begin; i < end; ++i) {
      const AttnQuery& q = queries[i];
      const int s0 = q.first / seg, s1 = q.last / seg;
      float m = kNegInf;
      for (int s = s0; s <= s1; ++s) m = std::max(m, partial(static_cast<int>(i), s)[0]);
      float l = 0.0f;
      float* out = q.out;
      std::memset(out, 0, sizeof(float) * static_cast<size_t>(hd));
      for (int s = s0; s <= s1; ++s) {
        const float* p = partial(static_cast<int>(i), s);
        if (p[0] == kNegInf) continue;
        const float w = std::exp(p[0] - m);
        l += w * p[1];
        for (int d = 0; d < hd; ++d) out[d] += w * p[2 + d];
      }
      const float inv = 1.0f / l;
      for (int d = 0; d < hd; ++d) out[d] *= inv;
    }
  });
}

namespace ref {

void Attend(std::span<const AttnQuery> queries, const AttnShape& shape) {
  const int hd = shape.head_dim;
  std::vector<float> row(static_cast<size_t>(hd));
  std::vector<double> s, acc(static_cast<size_t>(hd));
  for (const AttnQuery& q : queries) {
    const int n = q.last - q.first + 1;
    s.assign(static_cast<size_t>(n), 0.0);
    for (int j = 0; j < n; ++j) {
      // Keys of a quantized type: the row product (q quantized to int8 blocks); float keys:
      // the exact dot product.
      double dot = 0;
      if (q.k->tiled16 || !IsBlockQuantized(q.k->type)) {
        ReadKvHead(*q.k, q.first + j, q.kv_head, hd, row.data());
        for (int d = 0; d < hd; ++d) dot += static_cast<double>(q.q[d]) * row[static_cast<size_t>(d)];
      } else {
        const int r = (q.first + j) % q.k->ring;
        TensorView key;
        key.dtype = q.k->type;
        key.shape = Shape{1, hd};
        key.data = q.k->data + static_cast<size_t>(r) * q.k->row_bytes +
                   static_cast<size_t>(q.kv_head) * q.k->head_bytes;
        dot = DotRow(key, 0, q.q);
      }
      double x = static_cast<double>(static_cast<float>(dot) * shape.scale);
      if (shape.softcap > 0) x = shape.softcap * std::tanh(x / shape.softcap);
      s[static_cast<size_t>(j)] = x;
    }
    const double m = *std::max_element(s.begin(), s.end());
    double l = 0;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int j = 0; j < n; ++j) {
      const double w = std::exp(s[static_cast<size_t>(j)] - m);
      l += w;
      ReadKvHead(*q.v, q.first + j, q.kv_head, hd, row.data());
      for (int d = 0; d < hd; ++d) acc[static_cast<size_t>(d)] += w * row[static_cast<size_t>(d)];
    }
    for (int d = 0; d < hd; ++d) q.out[d] = static_cast<float>(acc[static_cast<size_t>(d)] / l);
  }
}

}  // namespace ref
}  // namespace weir::kernels
