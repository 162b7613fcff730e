// BundleMlp (streaming_bundles.h): the MLP of a layer from its neuron bundles, lane by lane.
#include "model/streaming_bundles.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/checked_math.h"
#include "kernels/chunked_matvec.h"
#include "kernels/gather.h"
#include "kernels/ops.h"
#include "kernels/tiled.h"
#include "model/streaming_internal.h"
#include "storage/unit_id.h"

namespace weir::model {

using namespace streaming_internal;

Result<std::unique_ptr<BundleMlp>> BundleMlp::Create(const StreamPlan& plan,
                                                     BlockStreamer* streamer, kernels::Glu glu) {
  std::unique_ptr<BundleMlp> m(new BundleMlp(plan, streamer, glu));
  const size_t f = sizeof(float);
  const int64_t max_rows = plan.max_rows, max_ff = plan.max_ff, max_lanes = plan.max_lanes;
  if (!m->rows_y_.Reset(static_cast<size_t>(max_rows) * f) ||
      !m->gate_.Reset(static_cast<size_t>(max_ff) * f) ||
      !m->up_.Reset(static_cast<size_t>(max_ff) * f) ||
      !m->partials_.Reset(static_cast<size_t>(max_lanes) * plan.d_model * f) ||
      !m->x_tiled_.Reset(kernels::TiledPrepBytes(plan.d_model)) ||
      !m->h_tiled_.Reset(kernels::TiledPrepBytes(max_ff))) {
    return Status::OutOfMemory("streaming: cannot allocate the MLP scratch buffers");
  }
  m->idx_rows_.resize(static_cast<size_t>(2 * max_ff));
  return m;
}

uint64_t BundleMlp::scratch_bytes() const {
  return rows_y_.size() + gate_.size() + up_.size() + partials_.size() + x_tiled_.size() +
         h_tiled_.size() + idx_rows_.capacity() * sizeof(int32_t);
}

Status BundleMlp::Forward(int layer, const float* x, int n, float* out, ThreadPool* pool,
                          sparsity::SparsityPolicy* policy, uint64_t* weight_bytes) {
  const Group& g = plan_.group_of_layer(layer);
  const Extent& e = g.extent;
  const int j = layer - g.pack.first_layer;
  WEIR_CHECK(policy == nullptr);  // bundles: dense only (Session checks)
  if (weight_bytes != nullptr) {
    *weight_bytes = static_cast<uint64_t>(n) * g.pack.bundle_bytes / g.pack.n_layers *
                    static_cast<uint64_t>(g.pack.d_ff);
  }
  std::memset(out, 0, sizeof(float) * static_cast<size_t>(n) * plan_.d_model);
  streamer_->Prefetch(layer);
  if (streamer_->resident_mode() && !streamer_->held(e))
    WEIR_RETURN_IF_ERROR(streamer_->LoadResident(e));
  if (streamer_->held(e)) {
    for (uint64_t b = 0; b < e.n_blocks; ++b)
      streamer_->CountAccess(streamer_->BlockRead(e, b).length, true);
    ComputeLanes(g, j, 0, g.n_lanes, x, n, out, pool);
    return Status::Ok();
  }
  const uint64_t batch_limit =
      std::max<uint64_t>(plan_.max_lane_bytes, streamer_->partition_budget(e.partition) / 2);
  Batch batch;
  int lane = 0;  // the lane whose blocks are being acquired
  auto first_block = [&](int k) {
    return BlocksOf(g, int64_t{k} * plan_.lane_channels, int64_t{k} * plan_.lane_channels + 1).first;
  };
  // Frees pinned room by finishing the lanes already acquired (blocks shared with `lane` stay).
  auto make_room = [&]() {
    if (batch.lane_begin >= lane) return false;
    ComputeLanes(g, j, batch.lane_begin, lane, x, n, out, pool);
    streamer_->Release(&batch, first_block(lane), e);
    batch.lane_begin = lane;
    return true;
  };
  for (; lane < g.n_lanes; ++lane) {
    const int64_t c0 = int64_t{lane} * plan_.lane_channels;
    const auto [b0, b1] = BlocksOf(g, c0, std::min<int64_t>(c0 + plan_.lane_channels, g.pack.d_ff));
    for (uint64_t b = b0; b <= b1; ++b) {
      if (!batch.blocks.empty() && b <= batch.blocks.back()) continue;  // shared with lane - 1
      WEIR_RETURN_IF_ERROR(streamer_->AcquireBlock(e, b, &batch, make_room));
    }
    batch.lane_end = lane + 1;
    if (batch.pinned_bytes >= batch_limit && lane + 1 < g.n_lanes) {
      ComputeLanes(g, j, batch.lane_begin, batch.lane_end, x, n, out, pool);
      streamer_->Release(&batch, first_block(lane + 1), e);
      batch.lane_begin = lane + 1;
      streamer_->Prefetch(layer);  // top up the read-ahead with the room the compute released
    }
  }
  ComputeLanes(g, j, batch.lane_begin, batch.lane_end, x, n, out, pool);
  streamer_->Release(&batch, UINT64_MAX, e);
  streamer_->Prefetch(layer);
  return Status::Ok();
}

void BundleMlp::ComputeLanes(const Group& g, int j, int k0, int k1, const float* x, int n,
                             float* out, ThreadPool* pool) {
  if (k0 >= k1 || !plan_.options.compute) return;
  const format::PackGroup& pg = g.pack;
  const TensorView view{pg.dtype, Shape{pg.rows(), pg.d_model},
                        streamer_->base(g.extent)};  // [rows, d_model]
  const int L = plan_.lane_channels;
  const size_t chunk_stride = format::kBundleChunk * pg.bundle_bytes;
  float* rows_y = rows_y_.data<float>();
  float* gate = gate_.data<float>();
  float* up = up_.data<float>();
  float* partials = partials_.data<float>();
  int32_t* idx_rows = idx_rows_.data();  // channel c's gate and up rows at 2c, 2c + 1
  const int d = plan_.d_model;
  for (int t = 0; t < n; ++t) {
    const float* xt = x + static_cast<size_t>(t) * d;
    if (pg.tiled) {
      ComputeTiledLanes(g, j, k0, k1, xt, pool);
    } else {
      // One lane at a time per thread, start to end: its gate and up rows, h, and its partial sum
      // of W_down · h over its chunks' down pieces. A lane's bundles (about 1 MiB) are streamed
      // from memory once and are still in L2 when its down pieces are read.
      ParallelForDynamic(
          pool, static_cast<size_t>(k1 - k0),
          [&](size_t b, size_t e, int) {
            for (size_t i = b; i < e; ++i) {
              const int k = k0 + static_cast<int>(i);
              const int64_t c0 = int64_t{k} * L, c1 = std::min<int64_t>(c0 + L, pg.d_ff);
              for (int64_t c = c0; c < c1; ++c) {
                idx_rows[2 * c] = static_cast<int32_t>(pg.Row(c, j, format::BundleOp::kGate));
                idx_rows[2 * c + 1] = static_cast<int32_t>(pg.Row(c, j, format::BundleOp::kUp));
              }
              kernels::GatherMatVecRows(view, idx_rows + 2 * c0, 2 * (c1 - c0), xt, rows_y,
                                        nullptr);
              for (int64_t c = c0; c < c1; ++c) {
                gate[c] = rows_y[idx_rows[2 * c]];
                up[c] = rows_y[idx_rows[2 * c + 1]];
              }
              kernels::GatedActivation(glu_, gate + c0, up + c0, c1 - c0);
              // partial_k = sum over the lane's chunks, in order, of W_down[:, chunk] · h[chunk]:
              // the full chunks in one call, then a narrower last chunk (float types) added.
              float* part = partials + static_cast<size_t>(k) * d;
              const int64_t full = (c1 - c0) / format::kBundleChunk;
              auto down = [&](int64_t c) {
                return view.row(pg.ChunkRow(c, j, format::BundleOp::kDown));
              };
              if (full > 0) {
                kernels::ChunkedMatVec(pg.dtype, down(c0), RowBytes(pg.dtype, format::kBundleChunk),
                                       chunk_stride, full, format::kBundleChunk, d, gate + c0, part,
                                       false);
              }
              const int64_t c_last = c0 + full * format::kBundleChunk;
              if (c_last < c1) {
                const int w = static_cast<int>(c1 - c_last);
                kernels::ChunkedMatVec(pg.dtype, down(c_last), RowBytes(pg.dtype, w), chunk_stride,
                                       1, w, d, gate + c_last, part, full > 0);
              }
            }
          },
          1);
    }
    // out += partial_k in lane order, each thread summing a slice of the outputs.
    float* ot = out + static_cast<size_t>(t) * d;
    ParallelFor(
        pool, static_cast<size_t>(d),
        [&](size_t b, size_t e, int) {
          for (int k = k0; k < k1; ++k) {
            const float* p = partials + static_cast<size_t>(k) * d;
            for (size_t i = b; i < e; ++i) ot[i] += p[i];
          }
        },
        64);
  }
}

// The lanes of a tiled bundle group (format/weir_pack_format.h) for one token x: per chunk the
// gate and up products of its 32 neurons (DotTiledPrepared, x prepared once for all lanes), h,
// and the lane's down pieces in one DotTiledChunks call into the lane's partial sum.
void BundleMlp::ComputeTiledLanes(const Group& g, int j, int k0, int k1, const float* x,
                                  ThreadPool* pool) {
  const format::PackGroup& pg = g.pack;
  const TensorView view{pg.dtype, Shape{pg.rows(), pg.d_model},
                        streamer_->base(g.extent)};  // [rows, d_model]
  const int L = plan_.lane_channels, d = plan_.d_model;
  const size_t chunk_stride = format::kBundleChunk * pg.bundle_bytes;
  float* gate = gate_.data<float>();
  float* up = up_.data<float>();
  float* partials = partials_.data<float>();
  auto* xp = x_tiled_.data<uint8_t>();
  auto* hp = h_tiled_.data<uint8_t>();
  kernels::PrepareTiled(pg.dtype, x, d, xp);
  ParallelForDynamic(
      pool, static_cast<size_t>(k1 - k0),
      [&](size_t b, size_t e, int) {
        for (size_t i = b; i < e; ++i) {
          const int k = k0 + static_cast<int>(i);
          const int64_t c0 = int64_t{k} * L, c1 = std::min<int64_t>(c0 + L, pg.d_ff);
          for (int64_t c = c0; c < c1; c += format::kBundleChunk) {
            for (auto [op, y] : {std::pair{format::BundleOp::kGate, gate},
                                 std::pair{format::BundleOp::kUp, up}}) {
              TensorView piece{pg.dtype, Shape{format::kBundleChunk, d},
                               view.row(pg.ChunkRow(c, j, op))};
              piece.layout = Layout::kTiled16;
              kernels::DotTiledPrepared(piece, xp, y + c);
            }
          }
          kernels::GatedActivation(glu_, gate + c0, up + c0, c1 - c0);
          // Records of chunk c start at hp + (c / 32) * 64: lanes write disjoint ranges.
          uint8_t* h =
              hp + static_cast<size_t>(c0 / format::kBundleChunk) * kernels::kTiledRecordBytes;
          kernels::PrepareTiled(pg.dtype, gate + c0, c1 - c0, h);
          kernels::DotTiledChunks(pg.dtype, view.row(pg.ChunkRow(c0, j, format::BundleOp::kDown)),
                                  chunk_stride, (c1 - c0) / format::kBundleChunk, d, h,
                                  partials + static_cast<size_t>(k) * d);
        }
      },
      1);
}

}  // namespace weir::model
