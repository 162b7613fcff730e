// weir sim: simulate decoding a model on a device profile -- flash -> DRAM -> compute, with a
// weight cache and masks from a trace or a synthetic generator (docs/simulator.md).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/units.h"
#include "common/cli.h"
#include "common/commands.h"
#include "sim/sim_report.h"
#include "sim/stream_replay_report.h"
#include "sim/simulator.h"
#include "sim/svg_plot.h"
#include "sim/synthetic_masks.h"
#include "sim/tool_inputs.h"

namespace weir::tools {
namespace {

struct Sweep {
  std::string param;  // "", "dram", "flash", "density"
  std::vector<double> values;
};

Result<Sweep> ParseSweep(const std::string& text) {
  Sweep s;
  if (text.empty()) return s;
  size_t eq = text.find('=');
  std::string key = text.substr(0, eq);
  std::vector<std::string> parts;
  if (eq != std::string::npos) {
    std::stringstream ss(text.substr(eq + 1));
    for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  }
  if ((key != "dram" && key != "flash" && key != "density") || parts.size() != 3) {
    return Status::InvalidArgument(
        StrFormat("--sweep '%s': expected dram=LO:HI:N, flash=LO:HI:N (GB/s) or density=LO:HI:N",
                  text.c_str()));
  }
  double lo = 0, hi = 0;
  for (int i = 0; i < 2; ++i) {
    double v = 0;
    if (key == "dram") {
      WEIR_ASSIGN_OR_RETURN(uint64_t b, ParseBytes(parts[static_cast<size_t>(i)]));
      v = static_cast<double>(b);
    } else {
      char* end = nullptr;
      v = std::strtod(parts[static_cast<size_t>(i)].c_str(), &end);
      if (*end != '\0' || !(v > 0)) {
        return Status::InvalidArgument(StrFormat("--sweep '%s': '%s' is not a positive number",
                                                 text.c_str(),
                                                 parts[static_cast<size_t>(i)].c_str()));
      }
    }
    (i == 0 ? lo : hi) = v;
  }
  char* end = nullptr;
  long n = std::strtol(parts[2].c_str(), &end, 10);
  if (*end != '\0' || n < 1 || n > 1000 || hi < lo || (key == "density" && hi > 1)) {
    return Status::InvalidArgument(
        StrFormat("--sweep '%s': need LO <= HI (density <= 1) and "
                  "1..1000 points",
                  text.c_str()));
  }
  s.param = key;
  for (long i = 0; i < n; ++i) {
    s.values.push_back(n == 1 ? lo : lo + (hi - lo) * static_cast<double>(i) / (n - 1));
  }
  return s;
}

std::string FormatParam(const std::string& param, double v) {
  if (param == "dram") return sim::FormatDecimalBytes(v);
  if (param == "flash") return StrFormat("%.3g GB/s", v);
  return StrFormat("%.3g", v);
}

}  // namespace

int SimMain(int argc, char** argv) {
  CLI::App app(
      "Simulate decoding on a device: static tensors in DRAM, the rest streamed from flash "
      "through a weight cache, per DIP appendix A (see docs/simulator.md).",
      "sim");
  std::string model, device = "a18", dram_text, host_text, policies = "lfu", masks = "dense";
  std::string stream_text = "mlp", bits_text, concurrent = "profile", sweep_text, plot;
  int64_t kv_len = 1024, tokens = 64, warmup = 0;
  double kv_bits = 16, flash = 0;
  bool no_compute = false, layers = false, json = false;
  app.add_option(
         "--model", model,
         "a preset (" +
             [] {
               std::string s;
               for (const auto& n : sim::ModelPresetNames()) s += (s.empty() ? "" : ", ") + n;
               return s;
             }() +
             ") or a model file")
      ->required();
  app.add_option("--device", device,
                 "device profile name (profiles/NAME.json) or JSON path "
                 "(default a18)");
  app.add_option("--dram", dram_text,
                 "memory for the model: static tensors + weight cache (e.g. 4e9, 3.5GiB; note "
                 "GB means GiB here); default the profile's capacity");
  app.add_option("--host", host_text,
                 "host-tier capacity for cached weights (profiles with a "
                 "host tier); default the profile's");
  app.add_option("--policy", policies,
                 "cache policy: lru, lfu, belady, static (none); a comma "
                 "list compares several (default lfu)");
  app.add_option("--masks", masks,
                 "dense | uniform:D | zipf:d=D,s=S,r=R,seed=N | trace:FILE "
                 "(default dense)");
  app.add_option("--stream", stream_text,
                 "streamed tensors for synthetic masks: mlp, all, or experts (a MoE "
                 "model's experts as whole units; default mlp)");
  app.add_option("--bits", bits_text,
                 "bits per weight: 4, or 4,attn=8,embd=16,... (default 4 "
                 "for presets, the file's types for files)");
  app.add_option("--kv-len", kv_len,
                 "KV cache length in tokens: held in DRAM and read per "
                 "token (default 1024)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  app.add_option("--kv-bits", kv_bits, "bits per KV element (default 16)");
  app.add_option("--tokens", tokens, "tokens to simulate with synthetic masks (default 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--warmup", warmup, "tokens simulated but not counted (default 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  app.add_option("--concurrent-io", concurrent,
                 "overlap storage reads with memory/compute: "
                 "on, off or profile (default profile)");
  app.add_option("--flash", flash, "storage peak read speed in GB/s (scales the profile's curve)");
  app.add_flag("--no-compute", no_compute,
               "leave compute time out even if the profile has a "
               "FLOP rate");
  app.add_option("--sweep", sweep_text, "dram=LO:HI:N | flash=LO:HI:N | density=LO:HI:N");
  app.add_option("--plot", plot, "write an SVG plot of tok/s over the sweep");
  app.add_flag("--layers", layers, "per-layer table (JSON always has it without --sweep)");
  app.add_flag("--json", json, "print JSON");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  if (masks.rfind("trace:", 0) == 0) {
    // A trace of a streamed pack replays through the engine's own cache, not the model below.
    auto is_stream = IsStreamTrace(masks.substr(6));
    if (!is_stream.ok()) return Fail("sim", is_stream.status());
    if (*is_stream) {
      auto dev = ResolveDevice(device);
      if (!dev.ok()) return Fail("sim", dev.status());
      StreamReplayFlags rf;
      rf.pack = model;
      rf.trace = masks.substr(6);
      if (app.count("--policy") > 0) rf.policy = policies;
      if (!dram_text.empty()) {
        auto b = ParseBytes(dram_text);
        if (!b.ok()) return Fail("sim", b.status().WithContext("--dram"));
        rf.memory_budget = *b;
      }
      rf.warmup = warmup;
      rf.json = json;
      return StreamReplayMain(rf, *dev);
    }
  }

  auto m = ResolveModel(model);
  if (!m.ok()) return Fail("sim", m.status());
  auto dev = ResolveDevice(device);
  if (!dev.ok()) return Fail("sim", dev.status());
  auto stream_set = sim::ParseStreamSet(stream_text);
  if (!stream_set.ok()) return Fail("sim", stream_set.status());
  auto sweep = ParseSweep(sweep_text);
  if (!sweep.ok()) return Fail("sim", sweep.status());
  if (!plot.empty() && sweep->param.empty()) {
    return Fail("sim", Status::InvalidArgument("--plot needs --sweep"));
  }
  auto parsed_policies = sim::ParseCachePolicyList(policies);
  if (!parsed_policies.ok()) return Fail("sim", parsed_policies.status());
  const std::vector<sim::CachePolicy> policy_list = std::move(parsed_policies).value();
  sim::SimConfig cfg;
  if (!dram_text.empty()) {
    auto b = ParseBytes(dram_text);
    if (!b.ok()) return Fail("sim", b.status().WithContext("--dram"));
    cfg.memory_bytes = static_cast<double>(*b);
  }
  if (!host_text.empty()) {
    auto b = ParseBytes(host_text);
    if (!b.ok()) return Fail("sim", b.status().WithContext("--host"));
    cfg.host_bytes = static_cast<double>(*b);
  }
  if (!bits_text.empty()) {
    auto b = sim::ParseWeightBits(bits_text);
    if (!b.ok()) return Fail("sim", b.status());
    cfg.bits = *b;
  } else if (m->file_bits) {
    cfg.bits = *m->file_bits;
  }
  cfg.kv_bits = kv_bits;
  cfg.kv_len = kv_len;
  cfg.warmup_tokens = warmup;
  cfg.model_compute = !no_compute;
  if (concurrent == "on") {
    cfg.concurrent_io = 1;
  } else if (concurrent == "off") {
    cfg.concurrent_io = 0;
  } else if (concurrent != "profile") {
    return Fail("sim", Status::InvalidArgument(StrFormat("--concurrent-io '%s': expected on, off "
                                                         "or profile",
                                                         concurrent.c_str())));
  }
  if (flash > 0) dev->storage_read.ScaleToPeak(flash * sim::kGB);

  // One simulation per (sweep value, policy).
  auto run_one = [&](double value, sim::CachePolicy policy) -> Result<sim::SimResult> {
    sim::SimConfig c = cfg;
    c.policy = policy;
    sim::DeviceProfile d = *dev;
    std::string mask_spec = masks;
    if (sweep->param == "dram") c.memory_bytes = value;
    if (sweep->param == "flash") d.storage_read.ScaleToPeak(value * sim::kGB);
    if (sweep->param == "density") {
      WEIR_ASSIGN_OR_RETURN(sim::SyntheticSpec spec, sim::ParseSyntheticSpec(masks));
      if (spec.kind == sim::SyntheticSpec::Kind::kDense) {
        return Status::InvalidArgument("--sweep density needs uniform or zipf masks");
      }
      spec.density = value;
      mask_spec = sim::DescribeSyntheticSpec(spec);
    }
    WEIR_ASSIGN_OR_RETURN(auto src, MakeMaskSource(mask_spec, m->shape, *stream_set, tokens));
    return sim::Simulate(m->shape, d, c, src.get());
  };

  if (sweep->param.empty()) {
    std::vector<sim::SimResult> results;
    for (sim::CachePolicy p : policy_list) {
      auto r = run_one(0, p);
      if (!r.ok()) return Fail("sim", r.status());
      results.push_back(std::move(*r));
    }
    if (json) {
      if (results.size() == 1) {
        PrintJson(sim::SimResultToJson(results[0], true));
      } else {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& r : results) arr.push_back(sim::SimResultToJson(r, layers));
        PrintJson({{"results", arr}});
      }
      return kExitOk;
    }
    for (const auto& r : results) {
      std::fputs(sim::SimResultMarkdown(r, layers).c_str(), stdout);
      std::fputc('\n', stdout);
    }
    return kExitOk;
  }

  const bool progress = !json && ::isatty(2);
  ProgressBar bar("sim", sweep->values.size() * policy_list.size(), progress);
  nlohmann::json points = nlohmann::json::array();
  std::string table = StrFormat(
      "| %s | policy | tok/s | hit rate | storage/token | s/token |\n"
      "|---|---|---|---|---|---|\n",
      sweep->param.c_str());
  sim::PlotSpec plot_spec;
  plot_spec.title =
      StrFormat("%s on %s, masks %s", m->shape.name.c_str(), dev->name.c_str(), masks.c_str());
  plot_spec.x_label = sweep->param == "dram"    ? "memory for the model (GB)"
                      : sweep->param == "flash" ? "flash read speed (GB/s)"
                                                : "density";
  plot_spec.y_label = "tokens / s";
  for (sim::CachePolicy p : policy_list)
    plot_spec.series.push_back({sim::CachePolicyName(p), {}, {}});
  uint64_t done = 0;
  for (double v : sweep->values) {
    for (size_t pi = 0; pi < policy_list.size(); ++pi) {
      auto r = run_one(v, policy_list[pi]);
      if (!r.ok()) return Fail("sim", r.status().WithContext(FormatParam(sweep->param, v)));
      bar.Update(++done);
      points.push_back(
          {{"value", v}, {"policy", r->policy}, {"result", sim::SimResultToJson(*r, layers)}});
      table += StrFormat(
          "| %s | %s | %.4g | %.2f%% | %s | %.4g |\n", FormatParam(sweep->param, v).c_str(),
          r->policy.c_str(), r->tokens_per_second, 100 * r->hit_rate,
          sim::FormatDecimalBytes(r->storage_bytes_per_token).c_str(), r->seconds_per_token);
      plot_spec.series[pi].x.push_back(sweep->param == "dram" ? v / sim::kGB : v);
      plot_spec.series[pi].y.push_back(r->tokens_per_second);
    }
  }
  bar.Finish();
  if (!plot.empty()) {
    std::ofstream out(plot);
    out << sim::LinePlotSvg(plot_spec);
    if (!out) {
      return Fail("sim", Status::IoError(StrFormat("%s: cannot write the plot", plot.c_str())));
    }
  }
  if (json) {
    PrintJson({{"model", m->shape.name},
               {"device", dev->name},
               {"masks", masks},
               {"sweep", sweep->param},
               {"points", points}});
    return kExitOk;
  }
  std::printf("%s on %s, masks %s\n\n%s", m->shape.name.c_str(), dev->name.c_str(), masks.c_str(),
              table.c_str());
  if (!plot.empty()) std::printf("\nplot: %s\n", plot.c_str());
  return kExitOk;
}

}  // namespace weir::tools
