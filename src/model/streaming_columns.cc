// ColumnMlp (streaming_columns.h): the MLP of one token as DIP computes it (paper 000 §3,
// Algorithm 1), over columns streamed from storage. The layout is in format/weir_pack_format.h;
// the memory and cache plan in streaming_plan.cc, the block streamer in streaming_blocks.cc.
#include "model/streaming_columns.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <numeric>

#include "kernels/gather.h"
#include "kernels/ops.h"
#include "kernels/sparse_column.h"
#include "model/streaming_internal.h"
#include "storage/unit_id.h"

namespace weir::model {

using namespace streaming_internal;
using format::ColumnOp;
using sparsity::Site;

Result<std::vector<StreamPlan::RecordTables>> ColumnMlp::ReadRecordTables(
    const format::PackFile& pack, storage::BlockDevice* device) {
  // Read once: they are part of fixed_bytes.
  std::vector<StreamPlan::RecordTables> tables(pack.groups().size());
  for (size_t i = 0; i < pack.groups().size(); ++i) {
    const format::PackGroup& pg = pack.groups()[i];
    if (pg.layout != format::PackLayout::kSparseColumns) continue;
    auto table = [&](uint64_t offset, uint64_t nbytes, int64_t rows, int64_t len,
                     std::vector<uint64_t>* out) -> Status {
      const size_t bytes = 8 * (static_cast<size_t>(rows) + 1);
      const size_t capacity = static_cast<size_t>(RoundUp(bytes, kPage));
      AlignedBuffer buf;
      if (!buf.Reset(capacity, kPage))
        return Status::OutOfMemory("streaming: cannot allocate a record offset table");
      const size_t n = storage::RoundedReadLength(*device, offset, bytes, buf.data(), capacity);
      WEIR_RETURN_IF_ERROR(device->ReadAt(offset, n, buf.data()));
      return format::ReadSparseOffsets(buf.data<uint8_t>(), rows, len, nbytes,
                                       StrFormat("%s: group %d", pack.path().c_str(), pg.index),
                                       out);
    };
    WEIR_RETURN_IF_ERROR(table(pg.offset, pg.nbytes, pg.down_rows(), pg.d_model, &tables[i].down));
    WEIR_RETURN_IF_ERROR(table(pg.in_offset, pg.in_nbytes, pg.in_rows(), pg.d_ff, &tables[i].in));
  }
  return tables;
}

Result<std::unique_ptr<ColumnMlp>> ColumnMlp::Create(const StreamPlan& plan,
                                                     BlockStreamer* streamer, kernels::Glu glu) {
  std::unique_ptr<ColumnMlp> m(new ColumnMlp(plan, streamer, glu));
  const size_t f = sizeof(float);
  const int64_t max_ff = plan.max_ff;
  if (!m->rows_x_.Reset(static_cast<size_t>(plan.max_rows) * f) ||
      !m->gate_.Reset(static_cast<size_t>(max_ff) * f) ||
      !m->up_.Reset(static_cast<size_t>(max_ff) * f)) {
    return Status::OutOfMemory("streaming: cannot allocate the MLP scratch buffers");
  }
  m->idx_rows_.resize(static_cast<size_t>(max_ff));
  m->idx_up_.resize(static_cast<size_t>(max_ff));
  m->idx_down_.resize(static_cast<size_t>(max_ff));
  m->coef_.resize(static_cast<size_t>(max_ff));
  m->sel_in_.Reserve(max_ff);
  m->guess_in_.Reserve(max_ff);
  m->sel_down_.Reserve(max_ff);
  m->all_units_.Reserve(max_ff);
  m->blocks_.reserve(static_cast<size_t>(plan.max_blocks));
  m->next_blocks_.reserve(static_cast<size_t>(plan.max_blocks));
  m->block_words_.resize(static_cast<size_t>((plan.max_blocks + 63) / 64));
  m->cache_words_.resize(static_cast<size_t>((max_ff + 63) / 64));
  return m;
}

uint64_t ColumnMlp::scratch_bytes() const {
  return rows_x_.size() + gate_.size() + up_.size() +
         (idx_rows_.capacity() + idx_up_.capacity() + idx_down_.capacity()) * sizeof(int32_t) +
         coef_.capacity() * sizeof(float) +
         (blocks_.capacity() + next_blocks_.capacity()) * sizeof(uint64_t) +
         (block_words_.capacity() + cache_words_.capacity()) * sizeof(uint64_t) +
         3 * static_cast<uint64_t>(sel_in_.capacity()) * sizeof(int32_t);
}

Status ColumnMlp::Forward(int layer, const float* x, int n, float* out, ThreadPool* pool,
                          sparsity::SparsityPolicy* policy, uint64_t* weight_bytes) {
  const Group& g = plan_.group_of_layer(layer);
  const int j = layer - g.pack.first_layer;
  streamer_->Prefetch(layer);
  single_token_ = n == 1;
  for (int t = 0; t < n; ++t) {
    const size_t at = static_cast<size_t>(t) * plan_.d_model;
    WEIR_RETURN_IF_ERROR(ForwardColumns(g, j, x + at, out + at, pool, policy, weight_bytes));
  }
  return Status::Ok();
}

Status ColumnMlp::ColumnProduct(const Group& g, bool input, const int32_t* rows, const float* coef,
                                int64_t n, float* y, ThreadPool* pool, uint64_t* bytes) {
  const format::PackGroup& pg = g.pack;
  const Extent& e = input ? g.in : g.extent;
  const int64_t len = input ? pg.d_ff : pg.d_model;
  if (!g.sparse) {
    // The gathered kernel reads the coefficient of row r at x[r].
    float* xr = rows_x_.data<float>();
    for (int64_t k = 0; k < n; ++k) xr[rows[k]] = coef[k];
    const TensorView view{pg.dtype, Shape{input ? pg.in_rows() : pg.down_rows(), len},
                          streamer_->base(e)};
    kernels::GatherMatVecCols(view, rows, n, xr, y, pool);
    *bytes += static_cast<uint64_t>(n) * view.row_bytes();
    return Status::Ok();
  }
  const std::vector<uint64_t>& offsets = input ? g.in_offsets : g.down_offsets;
  const DType t = pg.dtype;
  // Every record is checked against its bitmap before any is used.
  for (int64_t k = 0; k < n; ++k) {
    const size_t r = static_cast<size_t>(rows[k]);
    const std::byte* rec = streamer_->base(e) + offsets[r];
    const uint64_t size = offsets[r + 1] - offsets[r];
    if (size != kernels::SparseRecordBytes(t, len, kernels::SparseRecordCount(rec, len))) {
      return Status::Corrupt(StrFormat("sparse column record %zu of extent %u has %llu bytes, "
                                       "which its bitmap does not account for",
                                       r, e.slab, static_cast<unsigned long long>(size)));
    }
    *bytes += size;
  }
  // A static split: slice s of the records goes into accumulator s (y for the first), and the
  // accumulators are added in slice order, so the sums do not depend on the scheduling.
  const int slices = pool == nullptr ? 1 : pool->size();
  const size_t need = static_cast<size_t>(slices - 1) * static_cast<size_t>(len);
  if (sparse_partials_.size() < need) sparse_partials_.resize(need);  // grows once
  float* partials = sparse_partials_.data();
  ParallelFor(
      pool, static_cast<size_t>(slices),
      [&](size_t b, size_t end, int) {
        for (size_t sl = b; sl < end; ++sl) {
          float* acc = sl == 0 ? y : partials + (sl - 1) * static_cast<size_t>(len);
          std::memset(acc, 0, sizeof(float) * static_cast<size_t>(len));
          const int64_t k0 = n * static_cast<int64_t>(sl) / slices;
          const int64_t k1 = n * static_cast<int64_t>(sl + 1) / slices;
          for (int64_t k = k0; k < k1; ++k) {
            kernels::SparseColumnAxpy(t, streamer_->base(e) + offsets[static_cast<size_t>(rows[k])],
                                      len, coef[k], acc);
          }
        }
      },
      1);
  for (int sl = 1; sl < slices; ++sl) {
    const float* p = partials + static_cast<size_t>(sl - 1) * static_cast<size_t>(len);
    for (int64_t i = 0; i < len; ++i) y[i] += p[i];
  }
  return Status::Ok();
}

void ColumnMlp::AllBlocks(const Extent& e, std::vector<uint64_t>* blocks) const {
  blocks->resize(static_cast<size_t>(e.n_blocks));
  std::iota(blocks->begin(), blocks->end(), uint64_t{0});
}

const sparsity::CacheStateView* ColumnMlp::ColumnCacheState(
    const Extent& e, int64_t channels,
    const std::function<std::pair<uint64_t, uint64_t>(int64_t)>& range) {
  if (streamer_->held(e)) return nullptr;  // resident mode: everything is cached
  streamer_->ResidentBlocks(e, block_words_.data());
  auto resident = [&](uint64_t b) { return (block_words_[b / 64] >> (b % 64)) & 1; };
  std::fill(cache_words_.begin(), cache_words_.end(), 0);
  const uint64_t B = e.block_bytes;
  for (int64_t k = 0; k < channels; ++k) {
    const auto [begin, end] = range(k);
    bool all = true;
    for (uint64_t b = begin / B; all && b <= (end - 1) / B; ++b) all = resident(b);
    if (all) cache_words_[static_cast<size_t>(k / 64)] |= uint64_t{1} << (k % 64);
  }
  cache_view_ = sparsity::CacheStateView(
      std::span<const uint64_t>(cache_words_.data(), static_cast<size_t>((channels + 63) / 64)),
      channels);
  return &cache_view_;
}

void ColumnMlp::PredictNextLayer(int layer, const sparsity::IndexList& in) {
  // prefetch_layers -1: nothing is read ahead, predictions included (deterministic counters).
  if (layer + 1 >= plan_.n_layers || plan_.options.prefetch_layers < 0) return;
  const Group& g = plan_.group_of_layer(layer + 1);
  if (!g.columns || streamer_->held(g.in)) return;
  const int j = layer + 1 - g.pack.first_layer;
  std::vector<uint64_t>& blocks = next_blocks_;
  blocks.clear();
  for (int64_t k = 0; k < in.size(); ++k) {
    const auto [b, e] = InputColumn(g, in[k], j);
    AddBlocks(g.in, b, e, &blocks);
  }
  SortBlocks(&blocks);
  streamer_->QueueMissing(g.in, blocks, 0, &predicted_);
}

std::pair<uint64_t, uint64_t> ColumnMlp::InputRecord(const Group& g, int64_t i) const {
  return {InputColumn(g, i, 0).first, InputColumn(g, i, g.pack.n_layers - 1).second};
}

bool ColumnMlp::SpanMode(const Group& g, const sparsity::SparsityPolicy* policy) const {
  if (policy == nullptr || !single_token_ || g.sparse || !policy->MayPrune(Site::kMlpIn)) {
    return false;
  }
  // The policy's spans must be the pack's groups: a span starts at the group's first layer and
  // covers it (the last group may be shorter).
  const int span = policy->info().mlp_in_span;
  const format::PackGroup& pg = g.pack;
  return span > 1 && pg.n_layers > 1 && pg.first_layer % span == 0 && pg.n_layers <= span &&
         (pg.n_layers == span || pg.first_layer + pg.n_layers == plan_.n_layers);
}

void ColumnMlp::ReleaseSpan() {
  if (span_group_ < 0) return;
  const Group& g = plan_.groups[static_cast<size_t>(span_group_)];
  streamer_->Release(&span_in_, UINT64_MAX, g.in);
  streamer_->Release(&span_down_, UINT64_MAX, g.extent);
  span_in_ = Batch();
  span_down_ = Batch();
  span_group_ = -1;
  span_compact_ = false;
}

Result<bool> ColumnMlp::ReadSpanCompact(const Group& g) {
  if (!plan_.options.compact_span || streamer_->held(g.in) || g.sparse ||
      plan_.options.record_trace) {
    return false;
  }
  const format::PackGroup& pg = g.pack;
  span_slots_.clear();
  for (int64_t k = 0; k < sel_in_.size(); ++k) span_slots_.push_back(pg.InSlot(sel_in_[k]));
  std::sort(span_slots_.begin(), span_slots_.end());
  const uint64_t record = static_cast<uint64_t>(pg.n_layers) * 2 * pg.in_row_bytes;
  span_places_.resize(span_slots_.size());
  WEIR_ASSIGN_OR_RETURN(const bool read,
                        streamer_->ReadRecords(g.in, record, span_slots_.data(),
                                               static_cast<int64_t>(span_slots_.size()),
                                               span_places_.data()));
  if (!read) return false;
  span_pos_.resize(std::max(span_pos_.size(), static_cast<size_t>(pg.d_model)));
  span_places_used_ = 0;
  for (size_t k = 0; k < span_slots_.size(); ++k) {
    span_pos_[static_cast<size_t>(span_slots_[k])] = span_places_[k];
    span_places_used_ = std::max<int64_t>(span_places_used_, int64_t{span_places_[k]} + 1);
  }
  if (prev_slots_.size() <= static_cast<size_t>(pg.index))
    prev_slots_.resize(static_cast<size_t>(pg.index) + 1);
  prev_slots_[static_cast<size_t>(pg.index)] = span_slots_;
  return true;
}

void ColumnMlp::ReadNextRecordsAhead(const Group& g, int layer, const float* x,
                                     sparsity::SparsityPolicy* policy) {
  const SpanAhead mode = plan_.options.span_read_ahead;
  if (mode == SpanAhead::kOff || plan_.options.prefetch_layers < 0) return;
  // The next group, or after the last group the next token's first.
  const size_t next = static_cast<size_t>(g.pack.index) + 1;
  const bool wrap = next >= plan_.groups.size();
  const size_t w = wrap ? 0 : next;
  const Group& n = plan_.groups[w];
  const format::PackGroup& pn = n.pack;
  if (!n.columns || n.sparse || pn.n_layers <= 1) return;
  // Two guesses: the selection the next group made for the previous token (consecutive tokens'
  // hidden states are similar), and the one this layer's input predicts for it (consecutive
  // layers' are: ActiveFlow §3). The layer guess cannot cross into the next token.
  const std::vector<int64_t> none;
  const std::vector<int64_t>& token = w < prev_slots_.size() ? prev_slots_[w] : none;
  guess_slots_.clear();
  if (!wrap && mode != SpanAhead::kToken &&
      policy->PredictSpan(layer, pn.first_layer,
                          std::span<const float>(x, static_cast<size_t>(g.pack.d_model)),
                          &guess_in_)) {
    for (int64_t k = 0; k < guess_in_.size(); ++k) guess_slots_.push_back(pn.InSlot(guess_in_[k]));
    std::sort(guess_slots_.begin(), guess_slots_.end());
  }
  std::vector<int64_t> slots;
  if (guess_slots_.empty()) {
    slots = token;
  } else if (mode == SpanAhead::kLayer) {
    slots = guess_slots_;
  } else {  // both: the union
    slots.reserve(guess_slots_.size() + token.size());
    std::set_union(guess_slots_.begin(), guess_slots_.end(), token.begin(), token.end(),
                   std::back_inserter(slots));
  }
  if (slots.empty()) return;
  const uint64_t record = static_cast<uint64_t>(pn.n_layers) * 2 * pn.in_row_bytes;
  streamer_->ReadRecordsAhead(n.in, record, std::move(slots));
}

void ColumnMlp::CompactInputProduct(const Group& g, const int32_t* rows, const float* coef,
                                    int64_t n, float* y, ThreadPool* pool, uint64_t* bytes) {
  // The kernel and the row order of ColumnProduct, over the compact copy: the same sums.
  const format::PackGroup& pg = g.pack;
  float* xr = rows_x_.data<float>();
  for (int64_t k = 0; k < n; ++k) xr[rows[k]] = coef[k];
  const int64_t n_rows = span_places_used_ * pg.n_layers * 2;
  const TensorView view{pg.dtype, Shape{n_rows, pg.d_ff}, streamer_->records()};
  kernels::GatherMatVecCols(view, rows, n, xr, y, pool);
  *bytes += static_cast<uint64_t>(n) * view.row_bytes();
}

Status ColumnMlp::AcquireSpan(const Group& g, int layer, const float* x,
                              sparsity::SparsityPolicy* policy) {
  ReleaseSpan();
  const int d = g.pack.d_model;
  // DIP-CA's mask counts a channel as cached when its whole record (every layer's rows) is.
  const sparsity::CacheStateView* cache =
      policy->info().cache_aware
          ? ColumnCacheState(g.in, d, [&](int64_t i) { return InputRecord(g, i); })
          : nullptr;
  policy->SelectInput(layer, Site::kMlpIn, std::span<const float>(x, static_cast<size_t>(d)),
                      cache, &sel_in_);
  const bool whole_down = !policy->MayPrune(Site::kMlpDown);
  // W_down goes to the I/O thread first: it reads it while this thread reads the records.
  if (whole_down) {
    AllBlocks(g.extent, &next_blocks_);
    if (!streamer_->held(g.extent)) streamer_->QueueMissing(g.extent, next_blocks_, 0, nullptr);
  }
  span_group_ = g.pack.index;
  WEIR_ASSIGN_OR_RETURN(span_compact_, ReadSpanCompact(g));
  if (!span_compact_) {
    // Through the cache: the records' blocks are queued before any is claimed, so that the I/O
    // thread reads on while the compute waits for the first.
    blocks_.clear();
    for (int64_t k = 0; k < sel_in_.size(); ++k) {
      const auto [b, e] = InputRecord(g, sel_in_[k]);
      AddBlocks(g.in, b, e, &blocks_);
    }
    SortBlocks(&blocks_);
    if (!streamer_->held(g.in)) streamer_->QueueMissing(g.in, blocks_, 0, nullptr);
    WEIR_RETURN_IF_ERROR(streamer_->AcquireBlocks(g.in, blocks_, /*queued=*/true, &span_in_));
  }
  if (whole_down) {
    WEIR_RETURN_IF_ERROR(
        streamer_->AcquireBlocks(g.extent, next_blocks_, /*queued=*/true, &span_down_));
  }
  DropPredictions();  // what the previous group predicted and this one did not keep
  // A compact read takes the next group's records when it starts: predicting them into the
  // cache would read them twice.
  if (span_compact_) {
    ReadNextRecordsAhead(g, layer, x, policy);
  } else {
    PredictNextGroup(g, sel_in_);
  }
  return Status::Ok();
}

void ColumnMlp::PredictNextGroup(const Group& g, const sparsity::IndexList& in) {
  // (The next group's whole W_down, when span mode keeps it whole, is the read-ahead cursor's:
  // BlockStreamer::set_span_down_ahead.)
  if (plan_.options.prefetch_layers < 0) return;
  const size_t next = static_cast<size_t>(g.pack.index) + 1;
  if (next >= plan_.groups.size()) return;
  const Group& n = plan_.groups[next];
  if (!n.columns || n.sparse || streamer_->held(n.in)) return;
  std::vector<uint64_t>& blocks = next_blocks_;
  blocks.clear();
  for (int64_t k = 0; k < in.size(); ++k) {
    const auto [b, e] = InputRecord(n, in[k]);
    AddBlocks(n.in, b, e, &blocks);
  }
  SortBlocks(&blocks);
  streamer_->QueueMissing(n.in, blocks, 0, &predicted_);
}

void ColumnMlp::DropPredictions() {
  // Claimed blocks are the compute's now; the rest is cancelled or left evictable.
  for (storage::UnitId id : predicted_) streamer_->Cancel(id);
  predicted_.clear();
}

// One token of layer first + j:
//   in   = SelectInput(x)                       input columns (all without a policy)
//   g, u = gate^T[in] · x[in], up^T[in] · x[in]  gathered over the pinned input columns
//   h    = silu(g) ⊙ u
//   down = SelectDown(h)                         neurons (all without a policy)
//   out  = down^T[down] · h[down]
Status ColumnMlp::ForwardColumns(const Group& g, int j, const float* x, float* out,
                                 ThreadPool* pool, sparsity::SparsityPolicy* policy,
                                 uint64_t* weight_bytes) {
  const format::PackGroup& pg = g.pack;
  const int layer = pg.first_layer + j;
  const int d = pg.d_model, d_ff = pg.d_ff;
  float* gate = gate_.data<float>();
  float* up = up_.data<float>();
  float* coef = coef_.data();  // the kept columns' coefficients, x[i] then h[c]
  uint64_t used = 0;           // weight bytes the products read
  if (streamer_->resident_mode() && !streamer_->held(g.in))
    WEIR_RETURN_IF_ERROR(streamer_->LoadResident(g.in));
  if (streamer_->resident_mode() && !streamer_->held(g.extent))
    WEIR_RETURN_IF_ERROR(streamer_->LoadResident(g.extent));

  // Span mode: the group's first layer selects and pins the records of every layer of the group;
  // the others compute from them (the policy gives them the same selection).
  const bool span = SpanMode(g, policy);
  streamer_->set_span_down_ahead(span && !policy->MayPrune(Site::kMlpDown));
  if (span_group_ >= 0 && (!span || (j > 0 && span_group_ != pg.index))) ReleaseSpan();
  if (span && j == 0) {
    if (Status st = AcquireSpan(g, layer, x, policy); !st.ok()) {
      ReleaseSpan();
      return st;
    }
  }
  const bool held = span && span_group_ == pg.index;
  const bool down_held = held && !policy->MayPrune(Site::kMlpDown);

  // Input columns, cache-aware for DIP-CA.
  if (held && j == 0) {
    // Selected by AcquireSpan.
  } else if (held) {
    policy->SelectInput(layer, Site::kMlpIn, std::span<const float>(x, static_cast<size_t>(d)),
                        nullptr, &sel_in_);
  } else if (policy != nullptr && policy->MayPrune(Site::kMlpIn)) {
    const sparsity::CacheStateView* cache =
        policy->info().cache_aware
            ? ColumnCacheState(g.in, d, [&](int64_t i) { return InputColumn(g, i, j); })
            : nullptr;
    policy->SelectInput(layer, Site::kMlpIn, std::span<const float>(x, static_cast<size_t>(d)),
                        cache, &sel_in_);
  } else {
    sel_in_.SetAll(d);
  }
  const int64_t n_in = sel_in_.size();
  int32_t* idx_gate = idx_rows_.data();
  int32_t* idx_up = idx_up_.data();
  blocks_.clear();
  const bool compact = held && span_compact_;
  for (int64_t k = 0; k < n_in; ++k) {
    const int32_t i = sel_in_[k];
    // The compact copy holds each kept record at its place (ReadSpanCompact).
    const int64_t slot = compact ? span_pos_[static_cast<size_t>(pg.InSlot(i))] : pg.InSlot(i);
    idx_gate[k] = static_cast<int32_t>(pg.InRowAtSlot(slot, j, ColumnOp::kGateT));
    idx_up[k] = static_cast<int32_t>(pg.InRowAtSlot(slot, j, ColumnOp::kUpT));
    coef[k] = x[i];
    if (held) continue;
    const auto [b, e] = InputColumn(g, i, j);
    AddBlocks(g.in, b, e, &blocks_);
  }
  if (compact) {
    CompactInputProduct(g, idx_gate, coef, n_in, gate, pool, &used);
    CompactInputProduct(g, idx_up, coef, n_in, up, pool, &used);
  } else if (held) {
    WEIR_RETURN_IF_ERROR(ColumnProduct(g, true, idx_gate, coef, n_in, gate, pool, &used));
    WEIR_RETURN_IF_ERROR(ColumnProduct(g, true, idx_up, coef, n_in, up, pool, &used));
  } else {
    SortBlocks(&blocks_);
    Batch batch;
    WEIR_RETURN_IF_ERROR(streamer_->AcquireBlocks(g.in, blocks_, /*queued=*/false, &batch));
    DropPredictions();  // this layer's predicted blocks are claimed; the rest was mispredicted
    Status st = ColumnProduct(g, true, idx_gate, coef, n_in, gate, pool, &used);
    if (st.ok()) st = ColumnProduct(g, true, idx_up, coef, n_in, up, pool, &used);
    streamer_->Release(&batch, UINT64_MAX, g.in);
    WEIR_RETURN_IF_ERROR(st);
  }
  kernels::GatedActivation(glu_, gate, up, d_ff);  // h, in gate
  const float* h = gate;

  // Down columns.
  if (policy != nullptr && policy->MayPrune(Site::kMlpDown)) {
    all_units_.SetAll(d_ff);
    const sparsity::CacheStateView* cache =
        policy->info().cache_aware
            ? ColumnCacheState(g.extent, d_ff, [&](int64_t c) { return DownColumn(g, c, j); })
            : nullptr;
    policy->SelectDown(layer, std::span<const float>(h, static_cast<size_t>(d_ff)), all_units_,
                       cache, &sel_down_);
  } else {
    sel_down_.SetAll(d_ff);
  }
  const int64_t n_down = sel_down_.size();
  int32_t* idx_down = idx_down_.data();
  blocks_.clear();
  for (int64_t k = 0; k < n_down; ++k) {
    const int32_t c = sel_down_[k];
    idx_down[k] = static_cast<int32_t>(pg.DownRow(c, j));
    coef[k] = h[c];
    if (down_held) continue;
    const auto [b, e] = DownColumn(g, c, j);
    AddBlocks(g.extent, b, e, &blocks_);
  }
  if (down_held) {
    WEIR_RETURN_IF_ERROR(ColumnProduct(g, false, idx_down, coef, n_down, out, pool, &used));
  } else {
    SortBlocks(&blocks_);
    Batch batch;
    // This layer's missing down columns are queued first, then the next layer's predicted
    // input columns, so that the I/O thread reads in the order the compute needs them.
    if (!streamer_->held(g.extent)) streamer_->QueueMissing(g.extent, blocks_, 0, nullptr);
    if (policy != nullptr && streamer_->sparse_mlp() && !held) PredictNextLayer(layer, sel_in_);
    WEIR_RETURN_IF_ERROR(streamer_->AcquireBlocks(g.extent, blocks_, /*queued=*/true, &batch));
    const Status st = ColumnProduct(g, false, idx_down, coef, n_down, out, pool, &used);
    streamer_->Release(&batch, UINT64_MAX, g.extent);
    WEIR_RETURN_IF_ERROR(st);
  }
  if (weight_bytes != nullptr) *weight_bytes += used;
  if (held && j == pg.n_layers - 1) ReleaseSpan();
  streamer_->Prefetch(layer);  // top up the read-ahead (attention; whole MLP extents when dense)
  return Status::Ok();
}

}  // namespace weir::model
