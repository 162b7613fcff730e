// HttpServer: the HTTP side of `weir serve` (cpp-httplib): the OpenAI-compatible routes over an
// Engine, llama-server's /tokenize and /detokenize, /v1/models, /health, /metrics and the chat
// page at /. Errors are OpenAI's error JSON with the right status: 400 bad JSON or parameters,
// 401 a wrong or missing key (--api-key), 404 an unknown route, 413 a body over the limit, 503
// with Retry-After when the queue is full or while the model loads. docs/serve.md has the API.
//
// The server can listen before the model is loaded (Bind, then Run on a thread): until Ready,
// /health answers 503 {"status": "loading"} and the model routes 503.
//
// Thread safety: Ready, Stop and port from any thread; handlers run on the server's pool.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "chat/chat_template.h"
#include "model/sampler.h"
#include "serve/engine.h"
#include "serve/metrics.h"

namespace weir::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (port() says which)
  std::string api_key;              // empty: no key needed
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int max_tokens_default = 512;     // when a request gives none
  int max_tokens_limit = 4096;      // a request asking for more gets 400
  // HTTP worker threads, started at once. Each connection holds one while it is read or
  // streamed, so this many slow clients starve the rest (/health included): 128 keeps /health
  // answering under 100 of them (tests/serve/hostile_client_test.py); in front of the open
  // internet, a proxy that buffers requests (docs/deploy.md).
  int threads = 128;
};

// The model's text side, provided by the tool (chat template, tokenizer).
struct ModelText {
  std::string model_id;
  // The chat template applied to the messages, with the assistant's turn opened, as token ids.
  std::function<Result<std::vector<int32_t>>(const std::vector<chat::ChatMessage>&)> render_chat;
  std::function<std::vector<int32_t>(const std::string& text, bool add_special)> tokenize;
  std::function<std::string(const std::vector<int32_t>&)> detokenize;
  std::function<std::string(int32_t)> piece;
  int vocab_size = 0;
  model::SamplerOptions sampling;  // the defaults (--temp, --top-k, --top-p, --seed)
};

class HttpServer {
 public:
  HttpServer(ServerOptions options, Metrics* metrics);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the address (IoError naming it when it cannot).
  Status Bind();
  int port() const { return port_; }
  // Serves until Stop (call Bind first).
  Status Run();
  void Stop();
  // The model is loaded: requests go to `engine`. `extra_metrics` adds text to /metrics.
  void Ready(Engine* engine, ModelText text, std::function<std::string()> extra_metrics);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace weir::serve
