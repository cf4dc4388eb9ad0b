// KILN_CHECK: internal invariants.
//
// A failed check is a bug in Kiln, never the user's fault: it prints "internal compiler error"
// with the source location and message, and aborts. User errors go through Status instead
// (support/status.h).
#pragma once

#include <fmt/format.h>

namespace kiln::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* condition,
                               const std::string& message);
}  // namespace kiln::detail

#define KILN_CHECK(condition, ...)                                                       \
  do {                                                                                   \
    if (!(condition)) [[unlikely]] {                                                     \
      ::kiln::detail::check_failed(__FILE__, __LINE__, #condition,                       \
                                   ::fmt::format("" __VA_ARGS__));                       \
    }                                                                                    \
  } while (false)

#define KILN_UNREACHABLE(...) \
  ::kiln::detail::check_failed(__FILE__, __LINE__, "unreachable", ::fmt::format("" __VA_ARGS__))
