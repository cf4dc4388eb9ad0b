// Status and Expected<T>: how Kiln reports user errors.
//
// Kiln distinguishes two kinds of failure. A *user error* (a malformed file, an unsupported op,
// an attribute out of range) is returned as a Status carrying a message that names the node, op
// or source location; callers propagate it with KILN_RETURN_IF_ERROR / KILN_ASSIGN_OR_RETURN and
// the CLI turns it into exit code 1. A broken *internal invariant* is not a Status: it is
// KILN_CHECK (support/check.h), which aborts with "internal compiler error".
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace kiln {

class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }
  template <typename... Args>
  static Status errorf(fmt::format_string<Args...> format, Args&&... args) {
    return Status(fmt::format(format, std::forward<Args>(args)...));
  }

  bool is_ok() const { return !message_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const;

  // Returns a copy whose message is prefixed with `context: `. Used to add the node, op or
  // location to an error raised deeper down.
  Status with_context(std::string_view context) const;

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : state_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Expected(Status status) : state_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(state_).is_ok()) {
      state_ = Status::error("internal compiler error: Expected built from an OK status");
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
