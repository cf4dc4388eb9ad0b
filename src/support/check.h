// KILN_CHECK: internal invariants.
//
// A failed check is a bug in Kiln, never the user's fault: it prints "internal compiler error"
// with the source location and message, and aborts. User errors go through Status instead
// (support/status.h).
//
// A host that must outlive Kiln's bugs (the Python module, inside the user's process) installs
// a handler that throws instead: the check's message then reaches the caller as an exception,
// and the process lives on. Code between the check and the handler's catch must be exception
// safe, as RAII makes it; a check inside an OpenMP region or a noexcept function still ends
// the process.
#pragma once

#include <fmt/format.h>

#include <string>

namespace kiln {

// Called with the check's whole message ("internal compiler error: file:line: check failed:
// ..."); it must not return normally: it throws, or the process aborts after it.
using CheckFailureHandler = void (*)(const std::string& message);

// Installs `handler` for every later failed check in the process (null: print and abort, the
// default), and returns the one it replaces.
CheckFailureHandler set_check_failure_handler(CheckFailureHandler handler);

}  // namespace kiln

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
