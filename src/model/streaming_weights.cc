// StreamingWeights (streaming_weights.h): the plan, the block streamer and the layout's MLP made
// and wired together, and the calls passed on to them.
#include "model/streaming_weights.h"

#include <algorithm>

#include "model/streaming_bundles.h"
#include "model/streaming_columns.h"
#include "model/streaming_experts.h"
#include "model/glu_of.h"

namespace weir::model {

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
  const kernels::Glu glu = GluOf(pack.config().arch);
  WEIR_ASSIGN_OR_RETURN(std::vector<StreamPlan::RecordTables> tables,
                        ColumnMlp::ReadRecordTables(pack, device));
  {
    // The charge function holds a throwaway cache: freed before the real one is made.
    WEIR_ASSIGN_OR_RETURN(StreamPlan::EntryCharge charge, BlockStreamer::EntryChargeOf(options));
    WEIR_ASSIGN_OR_RETURN(s->plan_, StreamPlan::Build(pack, options, charge, std::move(tables)));
  }
  const StreamPlan& plan = s->plan_;
  WEIR_ASSIGN_OR_RETURN(s->streamer_, BlockStreamer::Create(plan, device));
  // The pack's layout, chosen once.
  if (plan.experts()) {
    s->mlp_ = MakeExpertReader(plan, s->streamer_.get());
  } else if (plan.columns()) {
    WEIR_ASSIGN_OR_RETURN(s->mlp_, ColumnMlp::Create(plan, s->streamer_.get(), glu));
  } else {
    WEIR_ASSIGN_OR_RETURN(s->mlp_, BundleMlp::Create(plan, s->streamer_.get(), glu));
  }
  // fixed_bytes counts the plan's scratch, which bounds every layout's.
  WEIR_CHECK(s->mlp_->scratch_bytes() <= plan.scratch_bytes);
  return s;
}

StreamingWeights::~StreamingWeights() {
  if (streamer_) streamer_->Shutdown();
  mlp_.reset();  // what it pins goes back to the cache
}

Status StreamingWeights::Forward(int layer, const float* x, int n, float* out, ThreadPool* pool,
                                 sparsity::SparsityPolicy* policy, uint64_t* weight_bytes) {
  WEIR_CHECK(layer >= 0 && layer < plan_.n_layers && n > 0);
  if (weight_bytes != nullptr) *weight_bytes = 0;
  return mlp_->Forward(layer, x, n, out, pool, policy, weight_bytes);
}

uint64_t StreamingWeights::fixed_bytes() const { return plan_.fixed_bytes(); }

uint64_t StreamingWeights::lendable_reserve() const {
  const StreamingOptions& o = plan_.options;
  const bool safe = o.compact_span && o.span_read_ahead == SpanAhead::kOff && !o.record_trace &&
                    o.partitions == "shared" &&
                    (span_keep_ == 0 || plan_.SpanRecordsFit(span_keep_));
  return safe ? plan_.span_lendable_bytes : 0;
}

uint64_t StreamingWeights::streamed_bytes() const { return plan_.streamed_bytes(); }

const std::byte* StreamingWeights::TensorAddress(const std::string& name) const {
  auto it = plan_.tensor_offsets.find(name);
  if (it == plan_.tensor_offsets.end()) return nullptr;
  return streamer_->base(plan_.attention[static_cast<size_t>(it->second.first)]) +
         it->second.second;
}

void StreamingWeights::ResetSequence() {
  mlp_->ReleaseHeld();
  streamer_->ResetSequence();
}

void StreamingWeights::BeginToken() { streamer_->BeginToken(); }

Status StreamingWeights::set_sparse(bool sparse) {
  if (sparse == streamer_->sparse_mlp()) return Status::Ok();
  mlp_->ReleaseHeld();  // the shares may change (BlockStreamer::set_sparse_mlp)
  return streamer_->set_sparse_mlp(sparse);
}

uint64_t StreamingWeights::down_copies_total() const {
  uint64_t n = 0;
  for (const StreamPlan::Group& g : plan_.groups) n += g.down_copy.n_blocks;
  return n;
}

uint64_t StreamingWeights::down_copies_fit(uint64_t cache_bytes) const {
  if (!sparse_experts()) return 0;
  const std::vector<uint64_t> shares = streamer_->PartitionWeights(cache_bytes);
  std::vector<uint64_t> room(shares.begin(), shares.end() - 1);  // the group partitions
  std::vector<uint64_t> experts(room.size(), 0);
  for (const StreamPlan::Extent& a : plan_.attention)
    room[a.partition] = room[a.partition] > a.charge ? room[a.partition] - a.charge : 0;
  for (const StreamPlan::Group& g : plan_.groups)
    experts[g.down_copy.partition] += g.down_copy.n_blocks;
  const uint64_t copy = down_copy_charge();
  uint64_t n = 0;
  for (size_t p = 0; p < room.size(); ++p) n += std::min(experts[p], copy > 0 ? room[p] / copy : 0);
  return n;
}

uint64_t StreamingWeights::down_copy_charge() const {
  if (!plan_.expert_records()) return 0;
  uint64_t most = 0;
  for (const StreamPlan::Group& g : plan_.groups) {
    most = std::max<uint64_t>(most, streamer_->EntryCharge(g.down_bytes));
  }
  return most;
}

Status StreamingWeights::SetCacheBudget(uint64_t bytes) {
  mlp_->ReleaseHeld();
  mlp_->ForgetPredictions();
  WEIR_RETURN_IF_ERROR(streamer_->SetCacheBudget(bytes));
  options_.cache_budget = bytes;
  return Status::Ok();
}

}  // namespace weir::model
