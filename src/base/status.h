// Status and Result<T>: how weir reports failures that come from input (files, flags, requests,
// I/O). Bugs use WEIR_CHECK (check.h) instead. Messages name the file, the field and the values.
//
// Thread safety: values; safe to copy between threads.
#pragma once

#include <cstdarg>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace weir {

class Status {
 public:
  enum class Code { kOk = 0, kInvalidArgument, kNotFound, kCorrupt, kUnsupported, kIoError,
                    kOutOfMemory, kInternal };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status Corrupt(std::string msg) { return Status(Code::kCorrupt, std::move(msg)); }
  static Status Unsupported(std::string msg) { return Status(Code::kUnsupported, std::move(msg)); }
  static Status IoError(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status OutOfMemory(std::string msg) { return Status(Code::kOutOfMemory, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  // "corrupt: model.gguf: tensor 'x' offset 123 + 456 exceeds file size 100"
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context + ": "`.
  Status WithContext(const std::string& context) const;

 private:
  Status(Code code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string msg_;
};

// printf-style formatting for messages.
std::string StrFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Result<T>: either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace weir

#define WEIR_CONCAT_INNER(a, b) a##b
#define WEIR_CONCAT(a, b) WEIR_CONCAT_INNER(a, b)

// Returns early from a Status- or Result-returning function when `expr` fails.
#define WEIR_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::weir::Status _weir_st = (expr);         \
    if (!_weir_st.ok()) return _weir_st;      \
  } while (0)

// `WEIR_ASSIGN_OR_RETURN(auto x, MakeX());`
#define WEIR_ASSIGN_OR_RETURN(lhs, rexpr) \
  WEIR_ASSIGN_OR_RETURN_IMPL(WEIR_CONCAT(_weir_res_, __LINE__), lhs, rexpr)
#define WEIR_ASSIGN_OR_RETURN_IMPL(res, lhs, rexpr) \
  auto res = (rexpr);                               \
  if (!res.ok()) return res.status();               \
  lhs = std::move(res).value()
