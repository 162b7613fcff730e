// Fuzz target "serve_request": what `weir serve` does with a client's bytes before a model sees
// them, without sockets (src/serve/api.h). The input is a request body, optionally followed by
// kNextFile and a text standing for generated output. The body is parsed as a chat request, a
// completion request, a /tokenize and a /detokenize body; a request that parses is written back
// as a completion, its streamed chunks and its usage chunk, as the server sends them. Then the
// output text (the one after the separator, or the request's prompt / last message) goes through
// what the server sends of a growing output: StopCut with the request's stop strings and
// CompleteUtf8Prefix. Besides the sanitizers, the target aborts when a parser throws (the server
// would answer 500 for a client's mistake) or when StopCut or CompleteUtf8Prefix break their
// contract (checked against a plain search).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "serve/api.h"

namespace {

using namespace weir::serve;
using nlohmann::json;

volatile size_t g_sink = 0;

[[noreturn]] void Fail(const char* what, size_t a, size_t b) {
  std::fprintf(stderr, "serve_request: %s (%zu, %zu)\n", what, a, b);
  std::abort();
}

size_t Dumped(const json& j) {
  // As the server writes bodies: invalid UTF-8 from a model's pieces is replaced, never thrown.
  return j.dump(-1, ' ', false, json::error_handler_t::replace).size();
}

// StopCut's contract, by brute force: the cut is the first occurrence of any stop string, and
// without one, `held` is the longest tail of the text that is a proper prefix of a stop string.
void CheckStopCut(const std::string& text, const std::vector<std::string>& stop) {
  bool hit = false;
  size_t held = 0;
  const size_t cut = StopCut(text, stop, &hit, &held);
  size_t first = text.size();
  bool any = false;
  for (const std::string& s : stop) {
    size_t at = text.find(s);
    if (at != std::string::npos && at < first) first = at;
    any |= at != std::string::npos;
  }
  if (hit != any) Fail("StopCut: hit differs from a plain search", hit, any);
  if (cut != first) Fail("StopCut: cut is not the first stop string", cut, first);
  size_t want_held = 0;
  if (!any) {
    for (const std::string& s : stop) {
      for (size_t k = 1; k < s.size() && k <= text.size(); ++k) {
        if (text.compare(text.size() - k, k, s, 0, k) == 0 && k > want_held) want_held = k;
      }
    }
  }
  if (held != want_held)
    Fail("StopCut: held differs from the longest stop prefix", held, want_held);
  // What the server may send while the request runs never ends inside a UTF-8 sequence.
  const std::string sendable = text.substr(0, hit ? cut : text.size() - held);
  const size_t n = CompleteUtf8Prefix(sendable);
  if (n > sendable.size() || n + 3 < sendable.size()) {
    Fail("CompleteUtf8Prefix: outside [size - 3, size]", n, sendable.size());
  }
  for (size_t i = n; i < sendable.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(sendable[i]);
    const bool lead = i == n;
    if (lead ? c < 0xC0 : (c & 0xC0) != 0x80)
      Fail("CompleteUtf8Prefix: cut a whole character", i, n);
  }
  g_sink = g_sink + cut + held + n;
}

void OneRequest(const std::string& body, bool chat, const std::string& output) {
  GenerationRequest r;
  std::optional<ApiError> e;
  try {
    e = ParseGenerationRequest(body, chat, &r);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "serve_request: ParseGenerationRequest threw: %s\n", ex.what());
    std::abort();
  }
  if (e) {
    g_sink = g_sink + Dumped(ErrorBody(*e));
    return;
  }
  size_t sink = 0;
  const std::string text = !output.empty() ? output : chat ? r.messages.back().content : r.prompt;
  Usage usage{static_cast<int>(text.size()), 3};
  const std::string stop_reason = "stop";
  sink += Dumped(CompletionBody(r, "cmpl-1", 1700000000, r.model, text, stop_reason, usage));
  sink += Dumped(ChunkBody(r, "cmpl-1", 1700000000, r.model, &text, true, nullptr, nullptr));
  sink +=
      Dumped(ChunkBody(r, "cmpl-1", 1700000000, r.model, nullptr, false, &stop_reason, nullptr));
  sink += Dumped(ChunkBody(r, "cmpl-1", 1700000000, r.model, nullptr, false, nullptr, &usage));
  g_sink = g_sink + sink;
  CheckStopCut(text, r.stop);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto [body_view, output_view] =
      weir::fuzz::SplitOnce(weir::fuzz::AsText(data, size), weir::fuzz::kNextFile);
  const std::string body(body_view), output(output_view);
  OneRequest(body, /*chat=*/true, output);
  OneRequest(body, /*chat=*/false, output);
  try {
    TokenizeRequest t;
    if (!ParseTokenizeRequest(body, &t)) g_sink = g_sink + t.content.size() + t.add_special;
    std::vector<int32_t> ids;
    if (!ParseDetokenizeRequest(body, 49152, &ids)) g_sink = g_sink + ids.size();
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "serve_request: a /tokenize or /detokenize parser threw: %s\n", ex.what());
    std::abort();
  }
  return 0;
}
