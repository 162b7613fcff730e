#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace weir::chat {

Value Value::List(ValueList items) {
  Value v(Kind::kList);
  v.list_ = std::make_shared<ValueList>(std::move(items));
  for (const Value& item : *v.list_) v.Adopt(item);
  if (v.depth_ == 0) v.depth_ = 1;
  return v;
}

Value Value::Dict(ValueDict items) {
  Value v(Kind::kDict);
  v.dict_ = std::make_shared<ValueDict>(std::move(items));
  for (const auto& [k, item] : *v.dict_) v.Adopt(item);
  if (v.depth_ == 0) v.depth_ = 1;
  return v;
}

void Value::Adopt(const Value& child) const {
  depth_ = std::max(depth_, child.depth_ + 1);
  holds_namespace_ = holds_namespace_ || child.holds_namespace_;
}

int64_t Value::FloatToInt(double d) {
  if (std::isnan(d)) return 0;
  // 2^63 is the first double above the int64 range; -2^63 is in it.
  if (d >= 9223372036854775808.0) return std::numeric_limits<int64_t>::max();
  if (d <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(d);
}

const Value* Value::Find(std::string_view key) const {
  if (kind_ != Kind::kDict) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::Set(const std::string& key, Value v) const {
  Adopt(v);
  for (auto& [k, old] : *dict_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  dict_->emplace_back(key, std::move(v));
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !str_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string FormatPythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d);
  std::string s(buf, end);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  // Python writes exponents with a sign and at least two digits: 1e+16, 1e-05.
  size_t e = s.find('e');
  if (e != std::string::npos) {
    std::string mant = s.substr(0, e), exp = s.substr(e + 1);
    char sign = '+';
    if (exp[0] == '-' || exp[0] == '+') {
      sign = exp[0] == '-' ? '-' : '+';
      exp = exp.substr(1);
    }
    if (exp.size() < 2) exp = "0" + exp;
    s = mant + "e" + sign + exp;
  }
  return s;
}

namespace {

void AppendRepr(const Value& v, std::string* out) {
  if (v.is_string()) {
    const std::string& s = v.str();
    // Python prefers single quotes unless the string holds one and no double quote.
    const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
    const char q = dq ? '"' : '\'';
    out->push_back(q);
    for (char c : s) {
      if (c == q || c == '\\') {
        out->push_back('\\');
        out->push_back(c);
      } else if (c == '\n') {
        out->append("\\n");
      } else if (c == '\r') {
        out->append("\\r");
      } else if (c == '\t') {
        out->append("\\t");
      } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
        out->append(buf);
      } else {
        out->push_back(c);
      }
    }
    out->push_back(q);
    return;
  }
  out->append(v.ToString());
}

void AppendJsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out->append(buf);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

Status AppendJson(const Value& v, int indent, int depth, std::string* out) {
  if (out->size() > kMaxStringBytes) {
    return Status::InvalidArgument("tojson: the JSON text is longer than 64 MiB");
  }
  auto newline = [&](int d) {
    if (indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      out->append("null");
      return Status::Ok();
    case Value::Kind::kBool:
      out->append(v.as_bool() ? "true" : "false");
      return Status::Ok();
    case Value::Kind::kInt:
      out->append(std::to_string(v.as_int()));
      return Status::Ok();
    case Value::Kind::kFloat: {
      double d = v.as_float();
      out->append(std::isnan(d)   ? "NaN"
                  : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                                  : FormatPythonFloat(d));
      return Status::Ok();
    }
    case Value::Kind::kString:
      AppendJsonString(v.str(), out);
      return Status::Ok();
    case Value::Kind::kList: {
      out->push_back('[');
      if (v.list().empty()) {
        out->push_back(']');
        return Status::Ok();
      }
      bool first = true;
      for (const Value& item : v.list()) {
        if (!first) out->append(indent < 0 ? ", " : ",");
        first = false;
        newline(depth + 1);
        WEIR_RETURN_IF_ERROR(AppendJson(item, indent, depth + 1, out));
      }
      newline(depth);
      out->push_back(']');
      return Status::Ok();
    }
    case Value::Kind::kDict: {
      out->push_back('{');
      if (v.dict().empty()) {
        out->push_back('}');
        return Status::Ok();
      }
      bool first = true;
      for (const auto& [k, item] : v.dict()) {
        if (!first) out->append(indent < 0 ? ", " : ",");
        first = false;
        newline(depth + 1);
        AppendJsonString(k, out);
        out->append(": ");
        WEIR_RETURN_IF_ERROR(AppendJson(item, indent, depth + 1, out));
      }
      newline(depth);
      out->push_back('}');
      return Status::Ok();
    }
    case Value::Kind::kFunction:
      return Status::InvalidArgument("a function cannot be written as JSON");
  }
  return Status::Ok();
}

}  // namespace

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return FormatPythonFloat(float_);
    case Kind::kString:
      return *str_;
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size() && out.size() <= kMaxStringBytes; ++i) {
        if (i) out += ", ";
        AppendRepr((*list_)[i], &out);
      }
      if (tuple_ && list_->size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : *dict_) {
        if (out.size() > kMaxStringBytes) break;
        if (!first) out += ", ";
        first = false;
        AppendRepr(Value::String(k), &out);
        out += ": ";
        AppendRepr(v, &out);
      }
      return out + "}";
    }
    case Kind::kFunction:
      return "<function>";
  }
  return "";
}

std::string Value::Repr() const {
  std::string out;
  AppendRepr(*this, &out);
  return out;
}

Result<std::string> Value::ToJson(int indent) const {
  if (indent > kMaxJsonIndent) {
    return Status::InvalidArgument(
        StrFormat("tojson: indent %d is above %d", indent, kMaxJsonIndent));
  }
  std::string out;
  WEIR_RETURN_IF_ERROR(AppendJson(*this, indent, 0, &out));
  if (out.size() > kMaxStringBytes) {
    return Status::InvalidArgument("tojson: the JSON text is longer than 64 MiB");
  }
  return out;
}

bool Value::Equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (kind_ == Kind::kFloat || o.kind_ == Kind::kFloat) return as_float() == o.as_float();
    return int_ == o.int_;
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return *str_ == *o.str_;
    case Kind::kList: {
      if (list_ == o.list_) return true;
      if (list_->size() != o.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*o.list_)[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict_ == o.dict_) return true;
      if (dict_->size() != o.dict_->size()) return false;
      for (const auto& [k, v] : *dict_) {
        const Value* other = o.Find(k);
        if (!other || !v.Equals(*other)) return false;
      }
      return true;
    }
    case Kind::kFunction:
      return func_ == o.func_;
    default:
      return false;
  }
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

}  // namespace weir::chat
