// weir gen: write a Llama-shaped GGUF with random weights, i.i.d. N(0, 0.02) (norms = 1), from a
// seeded generator, with a synthetic SentencePiece vocabulary; llama.cpp loads these files too.
#include <algorithm>
#include <cstdio>
#include <thread>

#include "base/units.h"
#include "common/cli.h"
#include "common/commands.h"
#include "format/rope_scaling.h"
#include "format/synth_llama.h"

namespace weir::tools {

int GenMain(int argc, char** argv) {
  CLI::App app("Write a Llama-shaped GGUF with random weights N(0, 0.02), norms 1.0, and a synthetic\n"
               "byte-fallback vocabulary. Presets: tiny (tests), llama-1b (TinyLlama-1.1B shapes),\n"
               "llama-7b (Llama-2-7B shapes); --arch mixtral|qwen3moe: tiny, small (Mixtral 8x7B's\n"
               "layers x4, Qwen3-30B-A3B's x8; ~3 GB as q4_0). --rope-scaling and --rope-freqs\n"
               "write RoPE scaling (linear; Llama 3.1's rope_freqs).", "gen");
  std::string preset, dims, type = "q8_0", out, arch = "llama";
  uint64_t seed = 1;
  int threads = 0;
  bool json = false, no_progress = false;
  app.add_option("--arch", arch, "architecture: " + format::ArchNameList() + " (default llama)");
  auto* p = app.add_option("--preset", preset,
                           "shape preset: tiny, llama-1b, llama-7b (llama); tiny (others); "
                           "gemma3-270m, gemma3-1b (gemma3); qwen3-1.7b (qwen3); small (mixtral, qwen3moe)");
  auto* d = app.add_option("--dims", dims, "explicit shape d_model,n_layers,n_head,n_head_kv,d_ff,vocab")->excludes(p);
  std::string experts;
  app.add_option("--experts", experts, "with --dims on mixtral/qwen3moe: n_expert,n_expert_used (d_ff is each expert's)")
      ->needs(d);
  float router_skew = 0.0f;
  app.add_option("--router-skew", router_skew,
                 "mixtral/qwen3moe: scale router row e by (1 + e)^-S, so that low-numbered "
                 "experts are chosen more often (a skewed routing; default 0)")
      ->check(CLI::Range(0.0f, 8.0f));
  std::string rope_scaling, rope_freqs;
  app.add_option("--rope-scaling", rope_scaling,
                 "linear:F: linear RoPE scaling, positions divided by F (writes "
                 "<arch>.rope.scaling.type linear and .factor F; Gemma 3: global layers only)");
  app.add_option("--rope-freqs", rope_freqs,
                 "llama3[:FACTOR:LOW:HIGH:ORIG_CTX]: write rope_freqs.weight, Llama 3.1's per-pair "
                 "RoPE factors (default 8:1:4:8192, Llama 3.1's own; llama and mixtral)");
  float qk_gain = 1.0f;
  app.add_option("--qk-gain", qk_gain,
                 "multiply attn_q and attn_k by G (scores by G^2): sharp attention, so that "
                 "positions (RoPE, its scaling) decide the greedy tokens of a random model "
                 "(default 1)")
      ->check(CLI::Range(0.01f, 100.0f));
  float rope_theta = 0.0f;
  app.add_option("--rope-theta", rope_theta, "RoPE base (default: the preset's)")
      ->check(CLI::PositiveNumber);
  app.add_option("--type", type, "weight type: " + DTypeNameList() + " (default q8_0)");
  app.add_option("-o,--output", out, "output .gguf")->required();
  app.add_option("--seed", seed, "random seed (default 1)");
  app.add_option("-t,--threads", threads, "threads (default: all cores)");
  app.add_flag("--json", json, "print a JSON summary");
  app.add_flag("--no-progress", no_progress, "no progress bar");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  auto dtype = DTypeFromName(type);
  if (!dtype) {
    std::fprintf(stderr, "weir gen: unknown --type '%s' (%s)\n", type.c_str(),
                 DTypeNameList().c_str());
    return kExitUsage;
  }
  format::SynthSpec spec;
  if (!preset.empty()) {
    auto s = format::SynthPreset(preset, arch);
    if (!s.ok()) return Fail("gen", s.status());
    spec = *s;
  } else if (!dims.empty()) {
    int v[6];
    if (std::sscanf(dims.c_str(), "%d,%d,%d,%d,%d,%d", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) {
      std::fprintf(stderr, "weir gen: --dims wants d_model,n_layers,n_head,n_head_kv,d_ff,vocab\n");
      return kExitUsage;
    }
    spec.d_model = v[0];
    spec.n_layers = v[1];
    spec.n_head = v[2];
    spec.n_head_kv = v[3];
    spec.d_ff = v[4];
    spec.vocab_size = v[5];
    spec.arch = arch;
    if (arch == "qwen3moe") spec.rms_eps = 1e-6f, spec.rope_theta = 1e6f;
    if (arch == "gemma2") {  // Gemma 2's own soft-caps, window and epsilon
      spec.attn_softcap = 50.0f, spec.final_softcap = 30.0f, spec.sliding_window = 4096;
      spec.rms_eps = 1e-6f;
    }
    if (!experts.empty() &&
        std::sscanf(experts.c_str(), "%d,%d", &spec.n_expert, &spec.n_expert_used) != 2) {
      std::fprintf(stderr, "weir gen: --experts wants n_expert,n_expert_used\n");
      return kExitUsage;
    }
  } else {
    std::fprintf(stderr, "weir gen: give --preset or --dims\n");
    return kExitUsage;
  }
  spec.router_skew = router_skew;
  if (rope_theta > 0) spec.rope_theta = rope_theta;
  spec.qk_gain = qk_gain;
  if (!rope_scaling.empty()) {
    char tail = 0;
    if (std::sscanf(rope_scaling.c_str(), "linear:%f%c", &spec.rope_scaling_factor, &tail) != 1 ||
        !(spec.rope_scaling_factor > 0)) {
      std::fprintf(stderr, "weir gen: --rope-scaling wants linear:F with F > 0, got '%s'\n",
                   rope_scaling.c_str());
      return kExitUsage;
    }
  }
  if (!rope_freqs.empty()) {
    format::Llama3RopeScaling l3;
    char tail = 0;
    const bool plain = rope_freqs == "llama3";
    if (!plain && std::sscanf(rope_freqs.c_str(), "llama3:%lf:%lf:%lf:%lf%c", &l3.factor,
                              &l3.low_freq_factor, &l3.high_freq_factor,
                              &l3.original_max_position_embeddings, &tail) != 4) {
      std::fprintf(stderr,
                   "weir gen: --rope-freqs wants llama3 or llama3:FACTOR:LOW:HIGH:ORIG_CTX, got "
                   "'%s'\n",
                   rope_freqs.c_str());
      return kExitUsage;
    }
    const int head_dim = spec.head_dim > 0 ? spec.head_dim : spec.d_model / std::max(spec.n_head, 1);
    auto f = format::Llama3RopeFreqs(l3, spec.rope_theta, head_dim, "--rope-freqs");
    if (!f.ok()) return Fail("gen", f.status());
    spec.rope_freqs = *f;
  }
  ThreadPool pool(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  ProgressBar bar("gen " + out, 1000, !json && !no_progress);
  Status st = format::WriteRandomLlamaGguf(spec, *dtype, seed, out,
                                           [&](double f) { bar.Update(static_cast<uint64_t>(f * 1000)); }, &pool);
  bar.Finish();
  if (!st.ok()) return Fail("gen", st);
  if (json) {
    PrintJson({{"output", out}, {"arch", spec.arch}, {"preset", spec.name}, {"type", DTypeName(*dtype)}, {"seed", seed},
               {"d_model", spec.d_model}, {"n_layers", spec.n_layers}, {"n_head", spec.n_head},
               {"n_head_kv", spec.n_head_kv}, {"d_ff", spec.d_ff}, {"vocab_size", spec.vocab_size},
               {"n_expert", spec.n_expert}, {"n_expert_used", spec.n_expert_used},
               {"rope_theta", spec.rope_theta}, {"rope_scaling_factor", spec.rope_scaling_factor},
               {"rope_freqs", !spec.rope_freqs.empty()}});
  } else {
    std::printf("wrote %s (%s %s, %s, seed %llu)\n", out.c_str(), spec.arch.c_str(), spec.name.c_str(),
                DTypeName(*dtype), static_cast<unsigned long long>(seed));
  }
  return kExitOk;
}

}  // namespace weir::tools
