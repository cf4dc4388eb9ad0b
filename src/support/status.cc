#include "support/status.h"

namespace kiln {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::ok:
      return "ok";
    case ErrorCode::invalid_input:
      return "invalid input";
    case ErrorCode::unsupported:
      return "unsupported";
    case ErrorCode::resource_exhausted:
      return "resource exhausted";
    case ErrorCode::internal:
      return "internal";
  }
  return "?";
}

// An error must have a code: one made with `ok` is a bug in its maker.
Status::Status(ErrorCode code, std::string message)
    : code_(code == ErrorCode::ok ? ErrorCode::internal : code), message_(std::move(message)) {}

const std::string& Status::message() const {
  static const std::string kOkMessage = "OK";
  return is_ok() ? kOkMessage : message_;
}

Status Status::with_context(std::string_view context) const {
  if (is_ok()) return *this;
  return Status(code_, fmt::format("{}: {}", context, message_));
}

}  // namespace kiln
