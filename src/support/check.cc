#include "support/check.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace kiln {
namespace {

std::atomic<CheckFailureHandler> check_failure_handler{nullptr};

}  // namespace

CheckFailureHandler set_check_failure_handler(CheckFailureHandler handler) {
  return check_failure_handler.exchange(handler);
}

}  // namespace kiln

namespace kiln::detail {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  const std::string text = fmt::format("internal compiler error: {}:{}: check failed: {}{}{}", file,
                                       line, condition, message.empty() ? "" : ": ", message);
  if (const CheckFailureHandler handler = check_failure_handler.load()) handler(text);
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace kiln::detail
