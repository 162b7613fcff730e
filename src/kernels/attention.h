// Attention over a KV cache stored in any type (F32, F16, BF16, Q8_0, Q4_0, ...), without
// dequantizing the history: for each query
//   out = sum_p softmax_p(s_p) V_p,   s_p = SoftCap(scale * q . K_p),   p in [first, last]
// K . q is the dense row product of matvec.h with the cached keys as the rows (so a Q8_0 or Q4_0
// key cache multiplies against q quantized to int8 blocks, as llama.cpp does), and the weighted
// sum of values runs over the cached rows in their type (float types widened in the kernel,
// quantized ones dequantized a tile at a time into scratch).
//
// Tiling. Positions are cut into segments of `segment` positions at fixed absolute boundaries
// (multiples of `segment`). Each segment of each block of queries (consecutive queries over the
// same cache and key-value head, e.g. the query heads of a GQA group for all the tokens of a
// prefill call) is one work item: one pass over the segment's keys for the whole block, then for
// each query its segment softmax state (max m, sum l = sum e^(s - m), acc = sum e^(s - m) V).
// The segments of a query are then merged in order:
//   M = max m_s,  out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s
// (the flash-attention recurrence, one level). So a long context is split between threads, and
// keys and values are read once per block, not once per query.
//
// Determinism. A query's result depends only on the query, its positions and the cache: the
// same bits whether it is computed alone (decode) or inside a block (prefill, a speculative
// verify pass), on any number of threads, because segment boundaries are absolute, each row
// product is the same whatever the rows and tokens around it (matvec.h), the exponentials and
// sums run over the query's own positions only, and values are added one position at a time in
// order. Different instruction-set paths (isa.h) may differ in the last bits.
//
// Thread safety: Attend uses the workspace and the pool; one call at a time per workspace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace weir::kernels {

// Where one layer's cached keys (or values) lie. Position p lives in row r = p % ring; a row holds
// every key-value head, head_bytes each (row_bytes in all).
//   Rows (tiled16 false): row r at data + r * row_bytes, head h at + h * head_bytes, its values
//     in order (blocks of a quantized type run along the head's values).
//   Blocks of 16 rows (tiled16, float types only): rows 16 b .. 16 b + 15 at
//     data + b * 16 * row_bytes; in it head h at + h * 16 * head_bytes holds value d of row
//     16 b + l at element 16 d + l. The 16 positions' values of one dimension are one vector,
//     so scores need no horizontal sums and each position's score is computed the same way
//     whatever is computed with it. The ring is then a multiple of 16.
struct KvRows {
  const uint8_t* data = nullptr;
  DType type = DType::kF32;
  size_t row_bytes = 0;
  size_t head_bytes = 0;
  int ring = 0;  // rows held; > 0
  bool tiled16 = false;
};

// Converts x[head_dim] to rows.type and stores it as head `head` of position `pos` (data is
// rows.data, writable), in the layout above.
void WriteKvHead(const KvRows& rows, uint8_t* data, int pos, int head, int head_dim, const float* x);
// Reads head `head` of position `pos` back as f32.
void ReadKvHead(const KvRows& rows, int pos, int head, int head_dim, float* out);

// One query: q[head_dim] attends positions [first, last] (first <= last, all held by the ring)
// of key-value head kv_head; out[head_dim] receives the result.
struct AttnQuery {
  const float* q;
  const KvRows* k;
  const KvRows* v;
  int kv_head;
  int first, last;
  float* out;
};

struct AttnShape {
  int head_dim = 0;
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0: s = softcap * tanh(s / softcap) after the scale (Gemma 2)
};

// Positions per segment for a context of ctx positions: 256, or more for contexts past 8192 so
// that a query has at most 32 segments (a multiple of 64).
int AttnSegmentFor(int ctx);

// Scratch of Attend, allocated once (a session's) so that calls do not allocate.
class AttnWorkspace {
 public:
  // head_dim: of every query; ctx: positions a query may reach (its last < ctx); max_queries:
  // queries of one call; max_block: queries sharing one pass over a segment; n_threads: the
  // pool's size. OutOfMemory when the buffers cannot be allocated.
  Status Init(int head_dim, int ctx, int max_queries, int max_block, int n_threads);
  uint64_t bytes() const;
  // Bytes Init would allocate.
  static uint64_t BytesFor(int head_dim, int ctx, int max_queries, int max_block, int n_threads);

 private:
  friend void Attend(std::span<const AttnQuery>, const AttnShape&, AttnWorkspace*, ThreadPool*);
  struct Sizes;
  static Sizes SizesFor(int head_dim, int ctx, int max_queries, int max_block, int n_threads);

  int head_dim_ = 0, segment_ = 0, n_segments_ = 0, max_queries_ = 0, max_block_ = 0;
  int n_threads_ = 0;
  size_t prep_stride_ = 0;   // bytes per prepared query
  AlignedBuffer partials_;   // [max_queries, n_segments, head_dim + 2]: m, l, acc
  AlignedBuffer items_;      // work items of a call (int32 x 4 each)
  AlignedBuffer scores_;     // per thread [max_block, segment]
  AlignedBuffer prepared_;   // per thread [max_block, prep_stride]
  AlignedBuffer values_;     // per thread [segment, head_dim] dequantized values
  AlignedBuffer iota_;       // int32 0 .. segment-1
};

// Runs every query (see the top of this file). Queries over the same (k, v, kv_head) that follow
// each other share passes over the cache, up to the workspace's max_block at a time; a call holds
// at most max_queries queries whose last position is below the workspace's ctx (checked: a
// violation is a bug in the caller).
void Attend(std::span<const AttnQuery> queries, const AttnShape& shape, AttnWorkspace* ws,
            ThreadPool* pool);

namespace ref {
// The definition: keys and values dequantized to f32, s_p = SoftCap(scale * DotRow(K_p, q)) with
// matvec.h's row numerics (q quantized to int8 blocks for a quantized key type), softmax and the
// weighted sum in double. Allocates; runs on the caller.
void Attend(std::span<const AttnQuery> queries, const AttnShape& shape);
}  // namespace ref

}  // namespace weir::kernels
