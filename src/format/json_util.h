// Small helpers for reading JSON files that come with Hugging Face models (config.json,
// tokenizer.json, tokenizer_config.json, the safetensors header). Every getter checks the JSON
// type before it converts, so a hostile file yields a Status naming the file and the field,
// never an exception or an abort.
//
// Thread safety: free functions over immutable values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace weir::format {

using Json = nlohmann::json;

// Parses `text`; a syntax error becomes Corrupt("<path>: invalid JSON at byte N: ...").
Result<Json> ParseJsonText(std::string_view text, const std::string& path);

// The member `key` of `obj`, or nullptr when `obj` is not an object, the key is absent, or the
// value is JSON null (HF files write null for "not set").
const Json* FindField(const Json& obj, const char* key);

// Typed getters. `where` names the file (and the enclosing object) for messages. A field that is
// present with the wrong type is an error; an absent or null field gives nullopt.
Result<std::optional<int64_t>> GetOptionalInt(const Json& obj, const char* key,
                                              const std::string& where);
Result<std::optional<double>> GetOptionalNumber(const Json& obj, const char* key,
                                                const std::string& where);
Result<std::optional<bool>> GetOptionalBool(const Json& obj, const char* key,
                                            const std::string& where);
Result<std::optional<std::string>> GetOptionalString(const Json& obj, const char* key,
                                                     const std::string& where);

// A JSON integer as int64 (false for floats, strings, or unsigned values above INT64_MAX).
bool JsonToInt64(const Json& v, int64_t* out);

// "string", "number", "object", ... for messages.
const char* JsonTypeName(const Json& v);
// The value as compact JSON, cut to max_chars, for messages.
std::string JsonPreview(const Json& v, size_t max_chars = 40);

}  // namespace weir::format
