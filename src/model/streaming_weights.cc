// StreamingWeights (streaming_weights.h): creation -- the plan (streaming_plan.h), the slabs,
// cache and scratch a pack needs -- resident mode and the counters. The
// block streamer is in streaming_blocks.cc, the two layouts' MLPs in streaming_bundles.cc and
// streaming_columns.cc.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/checked_math.h"
#include "kernels/tiled.h"
#include "model/streaming_internal.h"
#include "model/streaming_weights.h"
#include "storage/unit_id.h"

namespace weir::model {

using namespace streaming_internal;

namespace {

// The record offset tables of a sparse column pack's groups, read once (they are part of
// fixed_bytes).
Result<std::vector<StreamPlan::RecordTables>> ReadRecordTables(const format::PackFile& pack,
                                                                storage::BlockDevice* device) {
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

}  // namespace

Result<std::unique_ptr<StreamingWeights>> StreamingWeights::Create(
    const format::PackFile& pack, storage::BlockDevice* device, const StreamingOptions& options) {
  const std::string& path = pack.path();
  if (device == nullptr) return Status::InvalidArgument("streaming: no device for " + path);
  if (device->size() < pack.file_size()) {
    return Status::InvalidArgument(
        StrFormat("streaming: device %s holds %llu bytes, the pack %s has %llu",
                  device->name().c_str(), static_cast<unsigned long long>(device->size()),
                  path.c_str(), static_cast<unsigned long long>(pack.file_size())));
  }
  std::unique_ptr<StreamingWeights> s(new StreamingWeights());
  s->options_ = options;
  s->glu_ = pack.config().arch != nullptr &&
                    pack.config().arch->activation == format::Activation::kGeluTanh
                ? kernels::Glu::kGeluTanh
                : kernels::Glu::kSilu;
  WEIR_ASSIGN_OR_RETURN(std::vector<StreamPlan::RecordTables> tables,
                        ReadRecordTables(pack, device));
  WEIR_ASSIGN_OR_RETURN(StreamPlan::EntryCharge charge, BlockStreamer::EntryChargeOf(options));
  WEIR_ASSIGN_OR_RETURN(s->plan_, StreamPlan::Build(pack, options, charge, std::move(tables)));
  const StreamPlan& plan = s->plan_;
  WEIR_ASSIGN_OR_RETURN(s->streamer_, BlockStreamer::Create(plan, device));
  if (plan.experts()) s->MakeExpertReader();

  const size_t f = sizeof(float);
  const int64_t max_rows = plan.max_rows, max_ff = plan.max_ff, max_lanes = plan.max_lanes;
  if (!s->rows_y_.Reset(static_cast<size_t>(max_rows) * f) ||
      !s->rows_x_.Reset(static_cast<size_t>(max_rows) * f) ||
      !s->gate_.Reset(static_cast<size_t>(max_ff) * f) ||
      !s->up_.Reset(static_cast<size_t>(max_ff) * f) ||
      !s->partials_.Reset(static_cast<size_t>(max_lanes) * plan.d_model * f) ||
      !s->x_tiled_.Reset(kernels::TiledPrepBytes(plan.d_model)) ||
      !s->h_tiled_.Reset(kernels::TiledPrepBytes(max_ff))) {
    return Status::OutOfMemory("streaming: cannot allocate the MLP scratch buffers");
  }
  s->idx_rows_.resize(static_cast<size_t>(2 * max_ff));
  s->idx_down_.resize(static_cast<size_t>(max_ff));
  if (s->columns()) {
    s->idx_up_.resize(static_cast<size_t>(max_ff));
    s->coef_.resize(static_cast<size_t>(max_ff));
    s->sel_in_.Reserve(max_ff);
    s->sel_down_.Reserve(max_ff);
    s->all_units_.Reserve(max_ff);
    const uint64_t max_blocks = plan.max_blocks;
    s->blocks_.reserve(static_cast<size_t>(max_blocks));
    s->next_blocks_.reserve(static_cast<size_t>(max_blocks));
    s->block_words_.resize(static_cast<size_t>((max_blocks + 63) / 64));
    s->cache_words_.resize(static_cast<size_t>((max_ff + 63) / 64));
  }
  return s;
}

StreamingWeights::~StreamingWeights() {
  if (streamer_) streamer_->Shutdown();
  expert_reader_.reset();  // its pinned expert goes back to the cache
  span_in_ = Batch();
  span_down_ = Batch();
}

uint64_t StreamingWeights::fixed_bytes() const { return plan_.fixed_bytes(); }

uint64_t StreamingWeights::streamed_bytes() const { return plan_.streamed_bytes(); }

const std::byte* StreamingWeights::TensorAddress(const std::string& name) const {
  auto it = plan_.tensor_offsets.find(name);
  if (it == plan_.tensor_offsets.end()) return nullptr;
  return streamer_->base(plan_.attention[static_cast<size_t>(it->second.first)]) +
         it->second.second;
}

void StreamingWeights::ResetSequence() {
  ReleaseSpan();
  streamer_->ResetSequence();
}

void StreamingWeights::BeginToken() { streamer_->BeginToken(); }

Status StreamingWeights::SetCacheBudget(uint64_t bytes) {
  ReleaseSpan();
  predicted_.clear();
  WEIR_RETURN_IF_ERROR(streamer_->SetCacheBudget(bytes));
  options_.cache_budget = bytes;
  return Status::Ok();
}

}  // namespace weir::model
