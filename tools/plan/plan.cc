// weir plan: ActiveFlow's cost model and greedy search -- choose sparsity, layer-group size and
// cache size for a model, a device and a memory budget (docs/simulator.md, "Planner"); for a
// mixture of experts, the expert cache and the budget from a routing trace or synthetic routing
// (sim/expert_planner.h, docs/moe.md "Routing traces in the planner").
#include <cstdio>

#include "base/units.h"
#include "common/cli.h"
#include "common/commands.h"
#include "sim/expert_planner.h"
#include "sim/planner.h"
#include "sim/sim_report.h"
#include "sim/tool_inputs.h"

namespace weir::tools {
namespace {

struct ExpertFlags {
  std::string trace, policies = "lfu,lru";
  int64_t tokens = 256, warmup = 0;
  double slack = 0.05;
};

// A mixture of experts streamed by whole experts: the expert planner over the routing of
// --trace, or over synthetic routing (k of n experts per token, --hit-model's skew and repeat).
int PlanExpertsMain(const SimModel& m, const sim::DeviceProfile& dev, uint64_t memory,
                    const sim::PlannerOptions& po, const std::string& hit_model,
                    const ExpertFlags& f, bool json) {
  sim::ExpertPlanOptions o;
  o.bits = po.bits;
  o.kv_bits = po.kv_bits;
  o.kv_len = po.kv_len;
  o.model_compute = po.model_compute;
  o.warmup_tokens = f.warmup;
  o.slack = f.slack;
  auto policies = sim::ParseCachePolicyList(f.policies);
  if (!policies.ok()) return Fail("plan", policies.status());
  o.policies = std::move(policies).value();
  std::string spec;
  if (!f.trace.empty()) {
    spec = "trace:" + f.trace;
  } else {
    // Synthetic routing: exactly k of the n experts per token and layer.
    sim::SyntheticSpec s;
    s.kind = sim::SyntheticSpec::Kind::kZipf;
    s.zipf_s = 0;
    if (hit_model != "uniform") {
      auto given = sim::ParseSyntheticSpec(hit_model.find(':') == std::string::npos
                                               ? hit_model + ":0.5"
                                               : hit_model);
      if (!given.ok()) return Fail("plan", given.status().WithContext("--hit-model"));
      s = *given;
    }
    s.density = static_cast<double>(m.shape.n_experts_active) / m.shape.n_experts;
    spec = sim::DescribeSyntheticSpec(s);
  }
  auto src = MakeMaskSource(spec, m.shape, sim::StreamSet::kExperts, f.tokens);
  if (!src.ok()) return Fail("plan", src.status());
  auto plan = sim::PlanExperts(m.shape, dev, static_cast<double>(memory), o, src->get());
  if (!plan.ok()) return Fail("plan", plan.status());
  if (json) {
    PrintJson(sim::ExpertPlanToJson(*plan));
  } else {
    std::fputs(sim::ExpertPlanMarkdown(*plan).c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace

int PlanMain(int argc, char** argv) {
  CLI::App app(
      "Choose sparsity, layer-group size N and cache size for a memory budget with "
      "ActiveFlow's cost model (Eq. 1-9) and greedy search.",
      "plan");
  std::string model, device = "ufs4", memory_text, bits_text, stream_text = "all";
  std::string hit_model = "uniform";
  int64_t kv_len = 1024;
  double kv_bits = 16, max_sparsity = 0.8, similarity = 0.95;
  bool no_compute = false, json = false;
  ExpertFlags ef;
  app.add_option("--model", model, "a preset or a model file")->required();
  app.add_option("--device", device, "device profile name or JSON path (default ufs4)");
  app.add_option("--memory", memory_text, "memory budget (e.g. 2.5e9, 3GiB; GB means GiB here)")
      ->required();
  app.add_option("--bits", bits_text,
                 "bits per weight (default 4 for presets, the file's types "
                 "for files)");
  app.add_option("--stream", stream_text,
                 "sparsified tensors: all (ActiveFlow) or mlp; a mixture of experts is planned "
                 "with whole experts as the unit unless this is given");
  app.add_option("--kv-len", kv_len, "KV cache length in tokens (default 1024)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  app.add_option("--kv-bits", kv_bits, "bits per KV element (default 16)");
  app.add_option("--max-sparsity", max_sparsity, "highest sparsity allowed (default 0.8)");
  app.add_option("--similarity", similarity, "cross-layer similarity si (default 0.95)");
  app.add_option("--hit-model", hit_model,
                 "cache hit rate model: uniform (hr = cached fraction) or a synthetic mask spec "
                 "such as zipf:d=0.5,s=1,r=0.5 simulated with LFU (its density is replaced)");
  app.add_flag("--no-compute", no_compute, "ignore the profile's FLOP rate in T_comp");
  app.add_option("--trace", ef.trace,
                 "mixture of experts: a routing trace (`weir run|ppl|bench --trace` on a MoE "
                 "model, kind ffn_experts; fewer layers than the model are cycled) whose "
                 "replay chooses the expert cache and the budget (default: k of n experts "
                 "per token at random, --hit-model's skew)");
  app.add_option("--policy", ef.policies,
                 "mixture of experts: expert cache policies compared (default lfu,lru; also "
                 "belady, static)");
  app.add_option("--tokens", ef.tokens, "mixture of experts: tokens of synthetic routing "
                                        "(default 256)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--warmup", ef.warmup, "mixture of experts: tokens replayed but not counted")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  app.add_option("--slack", ef.slack,
                 "mixture of experts: the budget pick is the smallest expert cache within this "
                 "share of the best tok/s (default 0.05)");
  app.add_flag("--json", json, "print JSON");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  auto m = ResolveModel(model);
  if (!m.ok()) return Fail("plan", m.status());
  auto dev = ResolveDevice(device);
  if (!dev.ok()) return Fail("plan", dev.status());
  auto memory = ParseBytes(memory_text);
  if (!memory.ok()) return Fail("plan", memory.status().WithContext("--memory"));
  sim::PlannerOptions o;
  const bool moe = m->shape.n_experts > 1 && app.count("--stream") == 0;
  if (!ef.trace.empty() && !moe) {
    return Fail("plan", Status::InvalidArgument(StrFormat(
                            "--trace takes a routing trace of a mixture of experts; model '%s' "
                            "%s",
                            m->shape.name.c_str(),
                            m->shape.n_experts > 1 ? "is planned by --stream, not by experts"
                                                   : "has no experts")));
  }
  if (!bits_text.empty()) {
    auto b = sim::ParseWeightBits(bits_text);
    if (!b.ok()) return Fail("plan", b.status());
    o.bits = *b;
  } else if (m->file_bits) {
    o.bits = *m->file_bits;
  }
  auto streams = sim::ParseStreamSet(stream_text);
  if (!streams.ok()) return Fail("plan", streams.status());
  o.streams = *streams;
  o.kv_len = kv_len;
  o.kv_bits = kv_bits;
  o.max_sparsity = max_sparsity;
  o.similarity = similarity;
  o.model_compute = !no_compute;
  if (moe) return PlanExpertsMain(*m, *dev, *memory, o, hit_model, ef, json);
  if (hit_model != "uniform") {
    std::string spec_text = hit_model;
    if (spec_text.find(':') == std::string::npos) spec_text += ":0.5";
    auto spec = sim::ParseSyntheticSpec(spec_text);
    if (!spec.ok()) return Fail("plan", spec.status().WithContext("--hit-model"));
    uint32_t units = static_cast<uint32_t>(m->shape.layers[0].d_ff);
    o.hit_rate = sim::SimulatedHitRate(*spec, units, 128, sim::CachePolicy::kLfu);
  }
  auto plan = sim::PlanActiveFlow(m->shape, *dev, static_cast<double>(*memory), o);
  if (!plan.ok()) return Fail("plan", plan.status());
  if (json) {
    PrintJson(sim::PlanToJson(*plan));
  } else {
    std::fputs(sim::PlanMarkdown(*plan).c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace weir::tools
