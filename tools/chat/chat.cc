// weir chat: a conversation with a chat model. Replies stream as they are sampled; the KV cache is
// kept across turns, so each turn prefills only the text the template adds for it (the previous
// reply's end-of-turn marker, the new user message, the assistant header). Details in
// docs/chat.md.
//
// A terminal gets a "> " prompt; /reset starts over (the system message stays), /exit or Ctrl-D
// quits, Ctrl-C stops the reply being written (at the prompt it only reminds how to quit). When
// stdin is not a terminal every line is one user turn and every reply ends with a newline;
// --json prints one JSON object per turn on one line instead of the streamed text.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "common/chat_flags.h"
#include "common/cli.h"
#include "common/commands.h"
#include "common/draft_flags.h"
#include "common/model_flags.h"
#include "common/plan_flags.h"
#include "common/streaming_flags.h"
#include "model/sampler.h"
#include "model/session.h"

namespace weir::tools {
namespace {

// Set by SIGINT. A signal handler can only reach static storage; nothing else in weir is global.
volatile std::sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

void InstallInterruptHandler() {
  struct sigaction sa = {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read at the prompt returns EINTR
  sigaction(SIGINT, &sa, nullptr);
}

// Length of the longest prefix of s that does not end inside a UTF-8 sequence.
size_t CompleteUtf8Prefix(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return want > back ? n - back : n;
  }
  return n;
}

enum class ReadResult { kLine, kEof, kInterrupted };

ReadResult ReadLine(std::string* line) {
  char* buf = nullptr;
  size_t cap = 0;
  errno = 0;
  ssize_t n = ::getline(&buf, &cap, stdin);
  if (n < 0) {
    std::free(buf);
    if (errno == EINTR || g_interrupted) {
      clearerr(stdin);
      return ReadResult::kInterrupted;
    }
    return ReadResult::kEof;
  }
  line->assign(buf, static_cast<size_t>(n));
  std::free(buf);
  while (!line->empty() && (line->back() == '\n' || line->back() == '\r')) line->pop_back();
  return ReadResult::kLine;
}

struct TurnResult {
  std::string reply;
  int prompt_tokens = 0;  // prefilled for this turn
  int reused_tokens = 0;  // already in the KV cache
  int generated_tokens = 0;
  double prompt_seconds = 0, decode_seconds = 0;
  std::string stop;  // end_of_turn, length, interrupted, context
};

class ChatLoop {
 public:
  ChatLoop(const ChatSetup& setup, model::Session* session, model::Sampler* sampler, int n_predict,
           bool stream, bool reuse, const std::string& system,
           speculative::Draft* draft = nullptr, speculative::SpeculativeOptions draft_options = {})
      : draft_(draft),
        draft_options_(draft_options),
        setup_(setup),
        session_(*session),
        sampler_(*sampler),
        n_predict_(n_predict),
        stream_(stream),
        reuse_(reuse) {
    if (!system.empty()) messages_.push_back({"system", system});
  }

  void Reset() {
    messages_.resize(messages_.empty() || messages_[0].role != "system" ? 0 : 1);
    session_.Reset();
    kv_text_.clear();
    kv_ids_.clear();
  }

  Result<TurnResult> Turn(const std::string& user) {
    using Clock = std::chrono::steady_clock;
    messages_.push_back({"user", user});
    auto fail = [&](const Status& st) {
      messages_.pop_back();
      return st;
    };
    // What the KV cache must hold after this turn's prefill.
    auto target = setup_.tmpl.Apply(messages_, true, setup_.bos_piece, setup_.eos_piece);
    if (!target.ok()) return fail(target.status());
    std::vector<int32_t> ids;
    TurnResult r;
    // The cache is kept when the conversation's text extends what it holds (only the new text is
    // encoded); else the whole conversation is encoded and the tokens it shares with the cache
    // are kept (below).
    const bool extend =
        reuse_ && !kv_text_.empty() && target->compare(0, kv_text_.size(), kv_text_) == 0;
    if (extend) {
      ids = setup_.Encode(target->substr(kv_text_.size()), false, {user});
      r.reused_tokens = session_.pos();
    } else {
      ids = setup_.Encode(*target, true, Literals());
    }
    // Room for the prompt and some reply; else the oldest turns go (said once).
    const int reserve = std::min(n_predict_, session_.ctx() / 4);
    if (r.reused_tokens + static_cast<int>(ids.size()) + reserve > session_.ctx()) {
      while (true) {
        size_t first = !messages_.empty() && messages_[0].role == "system" ? 1 : 0;
        if (messages_.size() - first <= 1) {
          return fail(Status::InvalidArgument(StrFormat(
              "this message needs %zu tokens with the template; the context holds %d (-c)",
              ids.size(), session_.ctx())));
        }
        // Drop the oldest user turn and the replies that follow it.
        messages_.erase(messages_.begin() + static_cast<long>(first));
        while (messages_.size() - first > 1 && messages_[first].role != "user") {
          messages_.erase(messages_.begin() + static_cast<long>(first));
        }
        target = setup_.tmpl.Apply(messages_, true, setup_.bos_piece, setup_.eos_piece);
        if (!target.ok()) return fail(target.status());
        ids = setup_.Encode(*target, true, Literals());
        if (static_cast<int>(ids.size()) + reserve <= session_.ctx()) break;
      }
      if (!told_dropping_) {
        std::fprintf(stderr, "[context of %d tokens is full: the oldest turns are dropped]\n",
                     session_.ctx());
        told_dropping_ = true;
      }
      r.reused_tokens = 0;
    }
    if (ids.empty()) return fail(Status::InvalidArgument("the template rendered an empty prompt"));
    if (reuse_ && r.reused_tokens == 0) {
      // A template that rewrites earlier turns (trims, drops reasoning) or dropped turns: keep
      // the tokens the new prompt shares with the cache, at least one token left to prefill.
      size_t shared = 0;
      while (shared + 1 < ids.size() && shared < kv_ids_.size() && ids[shared] == kv_ids_[shared]) {
        ++shared;
      }
      if (shared > 0 && session_.Rewind(static_cast<int>(shared))) {
        r.reused_tokens = static_cast<int>(shared);
        ids.erase(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(shared));
      }
    }
    if (r.reused_tokens == 0) session_.Reset();
    kv_ids_.resize(static_cast<size_t>(r.reused_tokens));

    auto t0 = Clock::now();
    auto logits = session_.Prefill(ids);
    if (!logits.ok()) {
      session_.Reset();
      kv_text_.clear();
      kv_ids_.clear();
      return fail(logits.status());
    }
    kv_ids_.insert(kv_ids_.end(), ids.begin(), ids.end());
    auto t1 = Clock::now();
    r.prompt_tokens = static_cast<int>(ids.size());
    r.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
    kv_text_ = *target;

    const float* l = *logits;
    int32_t prev = ids.back();
    std::string pending;
    g_interrupted = 0;
    r.stop = "length";
    auto show = [&](int32_t tok) {
      std::string piece = setup_.tok->Decode(prev, tok);
      prev = tok;
      r.reply += piece;
      ++r.generated_tokens;
      if (stream_) {
        pending += piece;
        size_t n = CompleteUtf8Prefix(pending);
        std::fwrite(pending.data(), 1, n, stdout);
        std::fflush(stdout);
        pending.erase(0, n);
      }
    };
    if (draft_ != nullptr) {
      // Speculative decoding: the reply is the same; the cache then holds every token but the
      // last sampled one, so the next turn reuses the tokens it shares (not the text).
      std::vector<int32_t> seq = kv_ids_;
      model::GenerateStats gs;
      Status st = speculative::Continue(session_, *draft_, sampler_, &seq, l, n_predict_, -1,
                                        [&](int32_t tok) {
                                          if (g_interrupted) {
                                            r.stop = "interrupted";
                                            return false;
                                          }
                                          if (setup_.IsStop(tok)) {
                                            r.stop = "end_of_turn";
                                            return false;
                                          }
                                          show(tok);
                                          return true;
                                        },
                                        {}, draft_options_, &spec_, &gs);
      if (!st.ok()) {
        session_.Reset();
        kv_text_.clear();
        kv_ids_.clear();
        return st;
      }
      if (gs.stopped_at_full_context) r.stop = "context";
      if (stream_ && !pending.empty()) std::fwrite(pending.data(), 1, pending.size(), stdout);
      r.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
      kv_ids_.assign(seq.begin(), seq.end() - 1);
      kv_text_.clear();
      messages_.push_back({"assistant", r.reply});
      return r;
    }
    for (int i = 0; i < n_predict_; ++i) {
      if (g_interrupted) {
        r.stop = "interrupted";
        break;
      }
      if (session_.pos() >= session_.ctx()) {
        r.stop = "context";
        break;
      }
      int32_t tok = sampler_.Sample(l);
      if (setup_.IsStop(tok)) {
        r.stop = "end_of_turn";
        break;
      }
      show(tok);
      auto next = session_.Forward(std::span<const int32_t>(&tok, 1), model::LogitsFor::kLast);
      if (!next.ok()) {
        session_.Reset();
        kv_text_.clear();
        kv_ids_.clear();
        return next.status();
      }
      kv_ids_.push_back(tok);
      l = *next;
    }
    if (stream_ && !pending.empty()) std::fwrite(pending.data(), 1, pending.size(), stdout);
    r.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
    kv_text_ += r.reply;
    messages_.push_back({"assistant", r.reply});
    return r;
  }

 private:
  std::vector<std::string> Literals() const {
    std::vector<std::string> out;
    for (const chat::ChatMessage& m : messages_) out.push_back(m.content);
    return out;
  }

  speculative::Draft* draft_;
  speculative::SpeculativeOptions draft_options_;
  speculative::SpeculativeStats spec_;  // over every turn

 public:
  const speculative::SpeculativeStats& speculative_stats() const { return spec_; }

 private:
  const ChatSetup& setup_;
  model::Session& session_;
  model::Sampler& sampler_;
  int n_predict_;
  bool stream_;
  bool reuse_;
  std::vector<chat::ChatMessage> messages_;
  std::string kv_text_;          // the text whose tokens the KV cache holds
  std::vector<int32_t> kv_ids_;  // those tokens
  bool told_dropping_ = false;
};

}  // namespace

int ChatMain(int argc, char** argv) {
  CLI::App app("Chat with a model: streaming replies, multi-turn with the KV cache kept.", "chat");
  ModelFlags mf;
  SamplingFlags sf;
  SparsityFlags spf;
  StreamingFlags stf;
  PlanFlags pf;
  ChatFlags cf;
  int n_predict = 512;
  bool json = false, no_reuse = false;
  AddModelFlags(app, &mf);
  AddSamplingFlags(app, &sf);
  AddSparsityFlags(app, &spf);
  AddStreamingFlags(app, &stf);
  AddPlanFlags(app, &pf);
  AddChatFlags(app, &cf);
  DraftFlags df;
  AddDraftFlags(app, &df);
  app.add_option("-n,--n-predict", n_predict, "most tokens per reply (default 512)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_flag("--json", json,
               "print one JSON object per turn (one line each) instead of streaming");
  app.add_flag("--no-cache-reuse", no_reuse,
               "prefill the whole conversation every turn instead of only the new turn (for "
               "comparison; slower)");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  if (Status st =
          ApplyPlan(pf, mf, &spf, &stf, app.count("--prefetch") > 0, app.count("--sparsity") > 0);
      !st.ok()) {
    return Fail("chat", st);
  }
  if (Status st = ParseSparsityFlags(&spf); !st.ok()) return Fail("chat", st);
  if (Status st = ParseDraftFlags(&df); !st.ok()) {
    std::fprintf(stderr, "weir chat: error: %s\n", st.ToString().c_str());
    return kExitUsage;
  }
  mf.tile = spf.policy == nullptr && !HasSelfDraft(df);
  ThreadPool pool(ThreadCount(mf));
  mf.pool = &pool;
  auto m = LoadRunModel(mf, stf);
  if (!m.ok()) return Fail("chat", m.status());
  const model::Model& model = m->model();
  auto setup = SetupChat(cf, model);
  if (!setup.ok()) return Fail("chat", setup.status());
  if (!setup->tmpl.note().empty())
    std::fprintf(stderr, "weir chat: %s\n", setup->tmpl.note().c_str());

  model::SessionOptions so;
  so.ctx = mf.ctx;
  so.kv_types = mf.kv_types;
  so.sparsity = spf.policy.get();
  m->Configure(&so);
  auto session = model::Session::Create(model, &pool, so);
  if (!session.ok()) return Fail("chat", session.status());
  // A draft's memory (a draft model, its session) is inside the budget.
  auto built = BuildDraft(df, model, so, &pool, spf.calibration.get(), mf);
  if (!built.ok()) return Fail("chat", built.status());
  std::unique_ptr<speculative::Draft> draft = std::move(*built);
  if (Status st = m->Fit(**session, draft ? draft->allocated_bytes() : 0); !st.ok()) return Fail("chat", st);
  model::Sampler sampler(model.config().vocab_size, ToSamplerOptions(sf));

  const bool tty = ::isatty(STDIN_FILENO) != 0;
  InstallInterruptHandler();
  ChatLoop loop(*setup, session->get(), &sampler, n_predict, !json, !no_reuse, cf.system, draft.get(),
                df.options);
  if (tty && !json) {
    std::fprintf(
        stderr,
        "weir chat: %s, %s template; /reset starts over, /exit quits, Ctrl-C stops a reply\n",
        model.file().path.c_str(), setup->tmpl.name().c_str());
  }
  int turn = 0;
  while (true) {
    if (tty && !json) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    std::string line;
    ReadResult rr = ReadLine(&line);
    if (rr == ReadResult::kEof) break;
    if (rr == ReadResult::kInterrupted) {
      g_interrupted = 0;
      if (tty) std::fputs("\n(/exit or Ctrl-D quits)\n", stderr);
      continue;
    }
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      loop.Reset();
      std::fputs("[conversation reset]\n", stderr);
      continue;
    }
    auto r = loop.Turn(line);
    if (!r.ok()) {
      // A turn that fails (too long, a template that refuses the conversation) ends the program
      // in a script, and only the turn in a terminal.
      if (!tty) return Fail("chat", r.status());
      std::fprintf(stderr, "weir chat: error: %s\n", r.status().ToString().c_str());
      continue;
    }
    ++turn;
    if (json) {
      nlohmann::json j = {
          {"turn", turn},
          {"user", line},
          {"reply", r->reply},
          {"stop", r->stop},
          {"prompt_tokens", r->prompt_tokens},
          {"reused_tokens", r->reused_tokens},
          {"generated_tokens", r->generated_tokens},
          {"prompt_tok_s", r->prompt_seconds > 0 ? r->prompt_tokens / r->prompt_seconds : 0.0},
          {"decode_tok_s", r->decode_seconds > 0 ? r->generated_tokens / r->decode_seconds : 0.0}};
      if (draft) j["speculative"] = SpeculativeStatsJson(*draft, loop.speculative_stats());
      std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      std::fwrite(s.data(), 1, s.size(), stdout);
    }
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (r->stop == "interrupted" && tty) std::fputs("[stopped]\n", stderr);
  }
  if (tty && !json) std::fputc('\n', stdout);
  if (draft && !json) std::fprintf(stderr, "%s\n", FormatSpeculativeStats(*draft, loop.speculative_stats()).c_str());
  return kExitOk;
}

}  // namespace weir::tools
