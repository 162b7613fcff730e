#include "model/trace_recorder.h"

#include <algorithm>
#include <filesystem>

#include "storage/unit_id.h"

namespace weir::model {

namespace {

// Packed bits with every unit set (padding bits clear).
std::vector<uint8_t> AllSet(uint32_t units) {
  std::vector<uint8_t> bits(format::MaskBytes(units), 0xFF);
  if (units % 8 != 0) bits.back() = static_cast<uint8_t>((1u << (units % 8)) - 1);
  return bits;
}

std::string U64(uint64_t v) { return std::to_string(v); }

}  // namespace

format::TraceHeader NeuronTraceHeader(const format::LlamaConfig& config,
                                      std::vector<std::pair<std::string, std::string>> metadata) {
  format::TraceHeader h = format::GluNeuronTraceHeader(config, /*cache_events=*/false);
  metadata.insert(metadata.begin(), {"trace.source", "neurons"});
  h.metadata = std::move(metadata);
  return h;
}

format::TraceHeader ExpertTraceHeader(const format::LlamaConfig& config,
                                      std::vector<std::pair<std::string, std::string>> metadata) {
  format::TraceHeader h;
  h.n_layers = static_cast<uint32_t>(config.n_layers);
  format::TraceKind k;
  k.name = kExpertsKind;
  k.weights_per_unit = 3ull * static_cast<uint64_t>(config.d_model) *
                       static_cast<uint64_t>(config.layers.empty() ? config.d_ff
                                                                   : config.layers[0].d_ff);
  k.units.assign(static_cast<size_t>(config.n_layers), static_cast<uint32_t>(config.n_expert));
  h.kinds.push_back(std::move(k));
  metadata.insert(metadata.begin(),
                  {{"trace.source", "experts"},
                   {"moe.n_expert_used", std::to_string(config.n_expert_used)}});
  h.metadata = std::move(metadata);
  return h;
}

std::vector<std::pair<std::string, std::string>> StreamTraceMetadata(StreamingModel& model) {
  const StreamingOptions& o = model.streamer().options();
  const storage::BlockDevice& dev = model.device();
  return {
      {"trace.source", "streaming"},
      {"pack.file", std::filesystem::path(model.path()).filename().string()},
      {"pack.bytes", U64(dev.size())},
      {"stream.policy", o.policy},
      {"stream.window_tokens", U64(o.policy_options.window_tokens)},
      {"stream.partitions", o.partitions},
      {"stream.block_bytes", U64(o.block_bytes)},
      {"stream.lane_channels", std::to_string(o.lane_channels)},
      {"stream.prefetch_layers", std::to_string(o.prefetch_layers)},
      {"stream.io_batch", U64(o.io_batch)},
      {"stream.staging_bytes", U64(o.staging_bytes)},
      {"stream.stream_attention", o.stream_attention ? "1" : "0"},
      {"memory.budget", U64(model.plan().budget)},
      {"memory.cache_bytes", U64(o.cache_budget)},
      {"device.name", dev.name()},
      {"device.preferred_alignment", U64(dev.preferred_alignment())},
  };
}

Result<format::TraceHeader> StreamTraceHeader(
    const format::LlamaConfig& config, const StreamingWeights& streamed,
    std::vector<std::pair<std::string, std::string>> metadata) {
  format::TraceHeader h;
  h.n_layers = static_cast<uint32_t>(config.n_layers);
  h.has_cache_events = true;
  h.has_step_tokens = true;
  h.metadata = std::move(metadata);
  format::TraceKind attention{kAttentionBlocksKind, 0, {}};
  format::TraceKind bundles{kBundleBlocksKind, 0, {}};
  format::TraceKind inputs{kInputColumnBlocksKind, 0, {}};
  bool any_attention = false, any_input = false;
  for (int l = 0; l < config.n_layers; ++l) {
    const StreamingWeights::LayerBlocks b = streamed.layer_blocks(l);
    if (b.attention_blocks > format::kMaxTraceUnits || b.bundle_blocks > format::kMaxTraceUnits ||
        b.input_blocks > format::kMaxTraceUnits) {
      return Status::Unsupported(
          StrFormat("trace: layer %d has more than %u blocks", l, format::kMaxTraceUnits));
    }
    attention.units.push_back(b.attention_blocks);
    bundles.units.push_back(b.bundle_blocks);
    inputs.units.push_back(b.input_blocks);
    any_attention = any_attention || b.attention_blocks > 0;
    any_input = any_input || b.input_blocks > 0;
  }
  if (any_attention) h.kinds.push_back(std::move(attention));
  h.kinds.push_back(std::move(bundles));
  if (any_input) h.kinds.push_back(std::move(inputs));
  return h;
}

Result<std::unique_ptr<TraceRecorder>> TraceRecorder::Create(const format::TraceHeader& header,
                                                             const format::LlamaConfig& config,
                                                             StreamingWeights* streamed,
                                                             Sink sink) {
  WEIR_ASSIGN_OR_RETURN(format::TraceLayout layout, format::MakeTraceLayout(header, "trace"));
  if (static_cast<int>(header.n_layers) != config.n_layers) {
    return Status::InvalidArgument(StrFormat("trace: header has %u layers, the model %d",
                                             header.n_layers, config.n_layers));
  }
  std::unique_ptr<TraceRecorder> r(new TraceRecorder());
  r->header_ = header;
  r->layout_ = std::move(layout);
  r->n_layers_ = config.n_layers;
  r->streamed_ = streamed;
  r->sink_ = std::move(sink);
  if (streamed == nullptr) {
    if (header.kinds.size() != 1 || header.has_step_tokens) {
      return Status::InvalidArgument("trace: a neuron trace has one kind and no step sizes");
    }
    if (header.kinds[0].name == kExpertsKind) {
      if (config.n_expert <= 0) {
        return Status::InvalidArgument("trace: a routing trace needs a mixture of experts");
      }
      for (int l = 0; l < config.n_layers; ++l) {
        if (header.kinds[0].units[static_cast<size_t>(l)] !=
            static_cast<uint32_t>(config.n_expert)) {
          return Status::InvalidArgument(
              StrFormat("trace: layer %d: units differ from n_expert %d", l, config.n_expert));
        }
      }
      r->routing_ = true;
      return r;
    }
    for (int l = 0; l < config.n_layers; ++l) {
      if (header.kinds[0].units[static_cast<size_t>(l)] !=
          static_cast<uint32_t>(config.layers[static_cast<size_t>(l)].d_ff)) {
        return Status::InvalidArgument(StrFormat("trace: layer %d: units differ from d_ff", l));
      }
    }
    return r;
  }
  if (!streamed->options().record_trace) {
    return Status::InvalidArgument(
        "trace: the streamed weights must record their accesses (StreamingOptions::record_trace)");
  }
  if (!header.has_step_tokens || !header.has_cache_events) {
    return Status::InvalidArgument("trace: a block trace has step sizes and cache events");
  }
  for (size_t k = 0; k < header.kinds.size(); ++k) {
    if (header.kinds[k].name == kAttentionBlocksKind) r->attention_kind_ = static_cast<int>(k);
    if (header.kinds[k].name == kBundleBlocksKind) r->bundle_kind_ = static_cast<int>(k);
    if (header.kinds[k].name == kInputColumnBlocksKind) r->input_kind_ = static_cast<int>(k);
  }
  if (r->bundle_kind_ < 0) return Status::InvalidArgument("trace: no ffn_bundles kind");
  for (int l = 0; l < config.n_layers; ++l) {
    const StreamingWeights::LayerBlocks b = streamed->layer_blocks(l);
    r->blocks_.push_back(b);
    const uint32_t want_attention =
        r->attention_kind_ < 0 ? 0
                               : header.kinds[static_cast<size_t>(r->attention_kind_)]
                                     .units[static_cast<size_t>(l)];
    const uint32_t want_input =
        r->input_kind_ < 0
            ? 0
            : header.kinds[static_cast<size_t>(r->input_kind_)].units[static_cast<size_t>(l)];
    if (b.bundle_blocks !=
            header.kinds[static_cast<size_t>(r->bundle_kind_)].units[static_cast<size_t>(l)] ||
        b.attention_blocks != want_attention || b.input_blocks != want_input) {
      return Status::InvalidArgument(
          StrFormat("trace: layer %d: the header's block counts differ from the engine's", l));
    }
  }
  (void)streamed->TakeTrace();  // accesses before recording starts are not part of the trace
  return r;
}

Result<std::unique_ptr<TraceRecorder>> TraceRecorder::CreateFile(const std::string& path,
                                                                 const format::TraceHeader& header,
                                                                 const format::LlamaConfig& config,
                                                                 StreamingWeights* streamed) {
  WEIR_ASSIGN_OR_RETURN(auto writer, format::TraceWriter::Create(path, header));
  format::TraceWriter* w = writer.get();
  const format::TraceLayout layout = w->layout();
  Sink sink = [w, layout](const TraceStep& step) -> Status {
    WEIR_RETURN_IF_ERROR(w->BeginToken());
    if (layout.step_tokens_offset != 0) WEIR_RETURN_IF_ERROR(w->SetStepTokens(step.n_tokens));
    for (uint32_t l = 0; l < layout.n_layers; ++l) {
      for (uint32_t k = 0; k < layout.n_kinds; ++k) {
        const size_t i = layout.Index(l, k);
        if (layout.units[i] == 0) continue;
        WEIR_RETURN_IF_ERROR(w->SetMaskBits(l, k, step.masks[i]));
        if (layout.has_cache_events) WEIR_RETURN_IF_ERROR(w->SetEvents(l, k, step.events[i]));
      }
    }
    return w->EndToken();
  };
  WEIR_ASSIGN_OR_RETURN(auto r, Create(header, config, streamed, std::move(sink)));
  r->writer_ = std::move(writer);
  return r;
}

TraceRecorder::~TraceRecorder() = default;

void TraceRecorder::OnLayerBegin(int layer, int n_tokens) {
  if (!status_.ok() || finished_) return;
  if (layer < 0 || layer >= n_layers_ || n_tokens <= 0) {
    Fail(Status::Internal(StrFormat("trace: layer %d begins with %d tokens", layer, n_tokens)));
    return;
  }
  if (streamed_ != nullptr) CloseWindow();
  if (layer == 0) {
    FlushStep();
    if (!status_.ok()) return;
    const size_t n_blocks = layout_.mask_offset.size();
    step_tokens_ = n_tokens;
    in_step_ = true;
    pending_.assign(streamed_ != nullptr ? 1 : static_cast<size_t>(n_tokens), TraceStep{});
    for (TraceStep& s : pending_) {
      s.n_tokens = streamed_ != nullptr ? static_cast<uint32_t>(n_tokens) : 1;
      s.masks.resize(n_blocks);
      s.events.assign(n_blocks, format::CacheEvents{});
      for (size_t i = 0; i < n_blocks; ++i) {
        const uint32_t units = layout_.units[i];
        if (units == 0) continue;
        // Neuron traces default to a dense MLP; block and routing traces to nothing accessed.
        s.masks[i] = streamed_ != nullptr || routing_
                         ? std::vector<uint8_t>(format::MaskBytes(units), 0)
                         : AllSet(units);
      }
    }
    units_seen_.assign(static_cast<size_t>(n_layers_), 0);
  }
  if (!in_step_) {
    Fail(Status::Internal(StrFormat("trace: layer %d began before layer 0", layer)));
    return;
  }
  if (streamed_ != nullptr) StartWindow(layer, attention_kind_ >= 0 ? attention_kind_ : bundle_kind_);
}

void TraceRecorder::OnInput(int layer, sparsity::Site site, const float* x, int64_t dim) {
  (void)x, (void)dim;
  if (!status_.ok() || finished_ || streamed_ == nullptr || site != sparsity::Site::kMlpIn) return;
  // With streamed attention, the attention window ends where the MLP starts.
  if (window_layer_ == layer && window_kind_ == attention_kind_ && attention_kind_ >= 0) {
    CloseWindow();
    StartWindow(layer, bundle_kind_);
  }
}

void TraceRecorder::OnExperts(int layer, const int32_t* experts, int k) {
  if (!status_.ok() || finished_ || !routing_ || !in_step_) return;
  if (layer < 0 || layer >= n_layers_) return;
  const int t = units_seen_[static_cast<size_t>(layer)]++;
  if (t >= static_cast<int>(pending_.size())) {
    Fail(Status::Internal(StrFormat(
        "trace: layer %d reported experts for token %d of a %d-token step", layer, t,
        step_tokens_)));
    return;
  }
  const size_t i = layout_.Index(static_cast<uint32_t>(layer), 0);
  const uint32_t units = layout_.units[i];
  std::vector<uint8_t>& m = pending_[static_cast<size_t>(t)].masks[i];
  for (int j = 0; j < k; ++j) {
    const int32_t e = experts[j];
    if (e < 0 || static_cast<uint32_t>(e) >= units) {
      Fail(Status::Internal(
          StrFormat("trace: layer %d: expert %d outside 0..%u", layer, e, units - 1)));
      return;
    }
    m[static_cast<size_t>(e) / 8] |= static_cast<uint8_t>(1u << (e % 8));
  }
}

void TraceRecorder::OnMlpUnits(int layer, const sparsity::IndexList& down) {
  if (!status_.ok() || finished_ || streamed_ != nullptr || routing_ || !in_step_) return;
  if (layer < 0 || layer >= n_layers_) return;
  const int t = units_seen_[static_cast<size_t>(layer)]++;
  if (t >= static_cast<int>(pending_.size())) {
    Fail(Status::Internal(StrFormat("trace: layer %d reported units for token %d of a %d-token step",
                                    layer, t, step_tokens_)));
    return;
  }
  const size_t i = layout_.Index(static_cast<uint32_t>(layer), 0);
  const uint32_t units = layout_.units[i];
  std::vector<uint8_t>& m = pending_[static_cast<size_t>(t)].masks[i];
  if (down.all()) {
    m = AllSet(units);
    return;
  }
  std::fill(m.begin(), m.end(), 0);
  for (int32_t u : down.indices()) {
    if (u < 0 || static_cast<uint32_t>(u) >= units) {
      Fail(Status::Internal(StrFormat("trace: layer %d: unit %d outside 0..%u", layer, u, units)));
      return;
    }
    m[static_cast<size_t>(u) / 8] |= static_cast<uint8_t>(1u << (u % 8));
  }
}

void TraceRecorder::StartWindow(int layer, int kind) {
  window_layer_ = layer;
  window_kind_ = kind;
  window_stats_ = streamed_->stats();
  window_evictions_ = streamed_->cache_stats().evicted_entries;
}

void TraceRecorder::CloseWindow() {
  if (window_layer_ < 0) return;
  const int layer = window_layer_, kind = window_kind_;
  window_layer_ = window_kind_ = -1;
  const std::vector<storage::UnitId> ids = streamed_->TakeTrace();
  const StreamStats d = streamed_->stats() - window_stats_;
  const uint64_t evictions = streamed_->cache_stats().evicted_entries - window_evictions_;
  if (pending_.empty()) return;
  TraceStep& step = pending_.front();
  const StreamingWeights::LayerBlocks& b = blocks_[static_cast<size_t>(layer)];
  // Without streamed attention the window spans the whole layer (only bundle blocks in it).
  for (storage::UnitId id : ids) {
    const uint32_t slab = storage::UnitLayer(id);
    const uint64_t block = storage::UnitIndex(id);
    int k = -1;
    if (attention_kind_ >= 0 && slab == b.attention_slab && block < b.attention_blocks) {
      k = attention_kind_;
    } else if (slab == b.bundle_slab && block < b.bundle_blocks) {
      k = bundle_kind_;
    } else if (input_kind_ >= 0 && slab == b.input_slab && block < b.input_blocks) {
      k = input_kind_;
    }
    // The MLP window holds both MLP kinds of a column pack.
    const bool fits = k == kind || (kind == bundle_kind_ && k >= 0 && k == input_kind_);
    if (!fits) {
      Fail(Status::Internal(StrFormat(
          "trace: layer %d, kind '%s': an access to block %llu of extent %u belongs elsewhere",
          layer, header_.kinds[static_cast<size_t>(kind)].name.c_str(),
          static_cast<unsigned long long>(block), slab)));
      return;
    }
    std::vector<uint8_t>& m = step.masks[layout_.Index(static_cast<uint32_t>(layer),
                                                       static_cast<uint32_t>(k))];
    m[block / 8] |= static_cast<uint8_t>(1u << (block % 8));
  }
  const size_t i = layout_.Index(static_cast<uint32_t>(layer), static_cast<uint32_t>(kind));
  if (streamed_->resident_mode()) {
    step.masks[i] = AllSet(layout_.units[i]);
    if (kind == bundle_kind_ && input_kind_ >= 0) {
      const size_t in = layout_.Index(static_cast<uint32_t>(layer), static_cast<uint32_t>(input_kind_));
      step.masks[in] = AllSet(layout_.units[in]);
    }
  }
  format::CacheEvents& e = step.events[i];
  e.hits = static_cast<uint32_t>(d.block_hits);
  e.misses = static_cast<uint32_t>(d.block_accesses - d.block_hits);
  e.evictions = static_cast<uint32_t>(evictions);
  e.bytes_read = d.storage_bytes;
}

void TraceRecorder::FlushStep() {
  if (!in_step_) return;
  in_step_ = false;
  for (const TraceStep& s : pending_) {
    if (Status st = sink_(s); !st.ok()) {
      Fail(std::move(st));
      return;
    }
    ++records_;
  }
  pending_.clear();
}

Status TraceRecorder::Finish() {
  if (finished_) return status_;
  if (status_.ok()) {
    if (streamed_ != nullptr) CloseWindow();
    if (status_.ok()) FlushStep();
  }
  finished_ = true;
  if (writer_) {
    Status st = writer_->Close();
    if (!st.ok()) Fail(std::move(st));
  }
  return status_;
}

}  // namespace weir::model
