#include "format/json_util.h"

#include <limits>

#include "base/printable.h"

namespace weir::format {

Result<Json> ParseJsonText(std::string_view text, const std::string& path) {
  // nlohmann reports the error position only through its exception; it is caught here so that
  // no exception leaves the format module.
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return Status::Corrupt(StrFormat("%s: invalid JSON at byte %zu: %s", path.c_str(),
                                     static_cast<size_t>(e.byte), e.what()));
  } catch (const Json::exception& e) {
    return Status::Corrupt(StrFormat("%s: invalid JSON: %s", path.c_str(), e.what()));
  }
}

const Json* FindField(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

const char* JsonTypeName(const Json& v) { return v.type_name(); }

std::string JsonPreview(const Json& v, size_t max_chars) {
  // Cut at a character boundary and with any bidi or C1 control escaped (base/printable.h).
  return Printable(v.dump(-1, ' ', false, Json::error_handler_t::replace), max_chars);
}

bool JsonToInt64(const Json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  return false;
}

Result<std::optional<int64_t>> GetOptionalInt(const Json& obj, const char* key,
                                              const std::string& where) {
  const Json* v = FindField(obj, key);
  if (!v) return std::optional<int64_t>();
  int64_t x;
  if (!JsonToInt64(*v, &x)) {
    return Status::InvalidArgument(StrFormat("%s: field '%s' must be an integer, got %s %s",
                                             where.c_str(), key, JsonTypeName(*v),
                                             JsonPreview(*v).c_str()));
  }
  return std::optional<int64_t>(x);
}

Result<std::optional<double>> GetOptionalNumber(const Json& obj, const char* key,
                                                const std::string& where) {
  const Json* v = FindField(obj, key);
  if (!v) return std::optional<double>();
  if (!v->is_number()) {
    return Status::InvalidArgument(StrFormat("%s: field '%s' must be a number, got %s %s",
                                             where.c_str(), key, JsonTypeName(*v),
                                             JsonPreview(*v).c_str()));
  }
  return std::optional<double>(v->get<double>());
}

Result<std::optional<bool>> GetOptionalBool(const Json& obj, const char* key,
                                            const std::string& where) {
  const Json* v = FindField(obj, key);
  if (!v) return std::optional<bool>();
  if (!v->is_boolean()) {
    return Status::InvalidArgument(StrFormat("%s: field '%s' must be true or false, got %s %s",
                                             where.c_str(), key, JsonTypeName(*v),
                                             JsonPreview(*v).c_str()));
  }
  return std::optional<bool>(v->get<bool>());
}

Result<std::optional<std::string>> GetOptionalString(const Json& obj, const char* key,
                                                     const std::string& where) {
  const Json* v = FindField(obj, key);
  if (!v) return std::optional<std::string>();
  if (!v->is_string()) {
    return Status::InvalidArgument(StrFormat("%s: field '%s' must be a string, got %s %s",
                                             where.c_str(), key, JsonTypeName(*v),
                                             JsonPreview(*v).c_str()));
  }
  return std::optional<std::string>(v->get<std::string>());
}

}  // namespace weir::format
