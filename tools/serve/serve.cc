// weir serve: an OpenAI-compatible HTTP server over any model weir runs (a GGUF resident, a pack
// streamed under --memory, any --sparsity): /v1/chat/completions and /v1/completions with
// server-sent events, /tokenize, /detokenize, /v1/models, /health, /metrics and a chat page at /.
// --parallel N slots share one copy of the weights, each with its own KV cache; requests beyond
// them wait in a bounded queue. docs/serve.md.
#include <csignal>
#include <cstdio>
#include <thread>

#include "common/chat_flags.h"
#include "common/cli.h"
#include "common/commands.h"
#include "common/model_flags.h"
#include "common/plan_flags.h"
#include "common/streaming_flags.h"
#include "base/memory_info.h"
#include "base/units.h"
#include "serve/engine.h"
#include "serve/http_server.h"

namespace weir::tools {
namespace {

// The server to stop on SIGINT / SIGTERM; a handler reaches only static storage.
serve::HttpServer* volatile g_server = nullptr;
volatile std::sig_atomic_t g_stopping = 0;
void OnSignal(int) {
  g_stopping = 1;
  // httplib's stop() only sets a flag and shuts the listening socket: safe enough here, and the
  // only way to end listen_after_bind from outside.
  if (g_server != nullptr) g_server->Stop();
}

}  // namespace

int ServeMain(int argc, char** argv) {
  CLI::App app("Serve a model over an OpenAI-compatible HTTP API (docs/serve.md).", "serve");
  ModelFlags mf;
  SamplingFlags sf;
  SparsityFlags spf;
  StreamingFlags stf;
  PlanFlags pf;
  ChatFlags cf;
  serve::ServerOptions so;
  int parallel = 1, queue = 16;
  bool no_batch = false;
  AddModelFlags(app, &mf);
  AddSamplingFlags(app, &sf);
  AddSparsityFlags(app, &spf);
  AddStreamingFlags(app, &stf);
  AddPlanFlags(app, &pf);
  AddChatFlags(app, &cf);
  app.add_option("--host", so.host, "address to listen on (default 127.0.0.1: this machine only)");
  app.add_option("--port", so.port, "port (default 8080; 0 picks a free one and prints it)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--parallel", parallel,
                 "slots: requests generated at once, each with its own KV cache (default 1)")
      ->check(CLI::Range(1, 64));
  app.add_flag("--no-batch", no_batch,
               "run the busy slots' decode steps one after the other instead of as one batch "
               "(continuous batching is on by default; this is for comparison)");
  app.add_option("--queue", queue, "requests that may wait for a slot before 503 (default 16)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--api-key", so.api_key, "require 'Authorization: Bearer KEY' on the API");
  app.add_option("-n,--n-predict", so.max_tokens_default,
                 "tokens generated when a request gives no max_tokens (default 512)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-tokens-limit", so.max_tokens_limit,
                 "largest max_tokens a request may ask for (default 4096)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--http-threads", so.threads,
                 "HTTP worker threads; each open connection holds one while it is read or streamed "
                 "(default 128)")
      ->check(CLI::Range(2, 4096));
  app.add_option("--max-body", so.max_body_bytes, "largest request body in bytes (default 1 MiB)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;
  if (cf.system.size() > 0) {
    return Fail("serve", Status::InvalidArgument(
                             "--system: a server takes the system message from each request"));
  }

  // Listen first: /health says "loading" until the model is ready.
  serve::Metrics metrics;
  serve::HttpServer server(so, &metrics);
  if (Status st = server.Bind(); !st.ok()) return Fail("serve", st);
  g_server = &server;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::fprintf(stderr, "weir serve: listening on http://%s:%d (loading %s)\n", so.host.c_str(),
               server.port(), mf.model.c_str());
  Status served = Status::Ok();
  std::thread http([&] { served = server.Run(); });
  auto fail = [&](const Status& st) {
    server.Stop();
    http.join();
    return Fail("serve", st);
  };

  if (Status st =
          ApplyPlan(pf, mf, &spf, &stf, app.count("--prefetch") > 0, app.count("--sparsity") > 0);
      !st.ok()) {
    return fail(st);
  }
  if (Status st = ParseSparsityFlags(&spf); !st.ok()) return fail(st);
  mf.tile = spf.policy == nullptr;
  ThreadPool pool(ThreadCount(mf));
  mf.pool = &pool;
  auto m = LoadRunModel(mf, stf);
  if (!m.ok()) return fail(m.status());
  const model::Model& model = m->model();
  auto setup = SetupChat(cf, model);
  if (!setup.ok()) return fail(setup.status());
  if (m->streaming) std::fprintf(stderr, "weir serve: %s\n", MemoryLine(*m).c_str());

  std::vector<std::unique_ptr<model::Session>> sessions;
  uint64_t session_bytes = 0;  // every slot's KV cache and activations
  for (int i = 0; i < parallel; ++i) {
    model::SessionOptions o;
    o.ctx = mf.ctx;
    o.kv_types = mf.kv_types;
    o.sparsity = spf.policy.get();
    m->Configure(&o);
    auto session = model::Session::Create(model, &pool, o);
    if (!session.ok()) return fail(session.status());
    session_bytes += (*session)->allocated_bytes();
    sessions.push_back(std::move(session).value());
  }
  if (m->streaming) {
    // The slots share the one budget: their KV caches come out of it before the weight cache.
    if (Status st = m->streaming->Fit(session_bytes); !st.ok()) {
      if (st.code() != Status::Code::kOutOfMemory) return fail(st);
      const uint64_t each = session_bytes / static_cast<uint64_t>(parallel);
      int most = 0;
      for (int k = parallel - 1; k >= 1 && most == 0; --k) {
        if (m->streaming->Fit(each * static_cast<uint64_t>(k)).ok()) most = k;
      }
      const std::string holds =
          most == 0 ? std::string("holds no slot beside the model's minimum; use a smaller -c or a larger --memory")
                    : StrFormat("holds at most %d slot%s beside the model's minimum; use --parallel %d, a smaller "
                                "-c, or a larger --memory",
                                most, most == 1 ? "" : "s", most);
      return fail(Status::OutOfMemory(StrFormat("--parallel %d: each slot's KV cache and activations take %s (-c %d), "
                                                "and the memory budget %s (%s)",
                                                parallel, FormatBytes(each).c_str(), sessions[0]->ctx(),
                                                holds.c_str(), st.message().c_str())));
    }
  }
  const tokenizer::Tokenizer* tok = setup->tok;
  serve::TextCodec codec;
  codec.decode = [tok](int32_t prev, int32_t id) { return tok->Decode(prev, id); };
  const ChatSetup* chat = &*setup;
  codec.is_stop = [chat](int32_t id) { return chat->IsStop(id); };
  codec.vocab_size = model.config().vocab_size;
  serve::Engine engine(codec, std::move(sessions), queue, &metrics, !no_batch);

  serve::ModelText text;
  text.model_id = BaseName(mf.model);
  text.render_chat = [chat](const std::vector<chat::ChatMessage>& messages)
      -> Result<std::vector<int32_t>> {
    WEIR_ASSIGN_OR_RETURN(std::string rendered,
                          chat->tmpl.Apply(messages, true, chat->bos_piece, chat->eos_piece));
    std::vector<std::string> literals;
    for (const chat::ChatMessage& msg : messages) literals.push_back(msg.content);
    return chat->Encode(rendered, true, literals);
  };
  text.tokenize = [tok](const std::string& s, bool add_special) {
    return tok->Encode(s, add_special && tok->add_bos(), true);
  };
  text.detokenize = [tok](const std::vector<int32_t>& ids) { return tok->DecodeAll(ids); };
  text.piece = [tok](int32_t id) { return std::string(tok->piece(id)); };
  text.vocab_size = model.config().vocab_size;
  text.sampling = ToSamplerOptions(sf);
  if (sf.seed < 0) text.sampling.seed = 0;  // 0: each request draws its own unless it sets one
  model::StreamingModel* streaming = m->streaming.get();
  auto extra = [streaming]() -> std::string {
    std::string s;
    if (std::optional<uint64_t> rss = ResidentBytes()) {
      s += "# HELP weir_resident_bytes resident set of the process\n"
           "# TYPE weir_resident_bytes gauge\n";
      s += StrFormat("weir_resident_bytes %llu\n", static_cast<unsigned long long>(*rss));
    }
    if (streaming == nullptr) return s;
    const model::StreamStats st = streaming->streamer().stats();
    s += StrFormat(
        "# HELP weir_memory_budget_bytes the --memory budget in force\n"
        "# TYPE weir_memory_budget_bytes gauge\nweir_memory_budget_bytes %llu\n"
        "# HELP weir_storage_read_bytes_total weight bytes read from storage\n"
        "# TYPE weir_storage_read_bytes_total counter\nweir_storage_read_bytes_total %llu\n"
        "# HELP weir_storage_reads_total device reads\n"
        "# TYPE weir_storage_reads_total counter\nweir_storage_reads_total %llu\n"
        "# HELP weir_cache_hit_ratio needed weight blocks found in the cache\n"
        "# TYPE weir_cache_hit_ratio gauge\nweir_cache_hit_ratio %.4f\n",
        static_cast<unsigned long long>(streaming->plan().budget),
        static_cast<unsigned long long>(st.storage_bytes),
        static_cast<unsigned long long>(st.storage_reads), st.hit_rate());
    return s;
  };
  server.Ready(&engine, std::move(text), extra);
  std::fprintf(stderr, "weir serve: ready, %d slot%s of %d tokens, model %s\n", parallel,
               parallel == 1 ? "" : "s", engine.context(), mf.model.c_str());
  http.join();
  engine.Stop();
  g_server = nullptr;
  if (!served.ok() && !g_stopping) return Fail("serve", served);
  std::fprintf(stderr, "weir serve: stopped\n");
  return kExitOk;
}

}  // namespace weir::tools
