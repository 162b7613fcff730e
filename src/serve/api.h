// The OpenAI-compatible request and response shapes of `weir serve` (docs/serve.md): parsing and
// checking a request body into a GenerationRequest, and writing the completion objects, the
// streamed chunks and the error bodies. Pure functions over nlohmann::json: no I/O, no model.
//
//   POST /v1/chat/completions  {"messages": [{"role", "content"}...], ...}   -> chat.completion
//   POST /v1/completions       {"prompt": "text", ...}                       -> text_completion
//   POST /tokenize, /detokenize  their bodies (ParseTokenizeRequest, ParseDetokenizeRequest)
// Sampling fields: max_tokens (max_completion_tokens), temperature, top_p, top_k, seed,
// presence_penalty and frequency_penalty (each in [-2, 2]), stop
// (a string or up to 4 strings), stream, n (1 only). Unknown fields are ignored, as OpenAI's
// server does for fields it does not know; a known field of the wrong type or range is a 400.
//
// Thread safety: stateless functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "chat/chat_template.h"

namespace weir::serve {

// An error for the client: HTTP status, OpenAI's error type and a message.
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // the offending field, or empty
};
// {"error": {"message", "type", "param", "code"}}
nlohmann::json ErrorBody(const ApiError& e);

struct GenerationRequest {
  bool chat = false;
  std::vector<chat::ChatMessage> messages;  // chat
  std::string prompt;                       // completions
  int max_tokens = -1;                      // -1: the server's default
  std::optional<float> temperature, top_p;
  std::optional<float> presence_penalty, frequency_penalty;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string model;           // echoed back
};

// Parses a request body; chat selects the /v1/chat/completions shape. The error names the field.
std::optional<ApiError> ParseGenerationRequest(const std::string& body, bool chat,
                                               GenerationRequest* out);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

// The final object of a request that did not stream.
nlohmann::json CompletionBody(const GenerationRequest& r, const std::string& id, int64_t created,
                              const std::string& model, const std::string& text,
                              const std::string& finish_reason, const Usage& usage);
// One streamed chunk: a piece of text (the first chat chunk also carries the role), or the last
// one with finish_reason set; usage chunk when usage != nullptr (then no choices).
nlohmann::json ChunkBody(const GenerationRequest& r, const std::string& id, int64_t created,
                         const std::string& model, const std::string* text, bool first,
                         const std::string* finish_reason, const Usage* usage);

// POST /tokenize {"content": TEXT, "add_special": bool, "with_pieces": bool} (flags optional).
struct TokenizeRequest {
  std::string content;
  bool add_special = false;
  bool with_pieces = false;
};
std::optional<ApiError> ParseTokenizeRequest(const std::string& body, TokenizeRequest* out);
// POST /detokenize {"tokens": [ids]}: every id an integer in [0, vocab_size).
std::optional<ApiError> ParseDetokenizeRequest(const std::string& body, int32_t vocab_size,
                                               std::vector<int32_t>* out);

// Text up to the first occurrence of any stop string; *hit tells whether one occurred. `held`
// is how many trailing bytes of `text` could still begin a stop string (not safe to send yet).
size_t StopCut(const std::string& text, const std::vector<std::string>& stop, bool* hit,
               size_t* held);

// The longest prefix of s that does not end inside a UTF-8 sequence.
size_t CompleteUtf8Prefix(const std::string& s);

}  // namespace weir::serve
