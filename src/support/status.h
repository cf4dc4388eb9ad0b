// Status and Expected<T>: how Kiln reports errors.
//
// A failure is a Status with a code and a message that names the node, op or source location;
// callers propagate it with KILN_RETURN_IF_ERROR / KILN_ASSIGN_OR_RETURN and add context on the
// way up (with_context keeps the code). The code says whose the failure is, and so what a
// caller may do with it:
//   invalid_input       a malformed file, an attribute out of range, a wrong option: the
//                       user's to fix (Status::error without a code means this)
//   unsupported         well formed, but Kiln does not compile or run it (an op, a dtype, a
//                       shape a target cannot take): the Python backend leaves such a graph to
//                       PyTorch, and only such a graph
//   resource_exhausted  memory or another resource ran out
//   internal            a bug in Kiln ("internal compiler error")
// The CLI turns any of them into exit code 1. A broken internal invariant deep in a pass is
// KILN_CHECK (support/check.h) instead, which aborts, or raises in the Python module.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kiln {

enum class ErrorCode : uint8_t { ok, invalid_input, unsupported, resource_exhausted, internal };

// "ok", "invalid input", "unsupported", "resource exhausted", "internal".
std::string_view error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    return Status(ErrorCode::invalid_input, std::move(message));
  }
  static Status error(ErrorCode code, std::string message) {
    return Status(code, std::move(message));
  }
  template <typename... Args>
  static Status errorf(fmt::format_string<Args...> format, Args&&... args) {
    return Status(ErrorCode::invalid_input, fmt::format(format, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Status errorf(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
    return Status(code, fmt::format(format, std::forward<Args>(args)...));
  }

  bool is_ok() const { return code_ == ErrorCode::ok; }
  explicit operator bool() const { return is_ok(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const;

  // Returns a copy whose message is prefixed with `context: `, with the same code. Used to add
  // the node, op or location to an error raised deeper down.
  Status with_context(std::string_view context) const;

 private:
  Status(ErrorCode code, std::string message);
  ErrorCode code_ = ErrorCode::ok;
  std::string message_;
};

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : state_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Expected(Status status) : state_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(state_).is_ok()) {
      state_ = Status::error(ErrorCode::internal,
                             "internal compiler error: Expected built from an OK status");
    }
  }

  bool has_value() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return has_value(); }

  const Status& status() const {
    static const Status kOk;
    return has_value() ? kOk : std::get<Status>(state_);
  }
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace kiln

#define KILN_CONCAT_INNER_(a, b) a##b
#define KILN_CONCAT_(a, b) KILN_CONCAT_INNER_(a, b)

// Returns early from the enclosing function when `expr` (a Status) is an error.
#define KILN_RETURN_IF_ERROR(expr)                       \
  do {                                                   \
    ::kiln::Status kiln_status_ = (expr);                \
    if (!kiln_status_.is_ok()) return kiln_status_;     \
  } while (false)

// `KILN_ASSIGN_OR_RETURN(auto x, f());` declares x from an Expected or returns its error.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL_(KILN_CONCAT_(kiln_expected_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.has_value()) return tmp.status();        \
  lhs = std::move(tmp).value()
