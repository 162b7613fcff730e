// weir plan: ActiveFlow's cost model and greedy search -- choose sparsity, layer-group size and
// cache size for a model, a device and a memory budget (docs/simulator.md, "Planner").
#include <cstdio>

#include "base/units.h"
#include "common/cli.h"
#include "common/commands.h"
#include "sim/planner.h"
#include "sim/sim_report.h"
#include "sim/tool_inputs.h"

namespace weir::tools {

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
  app.add_option("--model", model, "a preset or a model file")->required();
  app.add_option("--device", device, "device profile name or JSON path (default ufs4)");
  app.add_option("--memory", memory_text, "memory budget (e.g. 2.5e9, 3GiB; GB means GiB here)")
      ->required();
  app.add_option("--bits", bits_text,
                 "bits per weight (default 4 for presets, the file's types "
                 "for files)");
  app.add_option("--stream", stream_text, "sparsified tensors: all (ActiveFlow) or mlp");
  app.add_option("--kv-len", kv_len, "KV cache length in tokens (default 1024)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  app.add_option("--kv-bits", kv_bits, "bits per KV element (default 16)");
  app.add_option("--max-sparsity", max_sparsity, "highest sparsity allowed (default 0.8)");
  app.add_option("--similarity", similarity, "cross-layer similarity si (default 0.95)");
  app.add_option("--hit-model", hit_model,
                 "cache hit rate model: uniform (hr = cached fraction) or a synthetic mask spec "
                 "such as zipf:d=0.5,s=1,r=0.5 simulated with LFU (its density is replaced)");
  app.add_flag("--no-compute", no_compute, "ignore the profile's FLOP rate in T_comp");
  app.add_flag("--json", json, "print JSON");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  auto m = ResolveModel(model);
  if (!m.ok()) return Fail("plan", m.status());
  auto dev = ResolveDevice(device);
  if (!dev.ok()) return Fail("plan", dev.status());
  auto memory = ParseBytes(memory_text);
  if (!memory.ok()) return Fail("plan", memory.status().WithContext("--memory"));
  sim::PlannerOptions o;
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
