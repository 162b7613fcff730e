#include "serve/api.h"

#include <algorithm>
#include <cmath>

namespace weir::serve {
namespace {

using nlohmann::json;

ApiError Bad(const std::string& param, const std::string& message) {
  ApiError e;
  e.param = param;
  e.message = message;
  return e;
}

// Reads an optional number field within [lo, hi].
std::optional<ApiError> Number(const json& j, const char* key, double lo, double hi,
                               std::optional<double>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return Bad(key, std::string("'") + key + "' must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    return Bad(key, std::string("'") + key + "' is " + it->dump() + "; it must be in [" +
                        json(lo).dump() + ", " + json(hi).dump() + "]");
  }
  *out = v;
  return std::nullopt;
}

std::optional<ApiError> Integer(const json& j, const char* key, double lo, double hi,
                                std::optional<int64_t>* out) {
  std::optional<double> v;
  if (auto e = Number(j, key, lo, hi, &v)) return e;
  if (!v) return std::nullopt;
  if (*v != std::floor(*v)) return Bad(key, std::string("'") + key + "' must be an integer");
  *out = static_cast<int64_t>(*v);
  return std::nullopt;
}

std::optional<ApiError> Text(const json& v, const std::string& param, std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return std::nullopt;
  }
  // Content parts: [{"type": "text", "text": "..."}]; other part types are not supported.
  if (v.is_array()) {
    out->clear();
    for (const json& part : v) {
      // find, not value("type", ""): value() throws when "type" is there but not a string.
      auto type = part.is_object() ? part.find("type") : part.end();
      if (!part.is_object() || type == part.end() || *type != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
        return Bad(param, "'" + param + "' parts must be {\"type\": \"text\", \"text\": ...}");
      }
      *out += part["text"].get<std::string>();
    }
    return std::nullopt;
  }
  return Bad(param, "'" + param + "' must be a string");
}

}  // namespace

json ErrorBody(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"code", nullptr}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  return json{{"error", err}};
}

std::optional<ApiError> ParseGenerationRequest(const std::string& body, bool chat,
                                               GenerationRequest* out) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("", "the request body is not valid JSON");
  if (!j.is_object()) return Bad("", "the request body must be a JSON object");
  GenerationRequest r;
  r.chat = chat;
  if (auto it = j.find("model"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return Bad("model", "'model' must be a string");
    r.model = it->get<std::string>();
  }
  if (chat) {
    auto it = j.find("messages");
    if (it == j.end() || !it->is_array() || it->empty()) {
      return Bad("messages", "'messages' must be a non-empty array of {role, content}");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const json& m = (*it)[i];
      const std::string p = "messages[" + std::to_string(i) + "]";
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        return Bad(p, p + " must be an object with a string 'role'");
      }
      chat::ChatMessage msg;
      msg.role = m["role"].get<std::string>();
      if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
          msg.role != "developer") {
        return Bad(p + ".role", "role '" + msg.role +
                                    "' is not one of system, developer, user, assistant");
      }
      if (msg.role == "developer") msg.role = "system";
      if (!m.contains("content") || m["content"].is_null()) {
        return Bad(p + ".content", p + " has no content");
      }
      if (auto e = Text(m["content"], p + ".content", &msg.content)) return e;
      r.messages.push_back(std::move(msg));
    }
  } else {
    auto it = j.find("prompt");
    if (it == j.end()) return Bad("prompt", "'prompt' is required");
    if (it->is_array()) {  // one prompt in an array is accepted; a batch is not
      if (it->size() != 1 || !(*it)[0].is_string()) {
        return Bad("prompt", "'prompt' must be a string (or an array of one string)");
      }
      r.prompt = (*it)[0].get<std::string>();
    } else if (it->is_string()) {
      r.prompt = it->get<std::string>();
    } else {
      return Bad("prompt", "'prompt' must be a string");
    }
  }
  std::optional<int64_t> max_tokens, top_k, n, seed;
  if (auto e = Integer(j, "max_tokens", 1, 1 << 20, &max_tokens)) return e;
  if (!max_tokens) {
    if (auto e = Integer(j, "max_completion_tokens", 1, 1 << 20, &max_tokens)) return e;
  }
  if (max_tokens) r.max_tokens = static_cast<int>(*max_tokens);
  std::optional<double> temperature, top_p;
  if (auto e = Number(j, "temperature", 0, 2, &temperature)) return e;
  if (auto e = Number(j, "top_p", 0, 1, &top_p)) return e;
  if (auto e = Integer(j, "top_k", 0, 1 << 20, &top_k)) return e;
  if (auto e = Integer(j, "seed", -9.2e18, 9.2e18, &seed)) return e;
  if (auto e = Integer(j, "n", 1, 1, &n)) return e;
  std::optional<double> presence, frequency;
  if (auto e = Number(j, "presence_penalty", -2, 2, &presence)) return e;
  if (auto e = Number(j, "frequency_penalty", -2, 2, &frequency)) return e;
  if (presence) r.presence_penalty = static_cast<float>(*presence);
  if (frequency) r.frequency_penalty = static_cast<float>(*frequency);
  if (temperature) r.temperature = static_cast<float>(*temperature);
  if (top_p) r.top_p = static_cast<float>(*top_p);
  if (top_k) r.top_k = static_cast<int>(*top_k);
  if (seed) r.seed = static_cast<uint64_t>(*seed);
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      r.stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= 4) {
      for (const json& s : *it) {
        if (!s.is_string()) return Bad("stop", "'stop' must be a string or up to 4 strings");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      return Bad("stop", "'stop' must be a string or up to 4 strings");
    }
    r.stop.erase(std::remove(r.stop.begin(), r.stop.end(), std::string()), r.stop.end());
  }
  if (auto it = j.find("stream"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return Bad("stream", "'stream' must be true or false");
    r.stream = it->get<bool>();
  }
  if (auto it = j.find("stream_options"); it != j.end() && it->is_object()) {
    if (auto u = it->find("include_usage"); u != it->end() && u->is_boolean()) {
      r.include_usage = u->get<bool>();
    }
  }
  *out = std::move(r);
  return std::nullopt;
}

std::optional<ApiError> ParseTokenizeRequest(const std::string& body, TokenizeRequest* out) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("content") || !j["content"].is_string()) {
    return Bad("content", "the body must be {\"content\": TEXT}");
  }
  TokenizeRequest r;
  r.content = j["content"].get<std::string>();
  for (auto [key, flag] :
       {std::pair{"add_special", &r.add_special}, std::pair{"with_pieces", &r.with_pieces}}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_boolean()) return Bad(key, std::string("'") + key + "' must be true or false");
    *flag = it->get<bool>();
  }
  *out = std::move(r);
  return std::nullopt;
}

std::optional<ApiError> ParseDetokenizeRequest(const std::string& body, int32_t vocab_size,
                                               std::vector<int32_t>* out) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) {
    return Bad("tokens", "the body must be {\"tokens\": [ids]}");
  }
  std::vector<int32_t> ids;
  for (const json& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_size) {
      return Bad("tokens", "tokens must be integers in [0, " + std::to_string(vocab_size) + ")");
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  *out = std::move(ids);
  return std::nullopt;
}

json CompletionBody(const GenerationRequest& r, const std::string& id, int64_t created,
                    const std::string& model, const std::string& text,
                    const std::string& finish_reason, const Usage& usage) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", nullptr}};
  if (r.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  return json{{"id", id},
              {"object", r.chat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", json::array({choice})},
              {"usage",
               {{"prompt_tokens", usage.prompt_tokens},
                {"completion_tokens", usage.completion_tokens},
                {"total_tokens", usage.prompt_tokens + usage.completion_tokens}}}};
}

json ChunkBody(const GenerationRequest& r, const std::string& id, int64_t created,
               const std::string& model, const std::string* text, bool first,
               const std::string* finish_reason, const Usage* usage) {
  json j = {{"id", id},
            {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", model}};
  if (usage != nullptr) {
    j["choices"] = json::array();
    j["usage"] = {{"prompt_tokens", usage->prompt_tokens},
                  {"completion_tokens", usage->completion_tokens},
                  {"total_tokens", usage->prompt_tokens + usage->completion_tokens}};
    return j;
  }
  json choice = {{"index", 0}, {"logprobs", nullptr}};
  choice["finish_reason"] = finish_reason ? json(*finish_reason) : json(nullptr);
  if (r.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (text != nullptr) delta["content"] = *text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text ? *text : std::string();
  }
  j["choices"] = json::array({choice});
  return j;
}

size_t StopCut(const std::string& text, const std::vector<std::string>& stop, bool* hit,
               size_t* held) {
  *hit = false;
  size_t cut = text.size();
  for (const std::string& s : stop) {
    const size_t at = text.find(s);
    if (at != std::string::npos && at < cut) {
      cut = at;
      *hit = true;
    }
  }
  *held = 0;
  if (*hit) return cut;
  // Bytes at the end that are a proper prefix of some stop string may become one.
  for (const std::string& s : stop) {
    for (size_t k = std::min(s.size() - 1, text.size()); k > *held; --k) {
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        *held = k;
        break;
      }
    }
  }
  return cut;
}

size_t CompleteUtf8Prefix(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return want > back ? n - back : n;
  }
  return n;
}

}  // namespace weir::serve
