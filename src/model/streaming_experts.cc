// ExpertReader (streaming_experts.h): the ExpertSource the session's MoE MLP reads its chosen
// experts from. The cached unit is one expert of one layer (gate, up and down in one
// page-aligned record), read in one piece. A pack written with an expert order (weir pack
// --calib) stores expert e in record PackGroup::ExpertRecord(e): the block index of the cache is
// the record, the MoE MLP's ids stay the experts'.
#include "model/streaming_experts.h"

#include <algorithm>
#include <cstring>

#include "model/recall_gate.h"
#include "storage/unit_id.h"

namespace weir::model {
namespace {

class ExpertReader final : public LayoutMlp, public ExpertSource {
  using Group = StreamPlan::Group;

 public:
  ExpertReader(const StreamPlan& plan, BlockStreamer* streamer)
      : plan_(plan), streamer_(streamer) {}
  ~ExpertReader() override { ReleaseAll(); }

  Status Forward(int layer, const float*, int, float*, ThreadPool*, sparsity::SparsityPolicy*,
                 uint64_t*) override {
    return Status::Unsupported(StrFormat(
        "streaming: layer %d of an experts pack is computed from its ExpertSource", layer));
  }
  ExpertSource* experts() override { return this; }
  uint64_t scratch_bytes() const override { return 0; }

  Status Prepare(int layer, std::span<const int32_t> experts) override {
    const Group& g = GroupOf(layer);
    ReleaseAll();  // a step that failed midway left its expert pinned
    if (streamer_->resident_mode() && !streamer_->held(g.extent))
      WEIR_RETURN_IF_ERROR(streamer_->LoadResident(g.extent));
    Settle(layer, experts);
    // Sparse channel records count a use per read, in AcquireChannels (one per token).
    if (SparseChannels(g)) return Status::Ok();
    uint64_t hits = experts.size();
    if (!streamer_->held(g.extent)) {
      hits = 0;
      for (int32_t x : experts) {
        hits += streamer_->Contains(storage::MakeUnitId(g.extent.slab, g.extent.kind, Record(g, x)));
      }
    }
    streamer_->UpdateStats([&](StreamStats& s) {
      s.expert_uses += experts.size();
      s.expert_hits += hits;
    });
    if (streamer_->held(g.extent)) return Status::Ok();
    // The chosen experts go to the I/O thread at once: it reads the next while the first is
    // computed. What is cached or already queued (predicted) is skipped.
    Records(g, experts, &blocks_);
    streamer_->QueueMissing(g.extent, blocks_, 0, nullptr);
    return Status::Ok();
  }

  Result<ExpertWeights> Acquire(int layer, int e) override {
    const Group& g = GroupOf(layer);
    const format::PackGroup& pg = g.pack;
    WEIR_CHECK(e >= 0 && e < pg.n_expert);
    if (streamer_->held(g.extent)) {
      streamer_->CountAccess(g.extent.block_bytes, true);
    } else {
      Status st = streamer_->AcquireBlock(g.extent, Record(g, e), &batch_, nullptr,
                                          /*claim_queued=*/true);
      if (!st.ok()) {
        streamer_->Release(&batch_, UINT64_MAX, g.extent);
        return st.WithContext(StrFormat("expert %d of layer %d", e, layer));
      }
      batch_layer_ = layer;
    }
    const std::byte* base = streamer_->base(g.extent) + Record(g, e) * g.extent.place_bytes;
    ExpertWeights x;
    x.w_down = TensorView{pg.expert_type[2], Shape{pg.d_model, pg.d_ff}, base + pg.expert_part[2]};
    if (pg.expert_columns) {
      x.w_in_t = TensorView{pg.expert_type[0], Shape{2 * int64_t{pg.d_model}, pg.d_ff}, base};
      return x;
    }
    x.w_gate = TensorView{pg.expert_type[0], Shape{pg.d_ff, pg.d_model}, base + pg.expert_part[0]};
    x.w_up = TensorView{pg.expert_type[1], Shape{pg.d_ff, pg.d_model}, base + pg.expert_part[1]};
    return x;
  }

  bool channel_records() const override {
    return plan_.n_layers > 0 && plan_.groups[0].pack.expert_columns;
  }

  // The kept channels' records and W_down of expert e: W_down from the cache when its copy is
  // there (then only the kept channels' records are read), else in one compact read with them
  // (RecordReader: the channel records and W_down are records of one size from the expert's
  // start), and a copy of it admitted into the cache when the policy makes room. The whole
  // expert from memory when it is resident.
  Result<ExpertWeights> AcquireChannels(int layer, int e,
                                        std::span<const int32_t> channels) override {
    const Group& g = GroupOf(layer);
    if (!SparseChannels(g)) return Acquire(layer, e);
    const format::PackGroup& pg = g.pack;
    WEIR_CHECK(e >= 0 && e < pg.n_expert);
    down_pin_.Reset();  // a step that failed midway left one pinned
    // One access of the copy (the policy counts it): ready on a hit, a loader on a miss that
    // has room, invalid when the partition has none.
    WEIR_ASSIGN_OR_RETURN(down_pin_, streamer_->AcquireCopy(g.down_copy, static_cast<uint64_t>(e),
                                                            static_cast<size_t>(g.down_bytes)));
    const bool down_cached = down_pin_.valid() && !down_pin_.is_loader();
    slots_.assign(channels.begin(), channels.end());
    const int64_t n_ch = static_cast<int64_t>(slots_.size());
    if (!down_cached) {
      for (int64_t r = 0; r < pg.down_records; ++r) slots_.push_back(pg.d_model + r);
    }
    places_.resize(slots_.size());
    const uint64_t at = Record(g, e) * pg.expert_stride;  // in the file
    const Result<bool> read_or = streamer_->ReadRecords(g.extent, pg.channel_bytes, slots_.data(),
                                                        static_cast<int64_t>(slots_.size()),
                                                        places_.data(), at);
    if (!read_or.ok()) {
      down_pin_.Reset();  // a loader's reservation is given back
      return read_or.status();
    }
    const bool read = *read_or;
    streamer_->UpdateStats([&](StreamStats& s) {
      ++s.expert_uses;  // never a hit: the channels are read
      ++s.down_uses;
      if (down_cached) ++s.down_hits;
    });
    if (down_cached) streamer_->CountAccess(g.down_bytes, false);  // the cache counts the hit
    if (!read) {
      down_pin_.Reset();
      return Status::OutOfMemory(StrFormat(
          "streaming: the record buffer cannot hold %zu channel records of expert %d of layer %d",
          slots_.size(), e, layer));
    }
    // Without a read-ahead the records land in ascending places: W_down's records follow the
    // channels' back to back.
    for (size_t k = 0; k < places_.size(); ++k) {
      if (places_[k] != static_cast<int32_t>(k)) {
        down_pin_.Reset();
        return Status::Internal("streaming: channel records out of place in the record buffer");
      }
    }
    const std::byte* base = streamer_->records();
    const std::byte* down = base + static_cast<uint64_t>(n_ch) * pg.channel_bytes;
    if (down_pin_.is_loader()) {
      // A miss with room: the copy is what was just read; the product uses it as a hit would.
      std::memcpy(down_pin_.mutable_data(), down, static_cast<size_t>(g.down_bytes));
      down_pin_.Publish();
    }
    if (down_pin_.valid()) down = down_pin_.data();
    ExpertWeights x;
    x.w_in_t = TensorView{pg.expert_type[0], Shape{2 * n_ch, pg.d_ff}, base};
    x.in_compact = true;
    x.w_down = TensorView{pg.expert_type[2], Shape{pg.d_model, pg.d_ff}, down};
    return x;
  }

  void Release(int layer, int e) override {
    down_pin_.Reset();  // the W_down copy of a channel-record use stays cached, evictable
    const Group& g = GroupOf(layer);
    if (streamer_->held(g.extent) || batch_layer_ != layer) return;
    // Experts are acquired and released one by one: the batch holds e's record only.
    streamer_->Release(&batch_, Record(g, e) + 1, g.extent);
    // Staging may have room now for predicted experts it refused when they were predicted.
    QueuePredicted();
  }

  bool predicts() const override {
    return plan_.options.prefetch_layers >= 0 && !(channel_records() && streamer_->sparse_mlp());
  }

  void Predict(int layer, std::span<const int32_t> experts) override {
    if (layer < 0 || layer >= plan_.n_layers) return;
    const Group& g = GroupOf(layer);
    if (streamer_->held(g.extent)) return;
    predicted_layer_ = layer;
    predicted_.assign(experts.begin(), experts.end());
    preload_ = gate_.open();
    QueuePredicted();
  }

  // The layer's experts in the cache proper (BlockStreamer::ResidentBlocks: with read-ahead on,
  // not what the I/O thread holds in staging, so the mask does not depend on its timing).
  const uint64_t* CachedExperts(int layer) override {
    const Group& g = GroupOf(layer);
    // Resident mode: every expert is (or will be, at this step's Prepare) in memory.
    if (streamer_->resident_mode() || streamer_->held(g.extent)) return nullptr;
    const size_t words = static_cast<size_t>((g.extent.n_blocks + 63) / 64);
    cached_words_.resize(words);
    streamer_->ResidentBlocks(g.extent, cached_words_.data());
    if (g.pack.expert_order.empty()) return cached_words_.data();
    // Records to experts.
    record_words_ = cached_words_;
    std::fill(cached_words_.begin(), cached_words_.end(), 0);
    for (int64_t r = 0; r < g.pack.n_expert; ++r) {
      if ((record_words_[static_cast<size_t>(r / 64)] >> (r % 64)) & 1) {
        const int64_t e = g.pack.ExpertInRecord(r);
        cached_words_[static_cast<size_t>(e / 64)] |= uint64_t{1} << (e % 64);
      }
    }
    return cached_words_.data();
  }

  void ReleaseHeld() override { ReleaseAll(); }

  void ReleaseAll() {
    down_pin_.Reset();
    if (batch_layer_ >= 0) streamer_->Release(&batch_, UINT64_MAX, GroupOf(batch_layer_).extent);
    batch_layer_ = -1;
  }

 private:
  // Queues the predicted experts not cached or queued yet, as far as staging has room.
  void QueuePredicted() {
    if (predicted_layer_ < 0 || !preload_) return;
    const Group& g = GroupOf(predicted_layer_);
    Records(g, predicted_, &blocks_);
    streamer_->QueueMissing(g.extent, blocks_, 0, nullptr);
  }

  // A sparsity policy runs over channel records that are not resident: they are read per use.
  bool SparseChannels(const Group& g) const {
    return g.pack.expert_columns && streamer_->sparse_mlp() && !streamer_->held(g.extent);
  }

  static uint64_t Record(const Group& g, int32_t e) {
    return static_cast<uint64_t>(g.pack.ExpertRecord(e));
  }
  // The records of `experts`, in the experts' (ascending) order, the order MoeMlp acquires them:
  // staging fills with the first needed (record order would queue later experts first and leave
  // the first to an on-demand read that cancels the queue: measured, Mixtral small read 24 % more).
  static void Records(const Group& g, std::span<const int32_t> experts, std::vector<uint64_t>* out) {
    out->clear();
    for (int32_t e : experts) out->push_back(Record(g, e));
  }

  const Group& GroupOf(int layer) {
    WEIR_CHECK(layer >= 0 && layer < plan_.n_layers);
    return plan_.group_of_layer(layer);
  }

  // The prediction for this layer meets the choice: count its recall, and cancel the
  // mispredicted experts the I/O thread has not started (read ones stay cached, evictable).
  void Settle(int layer, std::span<const int32_t> chosen) {
    if (predicted_layer_ != layer) {
      predicted_layer_ = -1;
      return;
    }
    uint64_t used = 0;
    const Group& g = GroupOf(layer);
    for (int32_t e : predicted_) {
      if (std::binary_search(chosen.begin(), chosen.end(), e)) {
        ++used;
      } else {
        streamer_->Cancel(storage::MakeUnitId(g.extent.slab, g.extent.kind, Record(g, e)));
      }
    }
    gate_.Observe(used, chosen.size());
    streamer_->UpdateStats([&](StreamStats& s) {
      if (preload_) s.experts_preloaded += predicted_.size();
      s.experts_predicted += predicted_.size();
      s.experts_predicted_used += used;
      s.experts_chosen_predicted += chosen.size();
    });
    predicted_layer_ = -1;
  }

  const StreamPlan& plan_;
  BlockStreamer* streamer_;
  BlockStreamer::Batch batch_;  // the pinned expert
  storage::CacheHandle down_pin_;  // AcquireChannels: the pinned W_down copy, if cached
  int batch_layer_ = -1;
  std::vector<uint64_t> blocks_;
  std::vector<int64_t> slots_;   // AcquireChannels: the records read
  std::vector<int32_t> places_;  // and where they landed
  std::vector<uint64_t> cached_words_;  // CachedExperts' answer
  std::vector<uint64_t> record_words_;  // its records' mask
  std::vector<int32_t> predicted_;
  int predicted_layer_ = -1;
  bool preload_ = false;  // the current prediction is being read
  // Predicted experts are read only while predictions have been right often enough (measured at
  // 25 % of the pack with recall 0.53: Mixtral small 1.16 tok/s reading the predictions against
  // 1.46 reading nothing ahead; Qwen3 MoE small, recall 0.54: no difference; docs/moe.md).
  RecallGate gate_;
};

}  // namespace

std::unique_ptr<LayoutMlp> MakeExpertReader(const StreamPlan& plan, BlockStreamer* streamer) {
  return std::make_unique<ExpertReader>(plan, streamer);
}

}  // namespace weir::model
