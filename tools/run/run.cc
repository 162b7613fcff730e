// weir run: generate text from a prompt, streaming it to stdout; speeds on stderr / in --json.
#include <cstdio>
#include <optional>

#include "base/units.h"

#include "common/chat_flags.h"
#include "common/m2cache_flags.h"
#include "common/cli.h"
#include "common/draft_flags.h"
#include "common/commands.h"
#include "common/model_flags.h"
#include "common/plan_flags.h"
#include "common/streaming_flags.h"
#include "common/trace_flags.h"
#include "model/generate.h"
#include "model/session.h"

namespace weir::tools {

int RunMain(int argc, char** argv) {
  CLI::App app("Generate text from a prompt.", "run");
  ModelFlags mf;
  SamplingFlags sf;
  std::string prompt;
  int n_predict = 128;
  bool json = false, no_bos = false, chat_mode = false, ignore_eos = false;
  model::ContextShift shift;
  ChatFlags cf;
  AddModelFlags(app, &mf);
  AddSamplingFlags(app, &sf);
  SparsityFlags spf;
  AddSparsityFlags(app, &spf);
  StreamingFlags stf;
  AddStreamingFlags(app, &stf);
  TraceFlags tf;
  AddTraceFlags(app, &tf);
  PlanFlags pf;
  AddPlanFlags(app, &pf);
  M2CacheFlags m2f;
  AddM2CacheFlags(app, &m2f);
  DraftFlags df;
  AddDraftFlags(app, &df);
  bool stats_flag = false;
  app.add_flag("--stats", stats_flag,
               "print weight traffic per token (bytes, densities) on stderr; for a streamed pack also "
               "per token: bytes from storage and from the cache, hit rate, I/O stall, overlap");
  app.add_option("-p,--prompt", prompt, "prompt text (default: empty, generation starts from BOS)");
  app.add_option("-n,--n-predict", n_predict, "tokens to generate (default 128)")->check(CLI::Range(0, 1 << 20));
  app.add_flag("--no-bos", no_bos, "do not add the BOS token before the prompt (by default it is added when the model asks for it: tokenizer.ggml.add_bos_token)");
  app.add_flag("--ignore-eos", ignore_eos,
               "do not stop at the end-of-sequence token: generate exactly -n tokens unless the "
               "context fills (soak and benchmark runs; scripts/soak)");
  app.add_flag("--context-shift", shift.enabled,
               "when the context fills before -n tokens: keep the first --keep tokens and the most "
               "recent half of the rest, prefill them anew and go on (default: stop there)");
  app.add_option("--keep", shift.keep,
                 "tokens of the prompt a context shift keeps (default 0; -1: the whole prompt; at "
                 "most half the context)")
      ->check(CLI::Range(-1, 1 << 20));
  app.add_flag("--json", json, "print the result and speeds as JSON instead of streaming text");
  app.add_flag("--chat", chat_mode,
               "one chat turn: the prompt is the user's message, wrapped in the model's chat template "
               "(see weir chat); only the reply is printed and it ends at the end-of-turn token");
  AddChatFlags(app, &cf);
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  if (Status st = ApplyPlan(pf, mf, &spf, &stf, app.count("--prefetch") > 0,
                            app.count("--sparsity") > 0);
      !st.ok()) {
    return Fail("run", st);
  }
  if (Status st = ParseSparsityFlags(&spf); !st.ok()) return Fail("run", st);
  if (Status st = ParseDraftFlags(&df); !st.ok()) {
    std::fprintf(stderr, "weir run: error: %s\n", st.ToString().c_str());
    return kExitUsage;
  }
  if (Status st = ParseM2CacheFlags(&m2f); !st.ok()) return Fail("run", st);
  ClaimM2CacheMemory(&m2f, &stf.memory, stf.storage);  // --memory bounds a store=FILE
  // A dense run: tiled weights (kernels/tiled.h); a self draft computes sparse products, which
  // need the rows as stored.
  mf.tile = spf.policy == nullptr && !m2f.enabled() && !HasSelfDraft(df);
  // A streamed M2Cache store computes the MLP from the store file: the model's own MLP tensors are
  // never read, so they stay in the mapped file instead of being copied into memory.
  if (!m2f.store_path.empty()) mf.mmap = true;
  ThreadPool pool(ThreadCount(mf));
  mf.pool = &pool;  // also copies the weights at load
  ConfigureTrace(tf, &stf);
  auto m = LoadRunModel(mf, stf);
  if (!m.ok()) return Fail("run", m.status());
  const model::Model& model = m->model();
  const tokenizer::Tokenizer* tok = model.tokenizer();
  if (tok == nullptr) return Fail("run", Status::InvalidArgument(model.file().path + ": the model has no tokenizer; pass --tokenizer"));

  std::optional<ChatSetup> chat;
  std::vector<int32_t> ids;
  if (chat_mode) {
    auto setup = SetupChat(cf, model);
    if (!setup.ok()) return Fail("run", setup.status());
    if (!setup->tmpl.note().empty() && !json) std::fprintf(stderr, "weir run: %s\n", setup->tmpl.note().c_str());
    std::vector<chat::ChatMessage> messages;
    if (!cf.system.empty()) messages.push_back({"system", cf.system});
    messages.push_back({"user", prompt});
    auto text = setup->tmpl.Apply(messages, true, setup->bos_piece, setup->eos_piece);
    if (!text.ok()) return Fail("run", text.status());
    ids = setup->Encode(*text, !no_bos, {cf.system, prompt});
    chat = std::move(*setup);
  } else {
    ids = tok->Encode(prompt, !no_bos && tok->add_bos(), /*parse_special=*/!cf.no_special);
  }
  if (ids.empty()) ids.push_back(tok->bos_id() >= 0 ? tok->bos_id() : 0);
  model::SessionOptions so;
  so.ctx = mf.ctx;
  so.kv_types = mf.kv_types;
  so.sparsity = spf.policy.get();
  m->Configure(&so);
  if (Status st = BuildM2Cache(&m2f, model, &pool, !json, &so); !st.ok()) return Fail("run", st);
  auto session = model::Session::Create(model, &pool, so);
  if (!session.ok()) return Fail("run", session.status());
  // A draft's memory (a draft model, its session) is inside the budget.
  auto built = BuildDraft(df, model, so, &pool, spf.calibration.get(), mf);
  if (!built.ok()) return Fail("run", built.status());
  std::unique_ptr<speculative::Draft> draft = std::move(*built);
  if (Status st = m->Fit(**session, draft ? draft->allocated_bytes() : 0); !st.ok()) return Fail("run", st);
  if (m->streaming) std::fprintf(stderr, "%s | %s\n", MemoryLine(*m).c_str(), KvLine(*m, **session).c_str());
  if (!m2f.store_line.empty() && !json) std::fprintf(stderr, "%s\n", m2f.store_line.c_str());
  auto trace = StartTrace(tf, **session, &*m, spf.policy ? spf.policy->info().spec : "dense");
  if (!trace.ok()) return Fail("run", trace.status());
  model::StreamingWeights* streamed = m->streaming ? &m->streaming->streamer() : nullptr;
  if (streamed && stats_flag && !json) {
    std::fprintf(stderr, "memory plan: %s\n", m->streaming->plan().ToString().c_str());
  }
  // Per-token streaming statistics: differences of the streamer's counters between tokens.
  model::StreamStats last_stream = streamed ? streamed->stats() : model::StreamStats{};
  nlohmann::json stream_tokens = nlohmann::json::array();
  auto stream_step = [&](const char* what, int index) {
    if (!streamed || !stats_flag) return;
    const model::StreamStats now = streamed->stats(), d = now - last_stream;
    last_stream = now;
    if (json) {
      stream_tokens.push_back(StreamStatsJson(d, 1));
    } else {
      std::fprintf(stderr, "[%s %d] %s\n", what, index, FormatStreamStats(d).c_str());
    }
  };
  if (static_cast<int>(ids.size()) >= (*session)->ctx()) {
    return Fail("run", Status::InvalidArgument(StrFormat("prompt of %zu tokens does not fit the context size %d",
                                                         ids.size(), (*session)->ctx())));
  }
  model::Sampler sampler(model.config().vocab_size, ToSamplerOptions(sf));
  if (shift.keep < 0) shift.keep = static_cast<int>(ids.size());

  std::string text;
  int32_t prev = ids.back();
  if (!json && !chat) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  int sampled = 0;
  const int32_t stop_id = ignore_eos ? -1 : tok->eos_id();
  speculative::SpeculativeStats spec;
  auto on_token = [&](int32_t id) {
    // The logits of this token came from the prompt (first call) or the previous token's step.
    stream_step(sampled == 0 ? "prompt" : "token", sampled);
    ++sampled;
    if (id == stop_id) return true;
    if (chat && !ignore_eos && chat->IsStop(id)) return false;  // end of the assistant's turn
    std::string piece = tok->Decode(prev, id);
    prev = id;
    text += piece;
    if (!json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  auto stats = draft ? speculative::GenerateSpeculative(**session, *draft, sampler, ids, n_predict, stop_id,
                                                        on_token, shift, df.options, &spec)
                     : model::Generate(**session, sampler, ids, n_predict, stop_id, on_token, shift);
  if (*trace) {
    if (Status st = (*trace)->Finish(); !st.ok() && stats.ok()) return Fail("run", st);
  }
  if (!stats.ok()) {
    if (!json) std::fputc('\n', stdout);
    return Fail("run", stats.status());
  }
  const model::WeightTraffic& tr = (*session)->traffic();
  nlohmann::json traffic = {{"weight_bytes_per_token", tr.bytes_per_token()},
                            {"mlp_density", tr.mlp_density()},
                            {"attn_density", tr.attn_density()},
                            {"linear_density", tr.linear_density()}};
  if (json) {
    PrintJson({{"model", model.file().path},
               {"sparsity", spf.policy ? spf.policy->info().spec : "dense"},
               {"stats", traffic},
               {"prompt", prompt},
               {"text", text},
               {"prompt_tokens", stats->prompt_tokens},
               {"generated_tokens", stats->generated_tokens},
               {"stopped_at_eos", stats->stopped_at_eos},
               {"stopped_at_full_context", stats->stopped_at_full_context},
               {"context_shifts", stats->context_shifts},
               {"prompt_seconds", stats->prompt_seconds},
               {"decode_seconds", stats->decode_seconds},
               {"prompt_tok_s", stats->prompt_tok_s()},
               {"decode_tok_s", stats->decode_tok_s()},
               {"threads", pool.size()},
               {"kv_cache", KvJson(*m, **session)},
               {"speculative", draft ? SpeculativeStatsJson(*draft, spec) : nlohmann::json()},
               {"streaming", streamed ? nlohmann::json{{"memory", MemoryJson(*m)}, {"plan", MemoryPlanJson(m->streaming->plan())},
                                                       {"per_token", stream_tokens},
                                                       {"total", StreamTotalsJson(streamed->stats())},
                                                       {"peak_rss", PeakRssBytes()}}
                                      : nlohmann::json()},
               {"m2cache", (*session)->m2cache() ? M2StatsJson(*(*session)->m2cache(), tr.tokens) : nlohmann::json()}});
  } else {
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (stats->stopped_at_full_context) {
      std::fprintf(stderr, "weir run: the context (%d tokens) is full after %d generated tokens; "
                   "-c for a larger one, or --context-shift to go on\n",
                   (*session)->ctx(), stats->generated_tokens);
    }
    if (stats->context_shifts > 0) {
      std::fprintf(stderr, "weir run: the context was shifted %d times\n", stats->context_shifts);
    }
    std::fprintf(stderr, "prompt: %d tokens, %.2f tok/s | generation: %d tokens, %.2f tok/s | %d threads\n",
                 stats->prompt_tokens, stats->prompt_tok_s(), stats->generated_tokens, stats->decode_tok_s(),
                 pool.size());
    if (draft) std::fprintf(stderr, "%s\n", FormatSpeculativeStats(*draft, spec).c_str());
    if (stats_flag) {
      std::fprintf(stderr, "weights: %.0f bytes/token | achieved density: mlp %.3f, attention %.3f, linear %.3f\n",
                   static_cast<double>(tr.bytes_per_token()), tr.mlp_density(), tr.attn_density(),
                   tr.linear_density());
      if ((*session)->m2cache()) {
        std::fprintf(stderr, "%s\n", FormatM2Stats(*(*session)->m2cache(), tr.tokens).c_str());
      }
      if (streamed) {
        std::fprintf(stderr, "streaming: %s, %s | peak RSS %s\n", streamed->options().policy.c_str(),
                     m->streaming->device().name().c_str(), FormatBytes(PeakRssBytes()).c_str());
      }
    }
  }
  return kExitOk;
}

}  // namespace weir::tools
