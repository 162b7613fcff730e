// weir ppl: perplexity of a model over a text file (llama.cpp's scheme by default).
#include <chrono>
#include <cstdio>
#include <unistd.h>

#include "common/cli.h"
#include "common/commands.h"
#include "common/m2cache_flags.h"
#include "common/model_flags.h"
#include "common/streaming_flags.h"
#include "common/trace_flags.h"
#include "format/mapped_file.h"
#include "model/perplexity.h"

namespace weir::tools {

int PplMain(int argc, char** argv) {
  CLI::App app("Perplexity over a text file. Default scheme = llama.cpp's perplexity tool: the\n"
               "file is tokenized as one text, cut into non-overlapping chunks of CTX tokens, the\n"
               "first token of each chunk is replaced by BOS, and only the second half of each\n"
               "chunk is scored. --score all scores every position instead.", "ppl");
  ModelFlags mf;
  mf.ctx = 512;
  std::string file, score = "half";
  int chunks = 0, batch = 64;
  std::string argmax_out;
  bool json = false, no_progress = false;
  AddModelFlags(app, &mf);
  SparsityFlags spf;
  AddSparsityFlags(app, &spf);
  StreamingFlags stf;
  AddStreamingFlags(app, &stf);
  TraceFlags tf;
  AddTraceFlags(app, &tf);
  M2CacheFlags m2f;
  AddM2CacheFlags(app, &m2f);
  app.get_option("--ctx-size")->description("tokens per chunk (default 512)");
  app.add_option("-f,--file", file, "text file")->required();
  app.add_option("--score", score, "which predictions to score: half (default) or all")
      ->check(CLI::IsMember({"half", "all"}));
  app.add_option("--chunks", chunks, "score at most this many chunks (default: all)")->check(CLI::NonNegativeNumber);
  app.add_option("-b,--batch-size", batch,
                 "tokens per forward call (default 64, at most the chunk; 1 runs each token as a "
                 "decode step does, e.g. for --expert-bias, which reads the cache once a call)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--argmax-out", argmax_out,
                 "write the argmax token of every scored position, one per line (to compare two "
                 "runs' greedy choices)");
  app.add_flag("--json", json, "print the result as JSON");
  app.add_flag("--no-progress", no_progress, "no progress bar");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;
  if (mf.ctx == 0) mf.ctx = 512;

  if (Status st = ParseSparsityFlags(&spf); !st.ok()) return Fail("ppl", st);
  if (Status st = ParseM2CacheFlags(&m2f); !st.ok()) return Fail("ppl", st);
  ClaimM2CacheMemory(&m2f, &stf.memory, stf.storage);  // --memory bounds a store=FILE
  mf.tile = spf.policy == nullptr && !m2f.enabled();  // a dense run: tiled weights (kernels/tiled.h)
  // A streamed M2Cache store computes the MLP from the store file: the model's own MLP tensors are
  // never read, so they stay in the mapped file instead of being copied into memory.
  if (!m2f.store_path.empty()) mf.mmap = true;
  ThreadPool pool(ThreadCount(mf));
  mf.pool = &pool;  // also copies the weights at load
  auto text = format::ReadSmallFile(file, 1ull << 30);
  if (!text.ok()) return Fail("ppl", text.status());
  ConfigureTrace(tf, &stf);
  auto m = LoadRunModel(mf, stf);  // a weir pack is streamed (--memory), like `weir run`
  if (!m.ok()) return Fail("ppl", m.status());
  const model::Model& model = m->model();
  const tokenizer::Tokenizer* tok = model.tokenizer();
  if (tok == nullptr) return Fail("ppl", Status::InvalidArgument(model.file().path + ": the model has no tokenizer; pass --tokenizer"));
  std::vector<int32_t> ids = tok->Encode(*text, tok->add_bos());

  model::SessionOptions so;
  so.ctx = mf.ctx;
  so.kv_types = mf.kv_types;
  so.n_batch = std::min(mf.ctx, batch);
  so.sparsity = spf.policy.get();
  m->Configure(&so);
  if (Status st = BuildM2Cache(&m2f, model, &pool, !json && !no_progress, &so); !st.ok()) return Fail("ppl", st);
  auto session = model::Session::Create(model, &pool, so);
  if (!session.ok()) return Fail("ppl", session.status());
  if (Status st = m->Fit(**session); !st.ok()) return Fail("ppl", st);
  if (m->streaming) std::fprintf(stderr, "%s\n", MemoryLine(*m).c_str());
  if (!m2f.store_line.empty() && !json) std::fprintf(stderr, "%s\n", m2f.store_line.c_str());
  auto trace = StartTrace(tf, **session, &*m, spf.policy ? spf.policy->info().spec : "dense");
  if (!trace.ok()) return Fail("ppl", trace.status());
  model::PerplexityOptions po;
  po.score = score == "all" ? model::PerplexityOptions::Score::kAll : model::PerplexityOptions::Score::kSecondHalf;
  po.max_chunks = chunks;
  std::vector<int32_t> argmax;
  if (!argmax_out.empty()) po.argmax = &argmax;
  int total = static_cast<int>(ids.size() / static_cast<size_t>(mf.ctx));
  if (chunks > 0) total = std::min(total, chunks);
  ProgressBar bar("ppl", static_cast<uint64_t>(total), !json && !no_progress);
  const auto start = std::chrono::steady_clock::now();
  auto r = model::Perplexity(**session, ids, tok->add_bos() ? tok->bos_id() : -1, po, [&](int done, int) { bar.Update(static_cast<uint64_t>(done)); });
  bar.Finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (*trace) {
    if (Status st = (*trace)->Finish(); !st.ok() && r.ok()) return Fail("ppl", st);
  }
  if (!r.ok()) return Fail("ppl", r.status());
  if (!argmax_out.empty()) {
    FILE* f = std::fopen(argmax_out.c_str(), "w");
    bool ok = f != nullptr;
    for (int32_t t : argmax) ok = ok && std::fprintf(f, "%d\n", t) > 0;
    if (f != nullptr) ok = std::fclose(f) == 0 && ok;
    if (!ok) return Fail("ppl", Status::IoError("cannot write " + argmax_out));
  }
  if (json) {
    PrintJson({{"model", model.file().path}, {"file", file}, {"ctx", mf.ctx}, {"score", score},
               {"text_tokens", ids.size()}, {"chunks", r->chunks}, {"tokens_scored", r->tokens_scored},
               {"ppl", r->ppl}, {"ppl_stderr", r->ppl_stderr}, {"mean_nll", r->mean_nll},
               {"sparsity", spf.policy ? spf.policy->info().spec : "dense"},
               {"mlp_density", (*session)->traffic().mlp_density()},
               {"linear_density", (*session)->traffic().linear_density()},
               {"memory", MemoryJson(*m)}, {"seconds", seconds},
               {"streaming", m->streaming ? StreamStatsJson(m->streaming->streamer().stats(),
                                                            (*session)->traffic().tokens)
                                          : nlohmann::json()},
               {"expert_bias", (*session)->moe() ? nlohmann::json{{"gamma", stf.expert_bias},
                                                                  {"choices", (*session)->moe()->bias_stats().choices},
                                                                  {"changed", (*session)->moe()->bias_stats().changed}}
                                                 : nlohmann::json()},
               {"m2cache", (*session)->m2cache() ? M2StatsJson(*(*session)->m2cache(), (*session)->traffic().tokens) : nlohmann::json()}});
  } else {
    std::printf("perplexity: %.4f +/- %.4f  (%lld tokens scored, %d chunks of %d, score=%s)\n", r->ppl,
                r->ppl_stderr, static_cast<long long>(r->tokens_scored), r->chunks, mf.ctx, score.c_str());
    if ((*session)->m2cache()) {
      std::printf("%s\n", FormatM2Stats(*(*session)->m2cache(), (*session)->traffic().tokens).c_str());
    }
    if (spf.policy) {
      std::printf("sparsity %s: achieved mlp density %.3f, linear density %.3f\n", spf.policy->info().spec.c_str(),
                  (*session)->traffic().mlp_density(), (*session)->traffic().linear_density());
    }
  }
  return kExitOk;
}

}  // namespace weir::tools
