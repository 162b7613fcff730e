#include "serve/http_server.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>

#include "serve/api.h"

namespace weir::serve {
namespace {

using nlohmann::json;

constexpr char kChatPage[] =
#include "serve/chat_page.inc"
    ;

const char* ErrorType(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 413:
      return "invalid_request_error";
    case 503:
      return "server_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void Reply(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  ApiError out = e;
  if (out.type.empty()) out.type = ErrorType(e.status);
  res.set_content(Dump(ErrorBody(out)), "application/json");
}

// What a streamed response has sent so far.
struct StreamState {
  std::shared_ptr<Job> job;
  size_t sent = 0;
  bool first = true;
};

// The text of a job that may be sent now: up to the first stop string, and while the job runs,
// not the bytes that could still begin one or that end inside a UTF-8 sequence.
size_t Sendable(const Job& job, bool* stop_hit) {
  size_t held = 0;
  const size_t cut = StopCut(job.text, job.stop, stop_hit, &held);
  if (*stop_hit || job.done) return cut;
  const size_t end = job.text.size() - held;
  return CompleteUtf8Prefix(job.text.substr(0, end));
}

}  // namespace

struct HttpServer::Impl {
  ServerOptions options;
  Metrics* metrics;
  httplib::Server svr;
  std::atomic<Engine*> engine{nullptr};
  std::mutex ready_mu;
  ModelText text;
  std::function<std::string()> extra_metrics;
  std::atomic<uint64_t> next_id{1};

  bool Authorized(const httplib::Request& req) const {
    if (options.api_key.empty()) return true;
    return req.get_header_value("Authorization") == "Bearer " + options.api_key;
  }

  // Common checks of a model route; false when the response is already an error.
  bool Admit(const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req)) {
      Reply(res, {401, "", "a valid API key is required: Authorization: Bearer KEY", ""});
      return false;
    }
    if (engine.load() == nullptr) {
      Reply(res, {503, "", "the model is loading", ""});
      return false;
    }
    return true;
  }

  void Generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    const std::string endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
    auto count = [&] { metrics->CountRequest(endpoint, res.status > 0 ? res.status : 200); };
    if (!Admit(req, res)) return count();
    GenerationRequest r;
    if (auto e = ParseGenerationRequest(req.body, chat, &r)) {
      Reply(res, *e);
      return count();
    }
    if (r.max_tokens > options.max_tokens_limit) {
      Reply(res, {400, "",
                  "max_tokens " + std::to_string(r.max_tokens) + " is above this server's limit " +
                      std::to_string(options.max_tokens_limit),
                  "max_tokens"});
      return count();
    }
    auto job = std::make_shared<Job>();
    if (chat) {
      auto ids = text.render_chat(r.messages);
      if (!ids.ok()) {
        Reply(res, {400, "", "the chat template refused the messages: " + ids.status().message(),
                    "messages"});
        return count();
      }
      job->prompt = std::move(ids).value();
    } else {
      job->prompt = text.tokenize(r.prompt, true);
    }
    if (job->prompt.empty()) {
      Reply(res, {400, "", "the prompt is empty", chat ? "messages" : "prompt"});
      return count();
    }
    job->max_tokens = r.max_tokens > 0 ? r.max_tokens : options.max_tokens_default;
    job->sampling = text.sampling;
    if (r.temperature) job->sampling.temp = *r.temperature;
    if (r.top_p) job->sampling.top_p = *r.top_p;
    if (r.top_k) job->sampling.top_k = *r.top_k;
    if (r.presence_penalty) job->sampling.presence_penalty = *r.presence_penalty;
    if (r.frequency_penalty) job->sampling.frequency_penalty = *r.frequency_penalty;
    if (r.seed) {
      job->sampling.seed = *r.seed;
    } else if (text.sampling.seed == 0) {
      job->sampling.seed = static_cast<uint64_t>(
          std::chrono::steady_clock::now().time_since_epoch().count());
    }
    job->stop = r.stop;
    if (auto e = engine.load()->Submit(job)) {
      Reply(res, *e);
      return count();
    }
    const std::string id = StrFormat("%s-%llx", chat ? "chatcmpl" : "cmpl",
                                     static_cast<unsigned long long>(next_id.fetch_add(1)));
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    const std::string model = text.model_id;
    const int prompt_tokens = static_cast<int>(job->prompt.size());
    if (!r.stream) {
      std::unique_lock<std::mutex> lock(job->mu);
      job->cv.wait(lock, [&] { return job->done; });
      if (job->finish_reason == "error") {
        lock.unlock();
        Reply(res, {500, "", "generation failed: " + job->error.ToString(), ""});
        return count();
      }
      bool hit = false;
      const size_t end = Sendable(*job, &hit);
      const std::string reason = hit ? "stop" : job->finish_reason;
      const Usage usage{prompt_tokens, job->completion_tokens};
      res.set_content(Dump(CompletionBody(r, id, created, model, job->text.substr(0, end),
                                          reason, usage)),
                      "application/json");
      return count();
    }
    auto state = std::make_shared<StreamState>();
    state->job = job;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // proxies pass the events through at once
    res.set_chunked_content_provider(
        "text/event-stream",
        [state, r, id, created, model, prompt_tokens](size_t, httplib::DataSink& sink) {
          Job& j = *state->job;
          std::string piece, reason;
          bool done = false, hit = false;
          int completion = 0;
          Status error;
          {
            std::unique_lock<std::mutex> lock(j.mu);
            j.cv.wait_for(lock, std::chrono::milliseconds(250), [&] {
              bool h = false;
              return j.done || Sendable(j, &h) > state->sent;
            });
            const size_t end = Sendable(j, &hit);
            if (end > state->sent) piece = j.text.substr(state->sent, end - state->sent);
            state->sent = std::max(state->sent, end);
            done = j.done;
            reason = hit ? "stop" : j.finish_reason;
            completion = j.completion_tokens;
            error = j.error;
          }
          auto send = [&](const json& body) {
            const std::string event = "data: " + Dump(body) + "\n\n";
            return sink.write(event.data(), event.size());
          };
          if (!piece.empty() || (state->first && r.chat)) {
            if (!send(ChunkBody(r, id, created, model, &piece, state->first, nullptr, nullptr))) {
              j.cancelled = true;
              return false;
            }
            state->first = false;
          }
          if (!done) {
            // Nothing new yet: a comment line keeps proxies from timing out and finds a client
            // that went away.
            if (piece.empty() && !sink.write(": \n\n", 4)) {
              j.cancelled = true;
              return false;
            }
            return true;
          }
          if (reason == "error") {
            ApiError e{500, "server_error", "generation failed: " + error.ToString(), ""};
            send(ErrorBody(e));
          } else {
            send(ChunkBody(r, id, created, model, nullptr, false, &reason, nullptr));
            if (r.include_usage) {
              const Usage usage{prompt_tokens, completion};
              send(ChunkBody(r, id, created, model, nullptr, false, nullptr, &usage));
            }
          }
          static const char kDone[] = "data: [DONE]\n\n";
          sink.write(kDone, sizeof(kDone) - 1);
          sink.done();
          return true;
        },
        [state](bool success) {
          if (!success) state->job->cancelled = true;  // the client went away mid-stream
        });
    count();
  }

  void Routes() {
    svr.set_payload_max_length(options.max_body_bytes);
    svr.new_task_queue = [n = options.threads] { return new httplib::ThreadPool(n); };
    svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string msg = res.status == 404 ? "no route " + req.method + " " + req.path
                        : res.status == 413
                            ? "the request body is larger than " +
                                  std::to_string(options.max_body_bytes) + " bytes"
                            : "HTTP " + std::to_string(res.status);
      Reply(res, {res.status, "", msg, ""});
      metrics->CountRequest("other", res.status);
    });
    svr.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          Reply(res, {500, "", "internal error", ""});
        });
    svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(kChatPage, "text/html; charset=utf-8");
    });
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (engine.load() == nullptr) {
        res.status = 503;
        res.set_content(R"({"status":"loading"})", "application/json");
      } else {
        res.set_content(R"({"status":"ok"})", "application/json");
      }
    });
    svr.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req)) return Reply(res, {401, "", "a valid API key is required", ""});
      std::string extra;
      {
        std::lock_guard<std::mutex> lock(ready_mu);
        if (extra_metrics) extra = extra_metrics();
      }
      res.set_content(metrics->Render(extra), "text/plain; version=0.0.4");
    });
    svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Admit(req, res)) return;
      json m = {{"id", text.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "weir"}};
      res.set_content(Dump(json{{"object", "list"}, {"data", json::array({m})}}),
                      "application/json");
    });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(req, res, true);
    });
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(req, res, false);
    });
    svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Admit(req, res)) return;
      TokenizeRequest r;
      if (auto e = ParseTokenizeRequest(req.body, &r)) return Reply(res, *e);
      const std::vector<int32_t> ids = text.tokenize(r.content, r.add_special);
      json tokens = json::array();
      for (int32_t id : ids) {
        tokens.push_back(r.with_pieces ? json{{"id", id}, {"piece", text.piece(id)}} : json(id));
      }
      res.set_content(Dump(json{{"tokens", tokens}}), "application/json");
    });
    svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Admit(req, res)) return;
      std::vector<int32_t> ids;
      if (auto e = ParseDetokenizeRequest(req.body, text.vocab_size, &ids)) return Reply(res, *e);
      res.set_content(Dump(json{{"content", text.detokenize(ids)}}), "application/json");
    });
  }
};

HttpServer::HttpServer(ServerOptions options, Metrics* metrics) : impl_(new Impl) {
  impl_->options = std::move(options);
  impl_->metrics = metrics;
  impl_->Routes();
}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Bind() {
  const ServerOptions& o = impl_->options;
  if (o.port == 0) {
    port_ = impl_->svr.bind_to_any_port(o.host);
    if (port_ <= 0) return Status::IoError("cannot listen on " + o.host + " (any port)");
  } else {
    if (!impl_->svr.bind_to_port(o.host, o.port)) {
      return Status::IoError(StrFormat("cannot listen on %s:%d (in use, or not an address of "
                                       "this machine?)",
                                       o.host.c_str(), o.port));
    }
    port_ = o.port;
  }
  return Status::Ok();
}

Status HttpServer::Run() {
  if (!impl_->svr.listen_after_bind()) return Status::IoError("the server stopped listening");
  return Status::Ok();
}

void HttpServer::Stop() {
  if (impl_) impl_->svr.stop();
}

void HttpServer::Ready(Engine* engine, ModelText text, std::function<std::string()> extra) {
  {
    std::lock_guard<std::mutex> lock(impl_->ready_mu);
    impl_->text = std::move(text);
    impl_->extra_metrics = std::move(extra);
  }
  impl_->engine.store(engine);
}

}  // namespace weir::serve
