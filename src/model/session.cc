#include "model/session.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "model/glu_of.h"
#include "sparsity/select.h"

namespace weir::model {
namespace {
// Queries that share one pass over a segment of keys and values (kernels/attention.h): a prefill
// call's queries of one key-value head (32 tokens x a GQA group of up to 4).
constexpr int kAttnBlock = 128;
}  // namespace

Result<std::unique_ptr<Session>> Session::Create(const Model& model, ThreadPool* pool,
                                                 const SessionOptions& options) {
  auto s = std::unique_ptr<Session>(new Session(model, pool));
  WEIR_RETURN_IF_ERROR(s->Allocate(options));
  return s;
}

Status Session::Allocate(const SessionOptions& options) {
  const auto& c = model_.config();
  int ctx = options.ctx > 0 ? options.ctx : (c.ctx_len > 0 ? std::min(c.ctx_len, 4096) : 2048);
  if (ctx > (1 << 20)) return Status::InvalidArgument(StrFormat("context size %d is too large (max 1048576)", ctx));
  if (options.n_batch <= 0) return Status::InvalidArgument(StrFormat("batch size %d must be positive", options.n_batch));
  n_batch_ = std::min(options.n_batch, ctx);
  WEIR_RETURN_IF_ERROR(kv_.Init(c, ctx, n_batch_, options.kv_types));
  seq_.assign(static_cast<size_t>(n_batch_), Seq{&kv_, 0});

  size_t max_q = 0, max_kv = 0, max_ff = 0;
  for (const auto& L : c.layers) {
    max_q = std::max(max_q, static_cast<size_t>(L.n_head * c.head_dim));
    max_kv = std::max(max_kv, static_cast<size_t>(L.n_head_kv * c.head_dim));
    max_ff = std::max(max_ff, static_cast<size_t>(L.d_ff));
  }
  streamed_ = options.streamed;
  if (!c.IsMoe() && options.expert_bias != 1.0f) {
    return Status::InvalidArgument(StrFormat(
        "%s: a routing bias toward cached experts (gamma %g) needs a mixture of experts; %s has "
        "none",
        model_.file().path.c_str(), options.expert_bias, c.arch->name));
  }
  if (c.IsMoe()) {
    WEIR_ASSIGN_OR_RETURN(moe_, MoeMlp::Create(c, n_batch_));
    WEIR_RETURN_IF_ERROR(moe_->set_expert_bias(options.expert_bias));
    moe_->set_observer(&observer_);
    if (options.experts != nullptr) {
      expert_source_ = options.experts;
    } else if (streamed_ != nullptr && streamed_->experts() != nullptr) {
      expert_source_ = streamed_->experts();  // a pack's experts, read from storage
    } else {
      experts_ = std::make_unique<ResidentExperts>(model_.weights());
      expert_source_ = experts_.get();
    }
    max_ff = std::max(max_ff, static_cast<size_t>(c.d_model));  // gate_ holds its output
  }
  if (streamed_ != nullptr) {
    max_ff = std::max(max_ff, static_cast<size_t>(c.d_model));  // gate_ holds its output
    streamed_->set_span_keep(0);  // until a span selection says otherwise (below)
  }
  // The streamer's mode: dense until a pruning policy says otherwise (below). Set once, at the
  // end: with experts stored as channel records the cache's shares change with it.
  bool stream_sparse = false;
  const size_t B = static_cast<size_t>(n_batch_), f = sizeof(float);
  const size_t threads = pool_ ? static_cast<size_t>(pool_->size()) : 1;
  bool ok = x_.Reset(B * c.d_model * f) && xb_.Reset(B * c.d_model * f) && q_.Reset(B * max_q * f) &&
            k_.Reset(B * max_kv * f) && v_.Reset(B * max_kv * f) && att_.Reset(B * max_q * f) &&
            gate_.Reset(B * max_ff * f) &&
            up_.Reset(B * max_ff * f) && logits_.Reset(B * static_cast<size_t>(c.vocab_size) * f);
  if (!ok) return Status::OutOfMemory("cannot allocate session activation buffers");
  const size_t max_heads = max_q / static_cast<size_t>(c.head_dim);
  queries_.resize(B * max_heads);
  WEIR_RETURN_IF_ERROR(attn_ws_.Init(c.head_dim, ctx, static_cast<int>(B * max_heads),
                                     kAttnBlock, static_cast<int>(threads)));

  if (options.sparsity != nullptr) {
    policy_ = options.sparsity->Clone();
    std::vector<sparsity::LayerDims> dims;
    for (const auto& L : c.layers) {
      dims.push_back({c.d_model, static_cast<int64_t>(L.n_head) * c.head_dim,
                      static_cast<int64_t>(L.n_head_kv) * c.head_dim, L.d_ff});
    }
    WEIR_RETURN_IF_ERROR(policy_->Prepare(dims));
    for (int l = 0; l < static_cast<int>(c.layers.size()); ++l) {
      const float* norm = model_.weights().layers[static_cast<size_t>(l)].ffn_norm;
      if (norm != nullptr) {
        policy_->SetMlpInputScale(l, std::span<const float>(norm, static_cast<size_t>(c.d_model)));
      }
    }
    bool sites[sparsity::kNumSites];
    bool any = false;
    for (int s = 0; s < sparsity::kNumSites; ++s) {
      sites[s] = policy_->MayPrune(static_cast<sparsity::Site>(s));
      any = any || sites[s];
    }
    const bool prunes = any || policy_->unit_predictor() != sparsity::UnitPredictor::kNone;
    if (policy_->unit_predictor() == sparsity::UnitPredictor::kGate &&
        c.arch->activation != format::Activation::kSilu) {
      // The gate predictor (CATS) ranks units by |silu(g)| (sparsity/select.h); on a GeGLU model
      // that is not the unit's activation.
      return Status::Unsupported("--sparsity " + policy_->info().name + " predicts MLP units from |silu(gate)|, "
                                 "but " + c.arch->name + " uses " + format::ActivationName(c.arch->activation) +
                                 "; use a policy without the gate predictor (glu, up, teal, dip, dip-ca)");
    }
    if (prunes && moe_ != nullptr) {
      // Pruning inside each chosen expert (moe.h, set_sparsity). A streamed experts pack reads
      // whole experts, unless its experts are stored as channel records (weir pack --layout
      // experts-columns): then a token's kept channels are read (docs/moe.md).
      const bool channels = expert_source_ != experts_.get() && expert_source_->channel_records();
      if (expert_source_ != experts_.get() && !channels) {
        return Status::Unsupported("--sparsity " + policy_->info().name + " on " + c.arch->name +
                                   " (mixture of experts) with a pack whose experts are read "
                                   "whole: write the pack with `weir pack --layout "
                                   "experts-columns` (or run the GGUF)");
      }
      if (channels && policy_->unit_predictor() != sparsity::UnitPredictor::kNone) {
        return Status::Unsupported("--sparsity " + policy_->info().name + " predicts MLP units "
                                   "from the whole gate or up product; experts stored as channel "
                                   "records are pruned by input channel and neuron (dip, dip-ca, "
                                   "glu); run the GGUF for " + policy_->info().name);
      }
      if (channels && streamed_ != nullptr) stream_sparse = true;
      if (!channels && model_.file().TiledTensorCount() > 0) {
        return Status::InvalidArgument(
            "--sparsity " + policy_->info().name + ": this model was loaded with its weights "
            "tiled for dense decoding, and sparse products need them row by row (load it without "
            "LoadOptions::tile_linear)");
      }
      WEIR_RETURN_IF_ERROR(moe_->set_sparsity(policy_.get()));
    } else if (prunes && streamed_ != nullptr) {
      // A streamed pack computes its MLP from the pack's own columns (streaming_weights.h).
      const std::string name = policy_->info().name;
      if (!streamed_->columns()) {
        return Status::Unsupported(
            "--sparsity " + name + " with a streamed pack needs the column layout: write the "
            "pack with `weir pack --layout columns`");
      }
      if (sites[static_cast<int>(sparsity::Site::kAttnIn)] ||
          sites[static_cast<int>(sparsity::Site::kAttnOut)] ||
          policy_->unit_predictor() != sparsity::UnitPredictor::kNone) {
        return Status::Unsupported(
            "--sparsity " + name + " is not supported with a streamed pack: streaming applies "
            "sparsity to MLP columns only (dense, glu, dip, dip-ca); run the GGUF for " + name);
      }
      stream_sparse = true;
      // A span selection's records are read into a buffer of their own; how many a group keeps
      // decides whether the memory plan may lend the rest of the reserve (streaming_weights.h).
      const sparsity::PolicyInfo& info = policy_->info();
      if (info.mlp_in_span > 1 && sites[static_cast<int>(sparsity::Site::kMlpIn)]) {
        streamed_->set_span_keep(sparsity::KeepCount(info.mlp_in_keep, c.d_model));
      }
    } else if (prunes) {
      if (model_.file().TiledTensorCount() > 0) {
        return Status::InvalidArgument(
            "--sparsity " + policy_->info().name + ": this model was loaded with its weights "
            "tiled for dense decoding, and sparse products need them row by row (load it without "
            "LoadOptions::tile_linear)");
      }
      WEIR_ASSIGN_OR_RETURN(transposed_, TransposedWeights::Build(model_.weights(), sites, pool_));
    } else {
      policy_.reset();  // never prunes: the dense path is the same computation
    }
    const int64_t widest = static_cast<int64_t>(std::max({static_cast<size_t>(c.d_model), max_q, max_ff}));
    sel_in_.Reserve(widest);
    sel_units_.Reserve(widest);
    sel_down_.Reserve(widest);
  }
  if (streamed_ != nullptr) WEIR_RETURN_IF_ERROR(streamed_->set_sparse(stream_sparse));

  // The MLP provider, once for every layer (mlp_provider.h).
  MlpContext mc;
  mc.model = &model_;
  mc.pool = pool_;
  mc.glu = GluOf(c.arch);
  mc.gate = gate_.data<float>();
  mc.up = up_.data<float>();
  mc.observer = &observer_;
  mc.traffic = &traffic_;
  if (options.m2cache != nullptr) {
    if (moe_ != nullptr || streamed_ != nullptr || policy_ != nullptr) {
      return Status::Unsupported("--m2cache computes a dense model's MLP from its own neuron store; it does not combine "
                                 "with --sparsity, a streamed pack or a mixture of experts");
    }
    if (options.m2cache_source == nullptr && options.m2cache->store == nullptr) {
      return Status::InvalidArgument("--m2cache: the weights hold no neuron store and no layer source was given");
    }
    // The rows come from the given source, else from the store in DRAM (a ResidentSource).
    const int source_layers = options.m2cache_source ? options.m2cache_source->n_layers()
                                                     : options.m2cache->store->n_layers();
    if (source_layers != c.n_layers) {
      return Status::InvalidArgument("--m2cache: the neuron store has " + std::to_string(source_layers) +
                                     " layers, the model " + std::to_string(c.n_layers) +
                                     ": it was built for another model");
    }
    for (int l = 0; options.m2cache_source && l < c.n_layers; ++l) {
      const m2cache::LayerShape s = options.m2cache_source->shape(l);
      const int64_t d_ff = model_.weights().layers[static_cast<size_t>(l)].w_gate.rows();
      if (s.d_model != c.d_model || s.d_ff != d_ff) {
        return Status::InvalidArgument("--m2cache: layer " + std::to_string(l) + " of the neuron store is [d_ff " +
                                       std::to_string(s.d_ff) + ", d_model " + std::to_string(s.d_model) +
                                       "], the model's [" + std::to_string(d_ff) + ", " + std::to_string(c.d_model) +
                                       "]: it was built for another model");
      }
    }
    if (options.m2cache_config.cache_units) {
      WEIR_ASSIGN_OR_RETURN(top_tier_, m2cache::MakeTier(options.m2cache_config.tier));
    }
    WEIR_ASSIGN_OR_RETURN(mixed_, m2cache::MixedMlp::Create(options.m2cache, options.m2cache_config, mc.glu,
                                                            top_tier_.get(), pool_, options.m2cache_source));
    mlp_.push_back(MakeM2CacheMlp(mc, mixed_.get()));
  } else if (moe_ != nullptr) {
    mlp_.push_back(MakeMoeMlp(mc, moe_.get(), expert_source_));
  } else if (streamed_ != nullptr) {
    mlp_.push_back(MakeStreamedMlp(mc, streamed_, policy_.get()));
  } else if (policy_ != nullptr) {
    mlp_.push_back(MakeSparseMlp(mc, policy_.get(), transposed_.get(), &sel_in_, &sel_units_,
                                 &sel_down_));
  } else {
    mlp_.push_back(MakeDenseMlp(mc));
  }
  mlp_of_layer_.assign(static_cast<size_t>(c.n_layers), mlp_.back().get());
  return Status::Ok();
}

uint64_t Session::allocated_bytes() const {
  return (transposed_ ? transposed_->bytes() : 0) + (top_tier_ ? top_tier_->allocated() : 0) + (moe_ ? moe_->allocated_bytes() : 0) + kv_.bytes() + x_.size() + xb_.size() + q_.size() + k_.size() + v_.size() + att_.size() +
         attn_ws_.bytes() + queries_.size() * sizeof(kernels::AttnQuery) + gate_.size() + up_.size() + logits_.size();
}

Result<const float*> Session::Forward(std::span<const int32_t> tokens, LogitsFor which) {
  const int n = static_cast<int>(tokens.size());
  if (n <= 0 || n > n_batch_) {
    return Status::InvalidArgument(StrFormat("forward of %d tokens (batch holds 1..%d)", n, n_batch_));
  }
  if (pos_ + n > kv_.ctx()) {
    return Status::InvalidArgument(StrFormat("context full: %d + %d tokens exceed the context size %d",
                                             pos_, n, kv_.ctx()));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= model_.config().vocab_size) {
      return Status::InvalidArgument(StrFormat("token id %d outside the vocabulary [0, %d)", t,
                                               model_.config().vocab_size));
    }
  }
  if (streamed_ != nullptr) streamed_->BeginToken();
  for (int t = 0; t < n; ++t) seq_[static_cast<size_t>(t)] = Seq{&kv_, pos_ + t};
  WEIR_RETURN_IF_ERROR(Embed(tokens));
  for (int l = 0; l < model_.config().n_layers; ++l) {
    WEIR_RETURN_IF_ERROR(Attention(l, n));
    WEIR_RETURN_IF_ERROR(Mlp(l, n));
  }
  Output(n, which);
  pos_ += n;
  traffic_.tokens += static_cast<uint64_t>(n);
  return logits_.data<float>();
}

bool Session::Batchable() const {
  return policy_ == nullptr && streamed_ == nullptr && mixed_ == nullptr && observer_ == nullptr &&
         (moe_ == nullptr || experts_ != nullptr);
}

Status Session::DecodeBatch(std::span<Session* const> sessions, std::span<const int32_t> tokens,
                            std::span<const float*> logits) {
  const int n = static_cast<int>(sessions.size());
  if (n == 0 || tokens.size() != sessions.size() || logits.size() != sessions.size()) {
    return Status::InvalidArgument(StrFormat("batched decode of %d sessions with %zu tokens and %zu logits",
                                             n, tokens.size(), logits.size()));
  }
  Session& lead = *sessions[0];
  const format::LlamaConfig& c = lead.model_.config();
  if (n > lead.n_batch_) {
    return Status::InvalidArgument(StrFormat("batched decode of %d sessions; the first holds %d tokens a call",
                                             n, lead.n_batch_));
  }
  for (int i = 0; i < n; ++i) {
    const Session& s = *sessions[static_cast<size_t>(i)];
    for (int j = 0; j < i; ++j) {
      if (sessions[static_cast<size_t>(j)] == &s) {
        return Status::InvalidArgument(StrFormat("batched decode: session %d is also session %d", i, j));
      }
    }
    if (&s.model_ != &lead.model_ || s.kv_.ctx() != lead.kv_.ctx() || !s.Batchable()) {
      return Status::InvalidArgument(StrFormat(
          "batched decode: session %d %s", i,
          &s.model_ != &lead.model_ ? "runs another model"
          : s.kv_.ctx() != lead.kv_.ctx() ? "has another context size"
                                           : "has per-sequence MLP state (sparsity, a pack, M2Cache or an observer)"));
    }
    if (s.pos_ + 1 > s.kv_.ctx()) {
      return Status::InvalidArgument(StrFormat("batched decode: session %d's context is full (%d positions)", i,
                                               s.kv_.ctx()));
    }
    const int32_t t = tokens[static_cast<size_t>(i)];
    if (t < 0 || t >= c.vocab_size) {
      return Status::InvalidArgument(StrFormat("token id %d outside the vocabulary [0, %d)", t, c.vocab_size));
    }
  }
  for (int i = 0; i < n; ++i) {
    Session& s = *sessions[static_cast<size_t>(i)];
    lead.seq_[static_cast<size_t>(i)] = Seq{&s.kv_, s.pos_};
  }
  WEIR_RETURN_IF_ERROR(lead.Embed(tokens));
  for (int l = 0; l < c.n_layers; ++l) {
    WEIR_RETURN_IF_ERROR(lead.Attention(l, n));
    WEIR_RETURN_IF_ERROR(lead.Mlp(l, n));
  }
  lead.Output(n, LogitsFor::kAll);
  const size_t vocab = static_cast<size_t>(c.vocab_size);
  for (int i = 0; i < n; ++i) {
    Session& s = *sessions[static_cast<size_t>(i)];
    float* dst = s.logits_.data<float>();
    if (i > 0) std::memcpy(dst, lead.logits_.data<float>() + static_cast<size_t>(i) * vocab, vocab * sizeof(float));
    logits[static_cast<size_t>(i)] = dst;
    ++s.pos_;
    if (i > 0) s.traffic_.tokens += 1;
  }
  lead.traffic_.tokens += 1;
  return Status::Ok();
}

bool Session::Rewind(int pos) {
  if (pos < 0 || pos > pos_) return false;
  const format::LlamaConfig& c = model_.config();
  for (int l = 0; l < c.n_layers; ++l) {
    const int rows = kv_.rows(l);
    if (!c.IsSliding(l) || rows >= kv_.ctx()) continue;  // every position kept
    // Position pos reads [pos - window + 1, pos); the oldest of them, x, is intact while no
    // cached position x + rows (same row) was written: x + rows >= pos_.
    const int oldest = std::max(0, pos - c.sliding_window + 1);
    if (oldest + rows < pos_) return false;
  }
  pos_ = pos;
  return true;
}

Result<const float*> Session::Prefill(std::span<const int32_t> tokens) {
  if (tokens.empty()) return Status::InvalidArgument("empty prompt");
  const float* last = nullptr;
  for (size_t i = 0; i < tokens.size(); i += static_cast<size_t>(n_batch_)) {
    size_t n = std::min(tokens.size() - i, static_cast<size_t>(n_batch_));
    WEIR_ASSIGN_OR_RETURN(last, Forward(tokens.subspan(i, n), LogitsFor::kLast));
  }
  return last;
}

}  // namespace weir::model
