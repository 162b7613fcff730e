#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "sim/sim_report.h"

namespace weir::sim {
namespace {

constexpr TensorKind kLayerKinds[] = {
    TensorKind::kAttnQ,   TensorKind::kAttnK, TensorKind::kAttnV,   TensorKind::kAttnOutput,
    TensorKind::kFfnGate, TensorKind::kFfnUp, TensorKind::kFfnDown, TensorKind::kFfnRouter};

bool IsAttention(TensorKind k) {
  return k == TensorKind::kAttnQ || k == TensorKind::kAttnK || k == TensorKind::kAttnV ||
         k == TensorKind::kAttnOutput;
}

// Per-layer constants of the time model.
struct LayerConst {
  double static_read_bytes = 0;  // non-streamed matrices + norms + KV read, per token
  double static_flops = 0;       // non-streamed matrices + attention over kv_len
  std::vector<size_t> streams;   // indices into layout.streams
};

Status CheckConfig(const SimConfig& c) {
  if (!(c.kv_bits > 0 && c.kv_bits <= 64)) {
    return Status::InvalidArgument(StrFormat("kv_bits %g outside (0, 64]", c.kv_bits));
  }
  if (c.kv_len < 0) {
    return Status::InvalidArgument(
        StrFormat("kv_len %lld is negative", static_cast<long long>(c.kv_len)));
  }
  if (c.warmup_tokens < 0) {
    return Status::InvalidArgument(
        StrFormat("warmup %lld is negative", static_cast<long long>(c.warmup_tokens)));
  }
  for (int k = 0; k < kNumTensorKinds; ++k) {
    double b = c.bits.bits[k];
    if (!(b > 0 && b <= 64)) {
      return Status::InvalidArgument(StrFormat("bits for %s = %g outside (0, 64]",
                                               TensorKindName(static_cast<TensorKind>(k)), b));
    }
  }
  return Status::Ok();
}

Status CheckLayout(const ModelShape& shape, const MaskLayout& layout) {
  if (layout.n_layers != shape.n_layers) {
    return Status::InvalidArgument(StrFormat("masks have %d layers, model '%s' has %d",
                                             layout.n_layers, shape.name.c_str(), shape.n_layers));
  }
  std::vector<std::vector<int>> used(static_cast<size_t>(shape.n_layers),
                                     std::vector<int>(kNumTensorKinds, 0));
  for (const MaskStream& s : layout.streams) {
    if (s.layer < 0 || s.layer >= shape.n_layers) {
      return Status::InvalidArgument(StrFormat("mask '%s' has layer %d outside 0..%d",
                                               s.name.c_str(), s.layer, shape.n_layers - 1));
    }
    if (s.tensors.size() != s.weights_per_unit.size() || s.n_units == 0) {
      return Status::InvalidArgument(
          StrFormat("mask '%s' layer %d is malformed", s.name.c_str(), s.layer));
    }
    for (size_t i = 0; i < s.tensors.size(); ++i) {
      int& u = used[static_cast<size_t>(s.layer)][static_cast<int>(s.tensors[i])];
      if (u) {
        return Status::InvalidArgument(StrFormat("layer %d: tensor %s is in two masks", s.layer,
                                                 TensorKindName(s.tensors[i])));
      }
      u = 1;
      if (s.weights_per_unit[i] * s.n_units != shape.TensorParams(s.tensors[i], s.layer)) {
        return Status::InvalidArgument(StrFormat(
            "mask '%s' layer %d: %u units x %llu weights != %s's %llu weights", s.name.c_str(),
            s.layer, s.n_units, static_cast<unsigned long long>(s.weights_per_unit[i]),
            TensorKindName(s.tensors[i]),
            static_cast<unsigned long long>(shape.TensorParams(s.tensors[i], s.layer))));
      }
    }
  }
  return Status::Ok();
}

bool Streamed(const MaskLayout& layout, const std::vector<size_t>& streams, TensorKind k) {
  for (size_t i : streams) {
    for (TensorKind t : layout.streams[i].tensors) {
      if (t == k) return true;
    }
  }
  return false;
}

double StreamUnitBytes(const MaskStream& s, const WeightBits& bits) {
  double b = 0;
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    b += static_cast<double>(s.weights_per_unit[i]) * bits.Of(s.tensors[i]) / 8.0;
  }
  return b;
}

std::vector<std::vector<size_t>> StreamsByLayer(const MaskLayout& layout) {
  std::vector<std::vector<size_t>> by(static_cast<size_t>(layout.n_layers));
  for (size_t i = 0; i < layout.streams.size(); ++i) {
    by[static_cast<size_t>(layout.streams[i].layer)].push_back(i);
  }
  return by;
}

double KvBytesPerTokenLayer(const ModelShape& shape, int layer, double kv_bits) {
  const LayerShape& L = shape.layers[static_cast<size_t>(layer)];
  return 2.0 * L.n_head_kv * shape.head_dim * kv_bits / 8.0;
}

}  // namespace

Result<MemoryPlan> PlanMemory(const ModelShape& shape, const MaskLayout& layout,
                              const DeviceProfile& device, const SimConfig& config) {
  WEIR_RETURN_IF_ERROR(ValidateShape(shape));
  WEIR_RETURN_IF_ERROR(CheckConfig(config));
  WEIR_RETURN_IF_ERROR(CheckLayout(shape, layout));
  const WeightBits& bits = config.bits;
  MemoryPlan p;
  p.memory_bytes = config.memory_bytes > 0 ? config.memory_bytes : device.memory_capacity_bytes;
  if (!(p.memory_bytes > 0)) {
    return Status::InvalidArgument(
        StrFormat("no memory budget: give one (--dram) or a capacity "
                  "in device profile '%s'",
                  device.name.c_str()));
  }
  auto by_layer = StreamsByLayer(layout);
  for (int l = 0; l < shape.n_layers; ++l) {
    for (TensorKind k : kLayerKinds) {
      double bytes = WeightBytes(shape.TensorParams(k, l), bits.Of(k));
      if (Streamed(layout, by_layer[static_cast<size_t>(l)], k)) {
        p.streamed_bytes += bytes;
      } else if (IsAttention(k)) {
        p.attention_bytes += bytes;
      } else if (k == TensorKind::kFfnRouter) {
        p.router_bytes += bytes;
      } else {
        p.mlp_static_bytes += bytes;
      }
    }
    p.kv_bytes +=
        KvBytesPerTokenLayer(shape, l, config.kv_bits) * static_cast<double>(config.kv_len);
  }
  p.norm_bytes = WeightBytes(shape.KindParams(TensorKind::kNorm), bits.Of(TensorKind::kNorm));
  p.embedding_bytes =
      WeightBytes(shape.KindParams(TensorKind::kTokenEmbd), bits.Of(TensorKind::kTokenEmbd));
  p.output_bytes = WeightBytes(shape.KindParams(TensorKind::kOutput), bits.Of(TensorKind::kOutput));
  p.static_bytes = p.attention_bytes + p.mlp_static_bytes + p.router_bytes + p.norm_bytes +
                   p.embedding_bytes + p.output_bytes + p.kv_bytes;
  if (p.memory_bytes < p.static_bytes) {
    auto B = [](double b) { return FormatDecimalBytes(b); };
    return Status::InvalidArgument(StrFormat(
        "memory budget %s (%.0f bytes) is below the %s (%.0f bytes) of static tensors of '%s' "
        "(attention %s, embeddings %s, output %s, KV cache %s at %lld tokens, other %s)",
        B(p.memory_bytes).c_str(), p.memory_bytes, B(p.static_bytes).c_str(),
        std::ceil(p.static_bytes), shape.name.c_str(), B(p.attention_bytes).c_str(),
        B(p.embedding_bytes).c_str(), B(p.output_bytes).c_str(), B(p.kv_bytes).c_str(),
        static_cast<long long>(config.kv_len),
        B(p.mlp_static_bytes + p.router_bytes + p.norm_bytes).c_str()));
  }
  p.cache_bytes = std::min(p.memory_bytes - p.static_bytes, p.streamed_bytes);
  double host = config.host_bytes >= 0 ? config.host_bytes
                                       : (device.has_host ? device.host_capacity_bytes : 0);
  p.host_cache_bytes = device.has_host ? std::min(host, p.streamed_bytes) : 0;
  for (const MaskStream& s : layout.streams) {
    double ub = StreamUnitBytes(s, bits);
    double dense = ub * s.n_units;
    double share = p.streamed_bytes > 0 ? dense / p.streamed_bytes : 0;
    auto units_for = [&](double budget) {
      double u = std::floor(budget * share / ub + 1e-9);
      return static_cast<uint32_t>(std::clamp(u, 0.0, static_cast<double>(s.n_units)));
    };
    p.unit_bytes.push_back(ub);
    p.cache_units.push_back(units_for(p.cache_bytes));
    p.host_units.push_back(units_for(p.host_cache_bytes));
  }
  return p;
}

Result<SimResult> Simulate(const ModelShape& shape, const DeviceProfile& device,
                           const SimConfig& config, MaskSource* source) {
  WEIR_RETURN_IF_ERROR(ValidateDeviceProfile(device, device.name));
  const MaskLayout& layout = source->layout();
  WEIR_ASSIGN_OR_RETURN(MemoryPlan plan, PlanMemory(shape, layout, device, config));
  const int64_t n_tokens = source->n_tokens();
  if (n_tokens <= config.warmup_tokens) {
    return Status::InvalidArgument(
        StrFormat("%lld tokens leave nothing to measure after %lld "
                  "warm-up tokens",
                  static_cast<long long>(n_tokens), static_cast<long long>(config.warmup_tokens)));
  }
  const WeightBits& bits = config.bits;
  const bool concurrent = config.concurrent_io < 0 ? device.concurrent_io : config.concurrent_io;
  const bool compute = config.model_compute && device.flops_per_s > 0;
  const bool host_tier = device.has_host && plan.host_cache_bytes > 0;
  const double kv_len = static_cast<double>(config.kv_len);
  auto by_layer = StreamsByLayer(layout);

  std::vector<LayerConst> lc(static_cast<size_t>(shape.n_layers));
  for (int l = 0; l < shape.n_layers; ++l) {
    LayerConst& c = lc[static_cast<size_t>(l)];
    c.streams = by_layer[static_cast<size_t>(l)];
    for (TensorKind k : kLayerKinds) {
      if (Streamed(layout, c.streams, k)) continue;
      uint64_t params = shape.TensorParams(k, l);
      c.static_read_bytes += WeightBytes(params, bits.Of(k));
      c.static_flops += 2.0 * static_cast<double>(params);
    }
    c.static_read_bytes +=
        WeightBytes(shape.TensorParams(TensorKind::kNorm, l), bits.Of(TensorKind::kNorm));
    c.static_read_bytes += KvBytesPerTokenLayer(shape, l, config.kv_bits) * kv_len;
    const LayerShape& L = shape.layers[static_cast<size_t>(l)];
    c.static_flops += 4.0 * L.n_head * shape.head_dim * kv_len;  // q.K and p.V
  }

  // Layer groups: everything at once, except Belady beyond its memory limit.
  std::vector<std::pair<int, int>> groups;
  if (config.policy == CachePolicy::kBelady) {
    int begin = 0;
    uint64_t acc = 0;
    for (int l = 0; l < shape.n_layers; ++l) {
      uint64_t need = 0;
      for (size_t i : by_layer[static_cast<size_t>(l)]) {
        need += OccurrenceMatrix::BytesFor(layout.streams[i].n_units, n_tokens);
      }
      if (l > begin && acc + need > config.belady_memory_limit) {
        groups.push_back({begin, l});
        begin = l;
        acc = 0;
      }
      acc += need;
    }
    groups.push_back({begin, shape.n_layers});
  } else {
    groups.push_back({0, shape.n_layers});
  }

  SimResult r;
  r.model = shape.name;
  r.device = device.name;
  r.policy = CachePolicyName(config.policy);
  r.masks = source->Describe();
  r.plan = plan;
  r.concurrent_io = concurrent;
  r.compute_modeled = compute;
  r.layers.resize(static_cast<size_t>(shape.n_layers));
  for (int l = 0; l < shape.n_layers; ++l) {
    LayerStats& ls = r.layers[static_cast<size_t>(l)];
    ls.layer = l;
    for (size_t i : by_layer[static_cast<size_t>(l)]) ls.units += layout.streams[i].n_units;
  }

  TokenMasks masks;
  AccessResult acc, host_acc;
  std::vector<uint32_t> active, storage_units;
  int64_t tokens_seen = 0;
  for (const auto& [g_begin, g_end] : groups) {
    const size_t n_streams = layout.streams.size();
    std::vector<std::unique_ptr<UnitCache>> caches(n_streams), host_caches(n_streams);
    std::vector<std::unique_ptr<OccurrenceMatrix>> future(n_streams);
    for (int l = g_begin; l < g_end; ++l) {
      for (size_t i : by_layer[static_cast<size_t>(l)]) {
        const MaskStream& s = layout.streams[i];
        caches[i] = UnitCache::Create(config.policy, s.n_units, plan.cache_units[i]);
        if (host_tier) {
          // The host starts warm: it loaded the model (up to its capacity) before decoding.
          host_caches[i] = UnitCache::Create(CachePolicy::kLru, s.n_units, plan.host_units[i]);
          std::vector<uint32_t> preload(plan.host_units[i]);
          for (uint32_t u = 0; u < plan.host_units[i]; ++u) preload[u] = u;
          host_caches[i]->Access(-1, preload, nullptr, &host_acc);
        }
        if (config.policy == CachePolicy::kBelady) {
          future[i] = std::make_unique<OccurrenceMatrix>(s.n_units, n_tokens);
        }
      }
    }
    auto next_token = [&](int64_t t) -> Result<bool> {
      WEIR_ASSIGN_OR_RETURN(bool more, source->Next(&masks));
      if (!more) return false;
      if (t >= n_tokens) {
        return Status::InvalidArgument(
            StrFormat("mask source '%s' yields more than its %lld "
                      "tokens",
                      source->Describe().c_str(), static_cast<long long>(n_tokens)));
      }
      if (masks.masks.size() != n_streams) {
        return Status::Internal(
            StrFormat("mask source gave %zu masks for %zu streams", masks.masks.size(), n_streams));
      }
      for (size_t i = 0; i < n_streams; ++i) {
        if (masks.masks[i].size() != layout.streams[i].n_units) {
          return Status::Internal(StrFormat("mask %zu has %u units, stream has %u", i,
                                            masks.masks[i].size(), layout.streams[i].n_units));
        }
      }
      return true;
    };
    if (config.policy == CachePolicy::kBelady) {
      WEIR_RETURN_IF_ERROR(source->Rewind());
      for (int64_t t = 0;; ++t) {
        WEIR_ASSIGN_OR_RETURN(bool more, next_token(t));
        if (!more) break;
        for (int l = g_begin; l < g_end; ++l) {
          for (size_t i : by_layer[static_cast<size_t>(l)]) {
            active.clear();
            masks.masks[i].AppendActive(&active);
            for (uint32_t u : active) future[i]->Set(u, t);
          }
        }
      }
    }
    WEIR_RETURN_IF_ERROR(source->Rewind());
    int64_t t = 0;
    for (;; ++t) {
      WEIR_ASSIGN_OR_RETURN(bool more, next_token(t));
      if (!more) break;
      const bool measured = t >= config.warmup_tokens;
      for (int l = g_begin; l < g_end; ++l) {
        const LayerConst& c = lc[static_cast<size_t>(l)];
        LayerStats& ls = r.layers[static_cast<size_t>(l)];
        double storage_s = 0, storage_bytes = 0, hit_bytes = 0, link_bytes = 0,
               flops = c.static_flops;
        uint64_t requests = 0;
        for (size_t i : c.streams) {
          const MaskStream& s = layout.streams[i];
          active.clear();
          masks.masks[i].AppendActive(&active);
          caches[i]->Access(t, active, future[i].get(), &acc);
          const double ub = plan.unit_bytes[i];
          hit_bytes += acc.hits * ub;
          flops += 2.0 * static_cast<double>(active.size()) * static_cast<double>(s.UnitWeights());
          const std::vector<uint32_t>* from_storage = &acc.missed;
          uint64_t host_hits = 0;
          if (host_tier) {
            host_caches[i]->Access(t, acc.missed, nullptr, &host_acc);
            host_hits = host_acc.hits;
            link_bytes += acc.missed.size() * ub;
            from_storage = &host_acc.missed;
          }
          // One request per run of consecutive units and per tensor (per run for records).
          const std::vector<uint32_t>& miss = *from_storage;
          for (size_t a = 0; a < miss.size();) {
            size_t b = a + 1;
            while (b < miss.size() && miss[b] == miss[b - 1] + 1) ++b;
            double run = static_cast<double>(b - a);
            if (s.unit_records) {
              const double bytes = run * ub;
              storage_s += device.storage_read.Seconds(bytes);
              storage_bytes += bytes;
              ++requests;
              a = b;
              continue;
            }
            for (size_t k = 0; k < s.tensors.size(); ++k) {
              double bytes =
                  run * static_cast<double>(s.weights_per_unit[k]) * bits.Of(s.tensors[k]) / 8.0;
              storage_s += device.storage_read.Seconds(bytes);
              storage_bytes += bytes;
              ++requests;
            }
            a = b;
          }
          if (measured) {
            ls.active += active.size();
            ls.hits += acc.hits;
            ls.misses += acc.missed.size();
            ls.evictions += acc.evictions;
            ls.host_hits += host_hits;
            if (!masks.events.empty()) {
              const RecordedEvents& e = masks.events[i];
              ls.recorded.hits += e.hits;
              ls.recorded.misses += e.misses;
              ls.recorded.evictions += e.evictions;
              ls.recorded.bytes_read += e.bytes_read;
              r.has_recorded = true;
            }
          }
        }
        if (!measured) continue;
        double memory_bytes = c.static_read_bytes + hit_bytes;
        double memory_s = memory_bytes / device.memory_bandwidth;
        double compute_s = compute ? flops / device.flops_per_s : 0;
        double link_s = host_tier ? link_bytes / device.host_link_bandwidth : 0;
        double mem_side = std::max(memory_s, compute_s);
        double stage =
            concurrent ? std::max({mem_side, storage_s, link_s}) : mem_side + storage_s + link_s;
        ls.storage_requests += requests;
        ls.storage_bytes += storage_bytes;
        ls.memory_bytes += memory_bytes;
        ls.link_bytes += link_bytes;
        ls.flops += flops;
        ls.storage_s += storage_s;
        ls.memory_s += memory_s;
        ls.compute_s += compute_s;
        ls.link_s += link_s;
        ls.stage_s += stage;
      }
    }
    tokens_seen = t;
  }
  if (tokens_seen != n_tokens) {
    return Status::InvalidArgument(StrFormat(
        "mask source '%s' ended after %lld of its %lld tokens", source->Describe().c_str(),
        static_cast<long long>(tokens_seen), static_cast<long long>(n_tokens)));
  }

  // Output head stage: final norm, the head, one embedding row.
  const TensorKind head_kind = shape.tied_output ? TensorKind::kTokenEmbd : TensorKind::kOutput;
  const uint64_t head_params = shape.TensorParams(TensorKind::kTokenEmbd, 0);
  double head_bytes =
      WeightBytes(head_params, bits.Of(head_kind)) +
      WeightBytes(static_cast<uint64_t>(shape.d_model), bits.Of(TensorKind::kNorm)) +
      WeightBytes(static_cast<uint64_t>(shape.d_model), bits.Of(TensorKind::kTokenEmbd));
  double head_flops = 2.0 * static_cast<double>(head_params);
  double head_mem_s = head_bytes / device.memory_bandwidth;
  r.head_s = std::max(head_mem_s, compute ? head_flops / device.flops_per_s : 0.0);

  const double m = static_cast<double>(n_tokens - config.warmup_tokens);
  r.tokens_simulated = n_tokens;
  r.tokens_measured = n_tokens - config.warmup_tokens;
  double total_s = 0, units = 0, active_units = 0, hits = 0;
  uint64_t requests = 0;
  for (const LayerStats& ls : r.layers) {
    total_s += ls.stage_s;
    r.storage_bytes_per_token += ls.storage_bytes;
    r.memory_bytes_per_token += ls.memory_bytes;
    r.link_bytes_per_token += ls.link_bytes;
    r.flops_per_token += ls.flops;
    r.storage_s += ls.storage_s;
    r.memory_s += ls.memory_s;
    r.compute_s += ls.compute_s;
    r.link_s += ls.link_s;
    units += static_cast<double>(ls.units);
    active_units += static_cast<double>(ls.active);
    hits += static_cast<double>(ls.hits);
    requests += ls.storage_requests;
    r.recorded.hits += ls.recorded.hits;
    r.recorded.misses += ls.recorded.misses;
    r.recorded.evictions += ls.recorded.evictions;
    r.recorded.bytes_read += ls.recorded.bytes_read;
  }
  r.seconds_per_token = total_s / m + r.head_s;
  r.tokens_per_second = 1.0 / r.seconds_per_token;
  r.storage_bytes_per_token /= m;
  r.memory_bytes_per_token = r.memory_bytes_per_token / m + head_bytes;
  r.link_bytes_per_token /= m;
  r.flops_per_token = r.flops_per_token / m + head_flops;
  r.storage_s /= m;
  r.memory_s = r.memory_s / m + head_mem_s;
  r.compute_s = r.compute_s / m + (compute ? head_flops / device.flops_per_s : 0);
  r.link_s /= m;
  r.density = units > 0 ? active_units / (units * m) : 0;
  r.hit_rate = active_units > 0 ? hits / active_units : 0;
  r.storage_requests_per_token = static_cast<uint64_t>(std::llround(requests / m));
  return r;
}

}  // namespace weir::sim
