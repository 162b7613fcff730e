// weir bench: prompt and decode speed of a model, in llama-bench's spirit, with the weight bytes
// a decode step reads, the bandwidth that achieves, and that as a fraction of a STREAM reading
// taken in the same run. Prints a Markdown table, or JSON with --json.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "base/memory_bandwidth.h"
#include "base/units.h"
#include "common/cli.h"
#include "common/commands.h"
#include "common/draft_flags.h"
#include "common/model_flags.h"
#include "common/streaming_flags.h"
#include "common/trace_flags.h"
#include "model/generate.h"
#include "model/sampler.h"
#include "model/session.h"

namespace weir::tools {

namespace {
Status ReadTextFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError(path + ": read failed");
  *out = ss.str();
  return Status::Ok();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}
}  // namespace

int BenchMain(int argc, char** argv) {
  CLI::App app("Prompt and decode speed, bytes of weights per token, achieved bandwidth vs STREAM.", "bench");
  ModelFlags mf;
  int n_gen = 128, n_prompt = 128, reps = 3, depth = 0;
  bool json = false, no_stream = false;
  AddModelFlags(app, &mf);
  SparsityFlags spf;
  AddSparsityFlags(app, &spf);
  StreamingFlags stf;
  AddStreamingFlags(app, &stf);
  TraceFlags tf;
  AddTraceFlags(app, &tf);
  app.add_option("-n,--n-gen", n_gen, "tokens to decode per repetition (default 128)")->check(CLI::Range(1, 1 << 20));
  app.add_option("-p,--n-prompt", n_prompt, "prompt tokens per repetition; 0 = skip (default 128)")->check(CLI::Range(0, 1 << 20));
  app.add_option("-d,--depth", depth,
                 "tokens of context already in the KV cache when the prompt and decode are timed "
                 "(llama-bench's -d; default 0: from an empty context)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("-r,--repetitions", reps, "repetitions; the median is reported (default 3)")->check(CLI::Range(1, 1000));
  app.add_flag("--no-stream", no_stream,
               "skip the STREAM bandwidth measurement (skipped anyway for a pack under a memory "
               "budget: its arrays would not fit)");
  app.add_flag("--json", json, "print as JSON");
  std::string prompt_file;
  app.add_option("--prompt-file", prompt_file,
                 "a text file whose first -p tokens are the prompt (special tokens such as <|im_start|> "
                 "written out are parsed); decode then continues it "
                 "(greedy), instead of synthetic prompt tokens and a decode from an empty context "
                 "(speculative drafts need real text)");
  DraftFlags df;
  AddDraftFlags(app, &df);
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  if (Status st = ParseSparsityFlags(&spf); !st.ok()) return Fail("bench", st);
  if (Status st = ParseDraftFlags(&df); !st.ok()) {
    std::fprintf(stderr, "weir bench: error: %s\n", st.ToString().c_str());
    return kExitUsage;
  }
  if (df.enabled() && prompt_file.empty()) {
    std::fprintf(stderr, "weir bench: error: --draft needs --prompt-file (a draft is measured on real text)\n");
    return kExitUsage;
  }
  if (!prompt_file.empty() && depth > 0) {
    std::fprintf(stderr, "weir bench: error: --depth times synthetic tokens; it does not combine with --prompt-file\n");
    return kExitUsage;
  }
  if (!prompt_file.empty() && n_prompt == 0) {
    std::fprintf(stderr, "weir bench: error: --prompt-file needs -p of at least 1 token\n");
    return kExitUsage;
  }
  // A dense run: tiled weights (kernels/tiled.h); a self draft's sparse products need rows.
  mf.tile = spf.policy == nullptr && !HasSelfDraft(df);
  ThreadPool pool(ThreadCount(mf));
  mf.pool = &pool;  // also copies the weights at load
  ConfigureTrace(tf, &stf);
  const auto load_start = std::chrono::steady_clock::now();
  auto m = LoadRunModel(mf, stf);
  if (!m.ok()) return Fail("bench", m.status());
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  const model::Model& model = m->model();
  // Where the weights were read from during the run (--mmap, docs/performance.md).
  const char* weights = m->streaming ? "streamed" : model.file().weights_in_memory ? "memory" : "mapped";
  model::SessionOptions so;
  so.ctx = std::max(mf.ctx, depth + n_prompt + n_gen + 1);
  so.kv_types = mf.kv_types;
  so.n_batch = std::max(1, std::min(n_prompt, 64));
  so.sparsity = spf.policy.get();
  m->Configure(&so);
  auto session = model::Session::Create(model, &pool, so);
  if (!session.ok()) return Fail("bench", session.status());
  model::Session& s = **session;
  // A draft's memory (a draft model, its session) is inside the budget.
  auto built = BuildDraft(df, model, so, &pool, spf.calibration.get(), mf);
  if (!built.ok()) return Fail("bench", built.status());
  std::unique_ptr<speculative::Draft> draft = std::move(*built);
  if (Status st = m->Fit(s, draft ? draft->allocated_bytes() : 0); !st.ok()) return Fail("bench", st);
  if (m->streaming) std::fprintf(stderr, "%s | %s\n", MemoryLine(*m).c_str(), KvLine(*m, s).c_str());
  auto trace = StartTrace(tf, s, &*m, spf.policy ? spf.policy->info().spec : "dense");
  if (!trace.ok()) return Fail("bench", trace.status());
  model::StreamingWeights* streamed = m->streaming ? &m->streaming->streamer() : nullptr;
  model::StreamStats stream_before, stream_decode;  // the decode steps of the last repetition
  model::MoeMlp::BiasStats bias_before, bias_decode;  // the same, of the expert bias
  const int vocab = model.config().vocab_size;

  std::vector<int32_t> context(static_cast<size_t>(depth));  // what -d puts in the cache first
  for (int i = 0; i < depth; ++i) context[static_cast<size_t>(i)] = static_cast<int32_t>((int64_t{i} * 104729 + 3) % vocab);
  auto fill_context = [&]() -> Status {
    s.Reset();
    if (depth > 0) WEIR_RETURN_IF_ERROR(s.Prefill(context).status());
    return Status::Ok();
  };
  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  for (int i = 0; i < n_prompt; ++i) prompt[static_cast<size_t>(i)] = (i * 7919 + 1) % vocab;
  if (!prompt_file.empty()) {
    std::string text;
    if (Status st = ReadTextFile(prompt_file, &text); !st.ok()) return Fail("bench", st);
    if (model.tokenizer() == nullptr) {
      return Fail("bench", Status::InvalidArgument(model.file().path + ": no tokenizer to read --prompt-file with"));
    }
    prompt = model.tokenizer()->Encode(text, model.tokenizer()->add_bos(), /*parse_special=*/true);
    if (prompt.size() < static_cast<size_t>(n_prompt)) {
      return Fail("bench", Status::InvalidArgument(StrFormat("%s: %zu tokens, fewer than -p %d", prompt_file.c_str(),
                                                             prompt.size(), n_prompt)));
    }
    prompt.resize(static_cast<size_t>(n_prompt));
  }
  speculative::SpeculativeStats spec;  // of the last repetition
  using Clock = std::chrono::steady_clock;
  std::vector<double> pp, tg;
  for (int r = 0; r < reps; ++r) {
    if (!prompt_file.empty()) {
      // Prompt, then its greedy continuation; the counters start at the first sampled token.
      s.Reset();
      spec = {};
      model::Sampler sampler(vocab, model::SamplerOptions{.temp = 0});
      bool first = true;
      auto on_token = [&](int32_t) {
        if (first) {
          first = false;
          s.ResetTraffic();
          if (streamed) stream_before = streamed->stats();
        }
        return true;
      };
      auto st = draft ? speculative::GenerateSpeculative(s, *draft, sampler, prompt, n_gen, -1, on_token, {},
                                                         df.options, &spec)
                      : model::Generate(s, sampler, prompt, n_gen, -1, on_token);
      if (!st.ok()) return Fail("bench", st.status());
      pp.push_back(st->prompt_tok_s());
      tg.push_back(st->decode_tok_s());
      if (streamed) stream_decode = streamed->stats() - stream_before;
      continue;
    }
    if (Status st = fill_context(); !st.ok()) return Fail("bench", st);
    int32_t tok = 1 % vocab;
    if (n_prompt > 0) {
      auto t0 = Clock::now();
      auto l = s.Prefill(prompt);
      if (!l.ok()) return Fail("bench", l.status());
      pp.push_back(n_prompt / std::chrono::duration<double>(Clock::now() - t0).count());
      tok = model::Sampler::Argmax(*l, vocab);
      // Decode is measured from the -d context alone, like llama-bench's tg.
      if (Status st = fill_context(); !st.ok()) return Fail("bench", st);
    }
    s.ResetTraffic();
    if (streamed) stream_before = streamed->stats();
    if (s.moe()) bias_before = s.moe()->bias_stats();
    auto t0 = Clock::now();
    for (int i = 0; i < n_gen; ++i) {
      auto l = s.Forward(std::span<const int32_t>(&tok, 1), model::LogitsFor::kLast);
      if (!l.ok()) return Fail("bench", l.status());
      tok = model::Sampler::Argmax(*l, vocab);
    }
    tg.push_back(n_gen / std::chrono::duration<double>(Clock::now() - t0).count());
    if (streamed) stream_decode = streamed->stats() - stream_before;
    if (s.moe()) {
      bias_decode.choices = s.moe()->bias_stats().choices - bias_before.choices;
      bias_decode.changed = s.moe()->bias_stats().changed - bias_before.changed;
    }
  }
  if (*trace) {
    if (Status st = (*trace)->Finish(); !st.ok()) return Fail("bench", st);
  }
  const uint64_t peak_rss = PeakRssBytes();  // before STREAM's arrays
  MemoryBandwidth bw;
  // STREAM's arrays (3 x 256 MiB) would break a memory budget (and be OOM-killed in a cgroup of
  // it): a streamed pack under a budget is measured without them.
  const bool budgeted = m->streaming && m->streaming->plan().budget != UINT64_MAX;
  const bool measure_stream = !no_stream && !budgeted;
  if (measure_stream) bw = MeasureMemoryBandwidth(&pool);
  const double pp_tok_s = Median(pp), tg_tok_s = Median(tg);
  // Bytes the decode steps of the last repetition actually read (== dense_bytes_per_token()
  // without sparsity).
  const uint64_t bytes_tok = s.traffic().bytes_per_token();
  const double achieved = tg_tok_s * static_cast<double>(bytes_tok) / 1e9;
  const double frac = bw.read_gbs > 0 ? achieved / bw.read_gbs : 0;

  if (json) {
    PrintJson({{"model", model.file().path}, {"weight_bytes", model.weight_bytes()},
               {"sparsity", spf.policy ? spf.policy->info().spec : "dense"},
               {"mlp_density", s.traffic().mlp_density()}, {"linear_density", s.traffic().linear_density()},
               {"dense_bytes_per_token", model.dense_bytes_per_token()}, {"threads", pool.size()},
               {"n_prompt", n_prompt}, {"n_gen", n_gen}, {"depth", depth}, {"repetitions", reps},
               {"kv_cache", KvJson(*m, s)},
               {"prompt_tok_s", pp_tok_s}, {"decode_tok_s", tg_tok_s}, {"prompt_tok_s_all", pp},
               {"decode_tok_s_all", tg}, {"bytes_per_token", bytes_tok}, {"achieved_gbs", achieved},
               {"stream_read_gbs", bw.read_gbs}, {"stream_copy_gbs", bw.copy_gbs},
               {"stream_triad_gbs", bw.triad_gbs}, {"fraction_of_stream_read", frac},
               {"stream_measured", measure_stream},
               {"prompt_file", prompt_file.empty() ? nlohmann::json() : nlohmann::json(prompt_file)},
               {"speculative", draft ? SpeculativeStatsJson(*draft, spec) : nlohmann::json()},
               {"expert_bias",
                s.moe() ? nlohmann::json{{"gamma", stf.expert_bias},
                                         {"choices", bias_decode.choices},
                                         {"changed", bias_decode.changed}}
                        : nlohmann::json()},
               {"peak_rss", peak_rss}, {"weights", weights}, {"tiled_tensors", model.file().TiledTensorCount()}, {"load_s", load_s},
               {"streaming", streamed ? nlohmann::json{{"memory", MemoryJson(*m)}, {"plan", MemoryPlanJson(m->streaming->plan())},
                                                       {"device", m->streaming->device().name()},
                                                       {"policy", m->streaming->streamer().options().policy},
                                                       {"prefetch_layers", m->streaming->streamer().options().prefetch_layers},
                                                       {"block_bytes", m->streaming->streamer().options().block_bytes},
                                                       {"input_block_bytes", m->streaming->streamer().options().input_block_bytes},
                                                       {"decode", StreamStatsJson(stream_decode, static_cast<uint64_t>(n_gen))}}
                                      : nlohmann::json()}});
  } else {
    const std::string at = depth > 0 ? StrFormat(" @ d%d", depth) : std::string();
    std::printf("| model | weights | sparsity | size | threads | KV cache | pp%d%s tok/s | tg%d%s tok/s | bytes/token | GB/s | STREAM read GB/s | %% of STREAM |\n",
                n_prompt, at.c_str(), n_gen, at.c_str());
    std::printf("|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
    std::printf("| %s | %s | %s | %s | %d | %s | %.2f | %.2f | %s | %.2f | %.2f | %.0f%% |\n", model.file().path.c_str(), weights,
                spf.policy ? spf.policy->info().spec.c_str() : "dense", FormatBytes(model.weight_bytes()).c_str(), pool.size(),
                model::KvTypesName(s.kv_types()).c_str(), pp_tok_s, tg_tok_s,
                FormatBytes(bytes_tok).c_str(), achieved, bw.read_gbs, frac * 100);
    if (draft) std::printf("\n%s\n", FormatSpeculativeStats(*draft, spec).c_str());
    if (streamed) {
      const double n = n_gen;
      std::printf("\n| memory budget | device | policy | storage/token | cache/token | hit rate | stall/token | overlap | peak RSS |\n");
      std::printf("|---:|---|---|---:|---:|---:|---:|---:|---:|\n");
      std::printf("| %s | %s | %s | %s | %s | %.1f%% | %.2f ms | %.0f%% | %s |\n",
                  m->streaming->plan().budget == UINT64_MAX ? "none" : FormatBytes(m->streaming->plan().budget).c_str(),
                  m->streaming->device().name().c_str(), m->streaming->streamer().options().policy.c_str(),
                  FormatBytes(static_cast<uint64_t>(stream_decode.storage_bytes / n)).c_str(),
                  FormatBytes(static_cast<uint64_t>(stream_decode.cache_bytes / n)).c_str(),
                  100 * stream_decode.hit_rate(), 1e3 * stream_decode.stall_seconds / n,
                  100 * stream_decode.overlap(), FormatBytes(peak_rss).c_str());
    }
  }
  return kExitOk;
}

}  // namespace weir::tools
