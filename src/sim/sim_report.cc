#include "sim/sim_report.h"

#include <cmath>

namespace weir::sim {

using nlohmann::json;

std::string FormatDecimalBytes(double b) {
  if (!std::isfinite(b)) return "?";
  double a = std::fabs(b);
  if (a >= 1e9) return StrFormat("%.3f GB", b / 1e9);
  if (a >= 1e6) return StrFormat("%.1f MB", b / 1e6);
  if (a >= 1e3) return StrFormat("%.1f kB", b / 1e3);
  return StrFormat("%.0f B", b);
}

json MemoryPlanToJson(const MemoryPlan& p) {
  return {{"memory_bytes", p.memory_bytes},
          {"static_bytes", p.static_bytes},
          {"attention_bytes", p.attention_bytes},
          {"mlp_static_bytes", p.mlp_static_bytes},
          {"router_bytes", p.router_bytes},
          {"norm_bytes", p.norm_bytes},
          {"embedding_bytes", p.embedding_bytes},
          {"output_bytes", p.output_bytes},
          {"kv_bytes", p.kv_bytes},
          {"streamed_bytes", p.streamed_bytes},
          {"cache_bytes", p.cache_bytes},
          {"cached_fraction", p.streamed_bytes > 0 ? p.cache_bytes / p.streamed_bytes : 0},
          {"host_cache_bytes", p.host_cache_bytes}};
}

json SimResultToJson(const SimResult& r, bool per_layer) {
  json j = {{"model", r.model},
            {"device", r.device},
            {"policy", r.policy},
            {"masks", r.masks},
            {"concurrent_io", r.concurrent_io},
            {"compute_modeled", r.compute_modeled},
            {"tokens_simulated", r.tokens_simulated},
            {"tokens_measured", r.tokens_measured},
            {"tokens_per_second", r.tokens_per_second},
            {"seconds_per_token", r.seconds_per_token},
            {"hit_rate", r.hit_rate},
            {"density", r.density},
            {"bytes_per_token",
             {{"storage", r.storage_bytes_per_token},
              {"memory", r.memory_bytes_per_token},
              {"link", r.link_bytes_per_token}}},
            {"storage_requests_per_token", r.storage_requests_per_token},
            {"flops_per_token", r.flops_per_token},
            {"time_per_token_s",
             {{"storage", r.storage_s},
              {"memory", r.memory_s},
              {"compute", r.compute_s},
              {"link", r.link_s},
              {"head", r.head_s},
              {"total", r.seconds_per_token}}},
            {"memory_plan", MemoryPlanToJson(r.plan)}};
  uint64_t hits = 0, misses = 0, evictions = 0, requests = 0;
  for (const LayerStats& l : r.layers) {
    hits += l.hits;
    misses += l.misses;
    evictions += l.evictions;
    requests += l.storage_requests;
  }
  j["storage_requests"] = requests;  // over the measured tokens (the per-token figure is rounded)
  j["hits"] = hits;
  j["misses"] = misses;
  j["evictions"] = evictions;
  if (r.has_recorded) {
    j["recorded"] = {{"hits", r.recorded.hits},
                     {"misses", r.recorded.misses},
                     {"evictions", r.recorded.evictions},
                     {"bytes_read", r.recorded.bytes_read}};
  }
  if (per_layer) {
    json layers = json::array();
    const double m = static_cast<double>(r.tokens_measured > 0 ? r.tokens_measured : 1);
    for (const LayerStats& l : r.layers) {
      json e = {{"layer", l.layer},
                {"units", l.units},
                {"active", l.active},
                {"hits", l.hits},
                {"misses", l.misses},
                {"evictions", l.evictions},
                {"host_hits", l.host_hits},
                {"hit_rate", l.hit_rate()},
                {"storage_bytes_per_token", l.storage_bytes / m},
                {"memory_bytes_per_token", l.memory_bytes / m},
                {"stage_seconds_per_token", l.stage_s / m}};
      if (r.has_recorded) {
        e["recorded"] = {{"hits", l.recorded.hits},
                         {"misses", l.recorded.misses},
                         {"evictions", l.recorded.evictions},
                         {"bytes_read", l.recorded.bytes_read}};
      }
      layers.push_back(e);
    }
    j["layers"] = layers;
  }
  return j;
}

std::string SimResultMarkdown(const SimResult& r, bool per_layer) {
  const MemoryPlan& p = r.plan;
  std::string o =
      StrFormat("%s on %s: %s memory, policy %s, masks %s, %lld tokens (%lld measured)\n\n",
                r.model.c_str(), r.device.c_str(), FormatDecimalBytes(p.memory_bytes).c_str(),
                r.policy.c_str(), r.masks.c_str(), static_cast<long long>(r.tokens_simulated),
                static_cast<long long>(r.tokens_measured));
  o += "| metric | value |\n|---|---|\n";
  o += StrFormat("| tok/s | %.4g |\n", r.tokens_per_second);
  o += StrFormat("| s/token | %.4g |\n", r.seconds_per_token);
  o += StrFormat("| hit rate | %.2f%% |\n", 100 * r.hit_rate);
  o += StrFormat("| density (active units) | %.2f%% |\n", 100 * r.density);
  o += StrFormat("| storage bytes/token | %s in %llu requests |\n",
                 FormatDecimalBytes(r.storage_bytes_per_token).c_str(),
                 static_cast<unsigned long long>(r.storage_requests_per_token));
  o += StrFormat("| memory bytes/token | %s |\n",
                 FormatDecimalBytes(r.memory_bytes_per_token).c_str());
  if (r.link_bytes_per_token > 0 || r.link_s > 0) {
    o += StrFormat("| link bytes/token | %s |\n",
                   FormatDecimalBytes(r.link_bytes_per_token).c_str());
  }
  o += StrFormat("| time/token: storage, memory, compute, link | %.4g s, %.4g s, %s, %.4g s |\n",
                 r.storage_s, r.memory_s,
                 r.compute_modeled ? StrFormat("%.4g s", r.compute_s).c_str() : "not modeled",
                 r.link_s);
  o += StrFormat("| stages | %s |\n", r.concurrent_io ? "max(storage, max(memory, compute), link)"
                                                      : "storage + max(memory, compute) + link");
  if (r.has_recorded) {
    uint64_t hits = 0, misses = 0;
    for (const LayerStats& l : r.layers) {
      hits += l.hits;
      misses += l.misses;
    }
    o += StrFormat("| hits / misses: simulated vs recorded | %llu / %llu vs %llu / %llu |\n",
                   static_cast<unsigned long long>(hits), static_cast<unsigned long long>(misses),
                   static_cast<unsigned long long>(r.recorded.hits),
                   static_cast<unsigned long long>(r.recorded.misses));
    o += StrFormat("| storage bytes: simulated vs recorded | %.0f vs %llu |\n",
                   r.storage_bytes_per_token * static_cast<double>(r.tokens_measured),
                   static_cast<unsigned long long>(r.recorded.bytes_read));
  }
  o += "\nmemory plan:\n\n| part | bytes |\n|---|---|\n";
  auto row = [&](const char* name, double b) {
    if (b > 0) o += StrFormat("| %s | %s |\n", name, FormatDecimalBytes(b).c_str());
  };
  row("attention (static)", p.attention_bytes);
  row("MLP (static)", p.mlp_static_bytes);
  row("router", p.router_bytes);
  row("norms", p.norm_bytes);
  row("token embeddings", p.embedding_bytes);
  row("output head", p.output_bytes);
  row("KV cache", p.kv_bytes);
  o += StrFormat("| **static total** | %s |\n", FormatDecimalBytes(p.static_bytes).c_str());
  o += StrFormat("| weight cache | %s (%.1f%% of %s streamed) |\n",
                 FormatDecimalBytes(p.cache_bytes).c_str(),
                 p.streamed_bytes > 0 ? 100 * p.cache_bytes / p.streamed_bytes : 0.0,
                 FormatDecimalBytes(p.streamed_bytes).c_str());
  if (p.host_cache_bytes > 0) row("host-tier cache", p.host_cache_bytes);
  if (per_layer) {
    const double m = static_cast<double>(r.tokens_measured > 0 ? r.tokens_measured : 1);
    o += "\n| layer | hit rate | evictions/token | storage/token | memory/token | stage s/token |\n"
         "|---|---|---|---|---|---|\n";
    for (const LayerStats& l : r.layers) {
      o += StrFormat("| %d | %.2f%% | %.1f | %s | %s | %.4g |\n", l.layer, 100 * l.hit_rate(),
                     static_cast<double>(l.evictions) / m,
                     FormatDecimalBytes(l.storage_bytes / m).c_str(),
                     FormatDecimalBytes(l.memory_bytes / m).c_str(), l.stage_s / m);
    }
  }
  return o;
}

json PlanToJson(const Plan& p) {
  json steps = json::array();
  for (const PlanStep& s : p.steps) {
    steps.push_back({{"n", s.n},
                     {"group_bytes", s.group_bytes},
                     {"cache_bytes", s.cache_bytes},
                     {"hit_rate", s.hit_rate},
                     {"bw_small", s.bw_small},
                     {"bw_large", s.bw_large},
                     {"t_load", s.t_load},
                     {"t_comp", s.t_comp},
                     {"t_onload", s.t_onload},
                     {"t_preload", s.t_preload},
                     {"t_overlap", s.t_overlap},
                     {"t_decode", s.t_decode}});
  }
  return {{"model", p.model},
          {"device", p.device},
          {"memory_budget", p.memory_budget},
          {"sparsity", p.sparsity},
          {"group_layers", p.group_layers},
          {"tokens_per_second", p.tokens_per_second},
          {"seconds_per_token", p.seconds_per_token},
          {"hit_rate", p.hit_rate},
          {"memory",
           {{"group_bytes", p.group_bytes},
            {"cache_bytes", p.cache_bytes},
            {"kv_bytes", p.kv_bytes},
            {"resident_bytes", p.fixed_bytes},
            {"used_bytes", p.memory_used}}},
          {"layer_bytes", p.layer_bytes},
          {"streamed_bytes", p.model_streamed_bytes},
          {"channel_bytes", p.channel_bytes},
          {"stop_reason", p.stop_reason},
          {"steps", steps}};
}

std::string PlanMarkdown(const Plan& p) {
  std::string o = StrFormat("%s on %s with %s of memory\n\n", p.model.c_str(), p.device.c_str(),
                            FormatDecimalBytes(p.memory_budget).c_str());
  o += "| choice | value |\n|---|---|\n";
  o += StrFormat("| sparsity | %.3f (density %.3f) |\n", p.sparsity, 1 - p.sparsity);
  o += StrFormat("| layers per preload group N | %d |\n", p.group_layers);
  o += StrFormat("| weight cache | %s (hit rate %.1f%%) |\n",
                 FormatDecimalBytes(p.cache_bytes).c_str(), 100 * p.hit_rate);
  o += StrFormat("| predicted tok/s | %.4g |\n", p.tokens_per_second);
  o += StrFormat("| stopped because | %s |\n", p.stop_reason.c_str());
  o += "\nmemory split:\n\n| part | bytes |\n|---|---|\n";
  o += StrFormat("| layer-group buffer (M_cl) | %s |\n", FormatDecimalBytes(p.group_bytes).c_str());
  o += StrFormat("| weight cache (M_cache) | %s |\n", FormatDecimalBytes(p.cache_bytes).c_str());
  o += StrFormat("| KV cache (M_kv) | %s |\n", FormatDecimalBytes(p.kv_bytes).c_str());
  o += StrFormat("| resident: embeddings, head, norms | %s |\n",
                 FormatDecimalBytes(p.fixed_bytes).c_str());
  o += StrFormat("| **total** | %s of %s |\n", FormatDecimalBytes(p.memory_used).c_str(),
                 FormatDecimalBytes(p.memory_budget).c_str());
  o +=
      "\ngreedy search:\n\n| N | M_cl | M_cache | hr | BW_large | T_preload | T_comp | T_decode |\n"
      "|---|---|---|---|---|---|---|---|\n";
  for (const PlanStep& s : p.steps) {
    o += StrFormat("| %d | %s | %s | %.3f | %.2f GB/s | %.4g s | %.4g s | %.4g s |\n", s.n,
                   FormatDecimalBytes(s.group_bytes).c_str(),
                   FormatDecimalBytes(s.cache_bytes).c_str(), s.hit_rate, s.bw_large / 1e9,
                   s.t_preload, s.t_comp, s.t_decode);
  }
  return o;
}

namespace {
json ExpertStepToJson(const ExpertPlanStep& s) {
  return {{"cached_experts", s.cached_experts},
          {"memory_bytes", s.memory_bytes},
          {"policy", s.policy},
          {"hit_rate", s.hit_rate},
          {"storage_bytes_per_token", s.storage_bytes_per_token},
          {"reads_per_token", s.reads_per_token},
          {"tokens_per_second", s.tokens_per_second}};
}
}  // namespace

json ExpertPlanToJson(const ExpertPlan& p) {
  json steps = json::array();
  for (const ExpertPlanStep& s : p.steps) steps.push_back(ExpertStepToJson(s));
  return {{"model", p.model},
          {"device", p.device},
          {"routing", p.routing},
          {"memory_budget", p.memory_budget},
          {"n_layers", p.n_layers},
          {"n_experts", p.n_experts},
          {"n_experts_active", p.n_experts_active},
          {"expert_bytes", p.expert_bytes},
          {"static_bytes", p.static_bytes},
          {"all_cached_bytes", p.all_cached_bytes},
          {"tokens_measured", p.tokens_measured},
          {"slack", p.slack},
          {"at_budget", ExpertStepToJson(p.at_budget)},
          {"budget_pick", ExpertStepToJson(p.budget_pick)},
          {"steps", steps}};
}

std::string ExpertPlanMarkdown(const ExpertPlan& p) {
  auto B = [](double b) { return FormatDecimalBytes(b); };
  std::string o = StrFormat(
      "%s on %s with %s of memory, routing %s (%lld tokens measured)\n\n", p.model.c_str(),
      p.device.c_str(), B(p.memory_budget).c_str(), p.routing.c_str(),
      static_cast<long long>(p.tokens_measured));
  o += StrFormat(
      "%d layers of %d experts, %d per token; an expert %s; everything but the experts %s; "
      "every expert cached at %s\n\n",
      p.n_layers, p.n_experts, p.n_experts_active, B(p.expert_bytes).c_str(),
      B(p.static_bytes).c_str(), B(p.all_cached_bytes).c_str());
  o += "| choice | experts cached per layer | memory | policy | hit rate | read / token | "
       "reads / token | tok/s |\n|---|---|---|---|---|---|---|---|\n";
  auto row = [&](const char* what, const ExpertPlanStep& s) {
    o += StrFormat("| %s | %d | %s | %s | %.3f | %s | %.1f | %.4g |\n", what, s.cached_experts,
                   B(s.memory_bytes).c_str(), s.policy.c_str(), s.hit_rate,
                   B(s.storage_bytes_per_token).c_str(), s.reads_per_token,
                   s.tokens_per_second);
  };
  row("at the budget", p.at_budget);
  row(StrFormat("budget pick (within %.0f%%)", 100 * p.slack).c_str(), p.budget_pick);
  o += "\nevery cache size that fits:\n\n| experts cached per layer | memory | policy | hit rate | "
       "read / token | reads / token | tok/s |\n|---|---|---|---|---|---|---|\n";
  for (const ExpertPlanStep& s : p.steps) {
    o += StrFormat("| %d | %s | %s | %.3f | %s | %.1f | %.4g |\n", s.cached_experts,
                   B(s.memory_bytes).c_str(), s.policy.c_str(), s.hit_rate,
                   B(s.storage_bytes_per_token).c_str(), s.reads_per_token,
                   s.tokens_per_second);
  }
  return o;
}

}  // namespace weir::sim
