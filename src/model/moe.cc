#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "format/llama_limits.h"
#include "kernels/gather.h"
#include "kernels/matvec.h"
#include "kernels/ops.h"
#include "model/glu_of.h"

namespace weir::model {

void RouteToken(const float* logits, int n_expert, int k, bool renormalize, ExpertChoice* out,
                const float* select_bias) {
  WEIR_CHECK(k >= 1 && k <= n_expert && n_expert <= format::limits::kMaxExperts);
  auto key = [&](int32_t e) {
    const float l = logits[e];
    return std::isnan(l) ? -std::numeric_limits<float>::infinity() : l;
  };
  // k is small (2 of 8, 8 of 128): a partial selection over the ids.
  int32_t ids[format::limits::kMaxExperts];
  std::iota(ids, ids + n_expert, 0);
  if (select_bias == nullptr) {
    std::partial_sort(ids, ids + k, ids + n_expert, [&](int32_t a, int32_t b) {
      const float ka = key(a), kb = key(b);
      return ka > kb || (ka == kb && a < b);
    });
  } else {
    std::partial_sort(ids, ids + k, ids + n_expert, [&](int32_t a, int32_t b) {
      const float ka = key(a) + select_bias[a], kb = key(b) + select_bias[b];
      return ka > kb || (ka == kb && a < b);
    });
  }
  // Softmax with the largest logit subtracted: without a bias the first chosen; with one, the
  // largest unbiased logit of those the weights are taken over (the chosen, or all experts).
  float top = key(ids[0]);
  if (select_bias != nullptr) {
    top = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < (renormalize ? k : n_expert); ++j) {
      top = std::max(top, key(renormalize ? ids[j] : j));
    }
  }
  double chosen_sum = 0;
  for (int j = 0; j < k; ++j) {
    const float l = key(ids[j]);
    const float p = std::isinf(l) ? (l == top ? 1.0f : 0.0f) : std::exp(l - top);
    out[j] = ExpertChoice{ids[j], p};
    chosen_sum += p;
  }
  double denom = chosen_sum;
  if (!renormalize) {
    denom = 0;
    for (int e = 0; e < n_expert; ++e) {
      const float l = key(e);
      denom += std::isinf(l) ? (l == top ? 1.0 : 0.0) : std::exp(l - top);
    }
  }
  for (int j = 0; j < k; ++j) out[j].weight = static_cast<float>(out[j].weight / denom);
}

TensorView ExpertSlice(const TensorView& stacked, int e) {
  WEIR_DCHECK(stacked.shape.ndim == 3 && e >= 0 && e < stacked.shape[0]);
  TensorView v;
  v.dtype = stacked.dtype;
  v.shape = Shape{stacked.shape[1], stacked.shape[2]};
  v.layout = stacked.layout;
  v.data = static_cast<const uint8_t*>(stacked.data) + static_cast<size_t>(e) * v.nbytes();
  return v;
}

Result<ExpertWeights> ResidentExperts::Acquire(int layer, int e) {
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  ExpertWeights x;
  x.w_gate = ExpertSlice(w.w_gate_exps, e);
  x.w_up = ExpertSlice(w.w_up_exps, e);
  x.w_down = ExpertSlice(w.w_down_exps, e);
  return x;
}

Result<std::unique_ptr<MoeMlp>> MoeMlp::Create(const format::LlamaConfig& c, int n_batch) {
  if (!c.arch->moe || c.n_expert < 1 || c.n_expert > format::limits::kMaxExperts ||
      c.n_expert_used < 1 || c.n_expert_used > c.n_expert || n_batch < 1) {
    return Status::InvalidArgument(
        StrFormat("mixture of experts: %s with n_expert %d, n_expert_used %d, batch %d",
                  c.arch->name, c.n_expert, c.n_expert_used, n_batch));
  }
  auto m = std::unique_ptr<MoeMlp>(new MoeMlp());
  m->n_expert_ = c.n_expert;
  m->k_ = c.n_expert_used;
  m->d_model_ = c.d_model;
  m->renormalize_ = c.expert_weights_norm;
  m->glu_ = GluOf(c.arch);
  size_t max_ff = 0;
  for (const auto& L : c.layers) {
    m->d_ff_.push_back(L.d_ff);
    max_ff = std::max(max_ff, static_cast<size_t>(L.d_ff));
  }
  const size_t B = static_cast<size_t>(n_batch), f = sizeof(float);
  const size_t d = static_cast<size_t>(c.d_model), E = static_cast<size_t>(c.n_expert);
  const size_t K = static_cast<size_t>(c.n_expert_used);
  if (!m->logits_.Reset(B * E * f) || !m->xg_.Reset(B * d * f) || !m->yg_.Reset(B * d * f) ||
      !m->gate_.Reset(B * max_ff * f) || !m->up_.Reset(B * max_ff * f)) {
    return Status::OutOfMemory("cannot allocate the mixture-of-experts buffers");
  }
  m->choices_.resize(B * K);
  m->count_.resize(E);
  m->start_.resize(E + 1);
  m->slot_token_.resize(B * K);
  m->slot_weight_.resize(B * K);
  m->active_.reserve(E);
  if (!m->next_logits_.Reset(E * f)) {
    return Status::OutOfMemory("cannot allocate the mixture-of-experts buffers");
  }
  m->next_choices_.resize(K);
  m->predicted_.reserve(K);
  return m;
}

Status MoeMlp::set_expert_bias(float gamma) {
  if (!(gamma > 0.0f && gamma <= 1.0f)) {
    return Status::InvalidArgument(
        StrFormat("routing bias toward cached experts: gamma %g is not in (0, 1]", gamma));
  }
  gamma_ = gamma;
  select_bias_.assign(static_cast<size_t>(n_expert_), 0.0f);
  unbiased_.resize(static_cast<size_t>(k_));
  return Status::Ok();
}

Status MoeMlp::set_sparsity(sparsity::SparsityPolicy* policy) {
  if (policy != nullptr &&
      (policy->MayPrune(sparsity::Site::kAttnIn) || policy->MayPrune(sparsity::Site::kAttnOut))) {
    return Status::Unsupported("--sparsity " + policy->info().name +
                               " prunes attention; on a mixture of experts only the experts' "
                               "MLP columns are pruned (glu, gate, up, cats, dip, dip-ca)");
  }
  policy_ = policy;
  if (policy_ != nullptr && xs_.size() == 0) {
    const int64_t widest =
        std::max<int64_t>(d_model_, *std::max_element(d_ff_.begin(), d_ff_.end()));
    sel_in_.Reserve(widest);
    sel_units_.Reserve(widest);
    sel_down_.Reserve(widest);
    if (!xs_.Reset(static_cast<size_t>(d_model_) * sizeof(float))) {
      return Status::OutOfMemory("cannot allocate the mixture-of-experts sparsity buffer");
    }
  }
  return Status::Ok();
}

// y = expert(x) for one token under policy_ (see set_sparsity). gate_/up_ hold g and u.
// The down product of an expert after the policy's SelectDown: h (g) with the unselected units
// zeroed (u is scratch), times W_down, whose bytes are counted in the share of the units kept
// (a channel-record expert reads W_down whole either way; the count is the dense rule's).
void MoeMlp::DownProduct(const ExpertWeights& w, int d_ff, float* g, float* u, float* y,
                         ThreadPool* pool, uint64_t* bytes) const {
  if (!sel_down_.all()) {
    std::memcpy(u, g, sizeof(float) * static_cast<size_t>(d_ff));
    std::memset(g, 0, sizeof(float) * static_cast<size_t>(d_ff));
    for (int32_t i : sel_down_.indices()) g[i] = u[i];
  }
  kernels::MatVec(w.w_down, g, y, pool);
  const double down_share =
      sel_down_.all() ? 1.0 : static_cast<double>(sel_down_.indices().size()) / d_ff;
  *bytes += static_cast<uint64_t>(down_share * static_cast<double>(w.w_down.nbytes()));
}

Status MoeMlp::SparseExpert(int layer, const ExpertWeights& w, const float* x, float* y,
                            ThreadPool* pool, uint64_t* bytes) {
  using sparsity::Site;
  const int d = d_model_, d_ff = d_ff_[static_cast<size_t>(layer)];
  float* g = gate_.data<float>();  // [d_ff]
  float* u = up_.data<float>();    // [d_ff]
  float* xs = xs_.data<float>();   // [d]
  const uint64_t gate_row = w.w_gate.row_bytes(), up_row = w.w_up.row_bytes();
  // Input columns: x with the unselected ones zeroed gives the product over the kept columns.
  if (policy_->MayPrune(Site::kMlpIn)) {
    policy_->SelectInput(layer, Site::kMlpIn, std::span<const float>(x, static_cast<size_t>(d)),
                         nullptr, &sel_in_);
  } else {
    sel_in_.SetAll(d);
  }
  const float* xin = x;
  double in_share = 1.0;  // share of each gate/up row read
  if (!sel_in_.all()) {
    std::memset(xs, 0, sizeof(float) * static_cast<size_t>(d));
    for (int32_t i : sel_in_.indices()) xs[i] = x[i];
    xin = xs;
    in_share = static_cast<double>(sel_in_.indices().size()) / d;
  }
  auto full = [&](const TensorView& W, float* out, uint64_t row_bytes) {
    kernels::MatVec(W, xin, out, pool);
    *bytes += static_cast<uint64_t>(in_share * static_cast<double>(row_bytes) * d_ff);
  };
  auto rows = [&](const TensorView& W, float* out, uint64_t row_bytes) {
    auto idx = sel_units_.indices();
    kernels::GatherMatVecRows(W, idx.data(), static_cast<int64_t>(idx.size()), xin, out, pool);
    *bytes += static_cast<uint64_t>(in_share * static_cast<double>(row_bytes) *
                                    static_cast<double>(idx.size()));
  };
  if (policy_->unit_predictor() == sparsity::UnitPredictor::kNone) {
    full(w.w_gate, g, gate_row);
    full(w.w_up, u, up_row);
    sel_units_.SetAll(d_ff);
  } else {
    // A unit predictor: one projection whole, its output picks the units, the other projection
    // computes only those (gate predicts for up, or up for gate).
    const bool by_gate = policy_->unit_predictor() == sparsity::UnitPredictor::kGate;
    float* first = by_gate ? g : u;
    float* second = by_gate ? u : g;
    full(by_gate ? w.w_gate : w.w_up, first, by_gate ? gate_row : up_row);
    policy_->SelectUnits(layer, std::span<const float>(first, static_cast<size_t>(d_ff)),
                         &sel_units_);
    const TensorView& other = by_gate ? w.w_up : w.w_gate;
    const uint64_t other_row = by_gate ? up_row : gate_row;
    if (sel_units_.all()) {
      full(other, second, other_row);
    } else {
      rows(other, second, other_row);
    }
  }
  ActivationObserver* observer = observer_ != nullptr ? *observer_ : nullptr;
  if (observer) observer->OnGate(layer, g, d_ff);
  // h = glu(g, u) on the computed units, 0 elsewhere (kept in g).
  if (sel_units_.all()) {
    kernels::GatedActivation(glu_, g, u, d_ff);
  } else {
    auto idx = sel_units_.indices();
    for (int32_t i : idx) {
      kernels::GatedActivation(glu_, g + i, u + i, 1);
      u[i] = g[i];
    }
    std::memset(g, 0, sizeof(float) * static_cast<size_t>(d_ff));
    for (int32_t i : idx) g[i] = u[i];
  }
  if (observer) observer->OnInput(layer, Site::kMlpDown, g, d_ff);
  policy_->SelectDown(layer, std::span<const float>(g, static_cast<size_t>(d_ff)), sel_units_,
                      nullptr, &sel_down_);
  DownProduct(w, d_ff, g, u, y, pool, bytes);
  return Status::Ok();
}

Status MoeMlp::ForwardChannels(int layer, const float* x, float* y, ExpertSource* experts,
                               ThreadPool* pool, uint64_t* bytes) {
  const int d = d_model_, d_ff = d_ff_[static_cast<size_t>(layer)];
  if (policy_ != nullptr && policy_->unit_predictor() != sparsity::UnitPredictor::kNone) {
    return Status::Unsupported("--sparsity " + policy_->info().name +
                               " predicts units from the whole gate or up product; experts "
                               "stored as channel records are pruned by input channel and "
                               "neuron only (dip, dip-ca, glu)");
  }
  if (rows_x_.size() == 0) {
    idx_gate_.resize(static_cast<size_t>(d));
    idx_up_.resize(static_cast<size_t>(d));
    all_channels_.resize(static_cast<size_t>(d));
    std::iota(all_channels_.begin(), all_channels_.end(), 0);
    sel_in_.Reserve(std::max(d, *std::max_element(d_ff_.begin(), d_ff_.end())));
    sel_down_.Reserve(*std::max_element(d_ff_.begin(), d_ff_.end()));
    if (!rows_x_.Reset(2 * static_cast<size_t>(d) * sizeof(float))) {
      return Status::OutOfMemory("cannot allocate the mixture-of-experts channel buffer");
    }
  }
  float* yg = yg_.data<float>();  // [d] one token's expert output
  for (int32_t e : active_) {
    const int first = start_[e], m = start_[e + 1] - start_[e];
    // Without a policy the whole expert serves all its tokens; with one, each token's kept
    // channels are acquired (read) for it.
    ExpertWeights whole;
    if (policy_ == nullptr) {
      WEIR_ASSIGN_OR_RETURN(whole, experts->Acquire(layer, e));
    }
    for (int i = 0; i < m; ++i) {
      const int t = slot_token_[first + i];
      const float* xt = x + static_cast<size_t>(t) * d;
      ExpertWeights w = whole;
      if (policy_ != nullptr) {
        if (policy_->MayPrune(sparsity::Site::kMlpIn)) {
          policy_->SelectInput(layer, sparsity::Site::kMlpIn,
                               std::span<const float>(xt, static_cast<size_t>(d)), nullptr,
                               &sel_in_);
        } else {
          sel_in_.SetAll(d);
        }
        WEIR_ASSIGN_OR_RETURN(
            w, experts->AcquireChannels(layer, e,
                                        sel_in_.all() ? std::span<const int32_t>(all_channels_)
                                                      : sel_in_.indices()));
      } else {
        sel_in_.SetAll(d);
      }
      if (!w.channel_records() || w.w_in_t.cols() != d_ff) {
        experts->Release(layer, e);
        return Status::Internal(StrFormat("expert %d of layer %d has no channel records of %d "
                                          "values",
                                          e, layer, d_ff));
      }
      last_dense_bytes_ += 2 * static_cast<uint64_t>(d) * w.w_in_t.row_bytes() + w.w_down.nbytes();
      const Status st = ChannelExpert(layer, w, xt, yg, pool, bytes);
      if (policy_ != nullptr) experts->Release(layer, e);
      if (!st.ok()) {
        if (policy_ == nullptr) experts->Release(layer, e);
        return st;
      }
      float* yt = y + static_cast<size_t>(t) * d;
      const float wt = slot_weight_[first + i];
      for (int c = 0; c < d; ++c) yt[c] += wt * yg[c];
    }
    if (policy_ == nullptr) experts->Release(layer, e);
  }
  return Status::Ok();
}

Status MoeMlp::ChannelExpert(int layer, const ExpertWeights& w, const float* x, float* y,
                             ThreadPool* pool, uint64_t* bytes) {
  using sparsity::Site;
  const int d_ff = d_ff_[static_cast<size_t>(layer)];
  float* g = gate_.data<float>();  // [d_ff]
  float* u = up_.data<float>();    // [d_ff]
  float* xr = rows_x_.data<float>();
  const int64_t n = sel_in_.size();
  for (int64_t k = 0; k < n; ++k) {
    const int32_t i = sel_in_[k];
    const int32_t r = 2 * static_cast<int32_t>(w.in_compact ? k : i);
    idx_gate_[static_cast<size_t>(k)] = r;
    idx_up_[static_cast<size_t>(k)] = r + 1;
    xr[r] = x[i];
    xr[r + 1] = x[i];
  }
  kernels::GatherMatVecCols(w.w_in_t, idx_gate_.data(), n, xr, g, pool);
  kernels::GatherMatVecCols(w.w_in_t, idx_up_.data(), n, xr, u, pool);
  *bytes += static_cast<uint64_t>(2 * n) * w.w_in_t.row_bytes();
  ActivationObserver* observer = observer_ != nullptr ? *observer_ : nullptr;
  if (observer) observer->OnGate(layer, g, d_ff);
  kernels::GatedActivation(glu_, g, u, d_ff);
  if (observer) observer->OnInput(layer, Site::kMlpDown, g, d_ff);
  if (policy_ != nullptr && policy_->MayPrune(Site::kMlpDown)) {
    sel_units_.SetAll(d_ff);
    policy_->SelectDown(layer, std::span<const float>(g, static_cast<size_t>(d_ff)), sel_units_,
                        nullptr, &sel_down_);
  } else {
    sel_down_.SetAll(d_ff);
  }
  DownProduct(w, d_ff, g, u, y, pool, bytes);
  return Status::Ok();
}

uint64_t MoeMlp::allocated_bytes() const {
  return logits_.size() + xg_.size() + yg_.size() + gate_.size() + up_.size() +
         choices_.size() * sizeof(ExpertChoice) +
         (count_.size() + start_.size() + slot_token_.size() + active_.capacity()) *
             sizeof(int32_t) +
         slot_weight_.size() * sizeof(float) + next_logits_.size() +
         next_choices_.size() * sizeof(ExpertChoice) + predicted_.capacity() * sizeof(int32_t) +
         select_bias_.capacity() * sizeof(float) + unbiased_.capacity() * sizeof(ExpertChoice) +
         xs_.size() + rows_x_.size() +
         (idx_gate_.capacity() + idx_up_.capacity() + all_channels_.capacity()) * sizeof(int32_t);
}

Status MoeMlp::Forward(int layer, const TensorView& router, const float* x, int n, float* y,
                       ExpertSource* experts, ThreadPool* pool, uint64_t* bytes_per_token_sum,
                       const TensorView* next_router) {
  const int E = n_expert_, k = k_, d = d_model_;
  const int d_ff = d_ff_[static_cast<size_t>(layer)];
  WEIR_CHECK(n >= 1 && static_cast<size_t>(n) * k <= choices_.size());
  float* logits = logits_.data<float>();  // [n, E]

  // Route every token; with the bias toward cached experts, by the cache as this step finds it.
  kernels::MatMul(router, x, n, logits, pool);
  const uint64_t* cached = gamma_ < 1.0f ? experts->CachedExperts(layer) : nullptr;
  const float* bias = nullptr;
  if (cached != nullptr) {
    const float penalty = std::log(gamma_);
    bool any = false;
    for (int e = 0; e < E; ++e) {
      const bool in = (cached[e / 64] >> (e % 64)) & 1;
      select_bias_[static_cast<size_t>(e)] = in ? 0.0f : penalty;
      any |= !in;
    }
    if (any) bias = select_bias_.data();
  }
  for (int t = 0; t < n; ++t) {
    const float* lt = logits + static_cast<size_t>(t) * E;
    ExpertChoice* ct = &choices_[static_cast<size_t>(t) * k];
    RouteToken(lt, E, k, renormalize_, ct, bias);
    if (bias != nullptr) {
      RouteToken(lt, E, k, renormalize_, unbiased_.data());
      bias_stats_.choices += static_cast<uint64_t>(k);
      for (int j = 0; j < k; ++j) {
        bool kept = false;
        for (int i = 0; i < k; ++i) kept |= unbiased_[static_cast<size_t>(i)].expert == ct[j].expert;
        bias_stats_.changed += !kept;
      }
    }
  }
  last_n_ = static_cast<size_t>(n);

  // Group the (token, expert) pairs by expert: slots [start_[e], start_[e + 1]) are expert e's
  // tokens in token order.
  std::fill(count_.begin(), count_.end(), 0);
  for (int i = 0; i < n * k; ++i) ++count_[choices_[i].expert];
  start_[0] = 0;
  active_.clear();
  for (int e = 0; e < E; ++e) {
    start_[e + 1] = start_[e] + count_[e];
    if (count_[e] > 0) active_.push_back(e);
  }
  for (int t = 0; t < n; ++t) {
    for (int j = 0; j < k; ++j) {
      const ExpertChoice& c = choices_[t * k + j];
      const int32_t s = start_[c.expert + 1] - count_[c.expert]--;
      slot_token_[s] = t;
      slot_weight_[s] = c.weight;
    }
  }
  WEIR_RETURN_IF_ERROR(experts->Prepare(layer, active_));
  if (next_router != nullptr && n == 1 && experts->predicts()) {
    // The next layer's router on this layer's input: its likely experts, read while this layer
    // computes (ActiveFlow §3's cross-layer preloading, applied to routing).
    float* nl = next_logits_.data<float>();
    kernels::MatMul(*next_router, x, 1, nl, pool);
    RouteToken(nl, E, k, renormalize_, next_choices_.data());
    predicted_.clear();
    for (int j = 0; j < k; ++j) predicted_.push_back(next_choices_[static_cast<size_t>(j)].expert);
    std::sort(predicted_.begin(), predicted_.end());
    experts->Predict(layer + 1, predicted_);
  }

  // Each chosen expert once, over its tokens; y[t] accumulates in ascending expert order.
  std::memset(y, 0, sizeof(float) * static_cast<size_t>(n) * d);
  if (experts->channel_records()) {
    uint64_t bytes = router.nbytes() * static_cast<uint64_t>(n);
    last_dense_bytes_ = bytes;
    WEIR_RETURN_IF_ERROR(ForwardChannels(layer, x, y, experts, pool, &bytes));
    *bytes_per_token_sum += bytes;
    return Status::Ok();
  }
  float* xg = xg_.data<float>();   // [m, d]
  float* yg = yg_.data<float>();   // [m, d]
  float* g = gate_.data<float>();  // [m, d_ff]
  float* u = up_.data<float>();    // [m, d_ff]
  uint64_t bytes = router.nbytes() * static_cast<uint64_t>(n);
  last_dense_bytes_ = bytes;
  for (int32_t e : active_) {
    const int first = start_[e], m = start_[e + 1] - start_[e];
    for (int i = 0; i < m; ++i) {
      const float* xt = x + static_cast<size_t>(slot_token_[first + i]) * d;
      std::memcpy(xg + static_cast<size_t>(i) * d, xt, sizeof(float) * d);
    }
    WEIR_ASSIGN_OR_RETURN(ExpertWeights w, experts->Acquire(layer, e));
    last_dense_bytes_ += w.nbytes() * static_cast<uint64_t>(m);
    if (policy_ != nullptr) {
      // Sparsity inside the expert: one token at a time, as the sparse MLP does.
      for (int i = 0; i < m; ++i) {
        WEIR_RETURN_IF_ERROR(SparseExpert(layer, w, xg + static_cast<size_t>(i) * d,
                                          yg + static_cast<size_t>(i) * d, pool, &bytes));
      }
    } else {
      const TensorView* gate_up[] = {&w.w_gate, &w.w_up};
      float* gate_up_out[] = {g, u};
      kernels::MatMulShared(gate_up, xg, m, gate_up_out, pool);
      ActivationObserver* observer = observer_ != nullptr ? *observer_ : nullptr;
      for (int i = 0; observer && i < m; ++i) observer->OnGate(layer, g + i * d_ff, d_ff);
      const int64_t h = static_cast<int64_t>(m) * d_ff;
      kernels::GatedActivation(glu_, g, u, h);
      for (int i = 0; observer && i < m; ++i) {
        observer->OnInput(layer, sparsity::Site::kMlpDown, g + i * d_ff, d_ff);
      }
      kernels::MatMul(w.w_down, g, m, yg, pool);
      bytes += w.nbytes() * static_cast<uint64_t>(m);
    }
    experts->Release(layer, e);
    for (int i = 0; i < m; ++i) {
      float* yt = y + static_cast<size_t>(slot_token_[first + i]) * d;
      const float* yi = yg + static_cast<size_t>(i) * d;
      const float wt = slot_weight_[first + i];
      for (int c = 0; c < d; ++c) yt[c] += wt * yi[c];
    }
  }
  *bytes_per_token_sum += bytes;
  return Status::Ok();
}

}  // namespace weir::model
