#include "support/status.h"

namespace kiln {

const std::string& Status::message() const {
  static const std::string kOkMessage = "OK";
  return message_ ? *message_ : kOkMessage;
}

Status Status::with_context(std::string_view context) const {
  if (is_ok()) return *this;
  return Status(fmt::format("{}: {}", context, *message_));
}

}  // namespace kiln
