// Status's codes (support/status.h) and the handler a host installs for failed checks
// (support/check.h).
#include "support/status.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "support/check.h"

namespace kiln {
namespace {

TEST(Status, AnErrorWithoutACodeIsInvalidInput) {
  EXPECT_EQ(Status::ok().code(), ErrorCode::ok);
  EXPECT_EQ(Status::error("bad").code(), ErrorCode::invalid_input);
  EXPECT_EQ(Status::errorf("bad {}", 1).code(), ErrorCode::invalid_input);
  EXPECT_EQ(Status::errorf("bad {}", 1).message(), "bad 1");
}

TEST(Status, KeepsItsCodeThroughContextAndExpected) {
  const Status unsupported = Status::errorf(ErrorCode::unsupported, "op {}", "fancy");
  EXPECT_FALSE(unsupported.is_ok());
  const Status wrapped = unsupported.with_context("node 'r'");
  EXPECT_EQ(wrapped.code(), ErrorCode::unsupported);
  EXPECT_EQ(wrapped.message(), "node 'r': op fancy");
  const Expected<int> expected = wrapped;
  EXPECT_EQ(expected.status().code(), ErrorCode::unsupported);
  EXPECT_EQ(error_code_name(ErrorCode::resource_exhausted), "resource exhausted");
}

TEST(Status, AnErrorMadeWithTheOkCodeOrAnOkExpectedIsInternal) {
  EXPECT_EQ(Status::error(ErrorCode::ok, "no code").code(), ErrorCode::internal);
  const Expected<int> from_ok = Status::ok();
  EXPECT_EQ(from_ok.status().code(), ErrorCode::internal);
}

struct FailedCheck : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_failed_check(const std::string& message) { throw FailedCheck(message); }

int checked_half(int value) {
  KILN_CHECK(value % 2 == 0, "{} is odd", value);
  return value / 2;
}

TEST(Check, AnInstalledHandlerThrowsInsteadOfAborting) {
  const CheckFailureHandler previous = set_check_failure_handler(throw_failed_check);
  EXPECT_EQ(checked_half(4), 2);
  try {
    checked_half(3);
    ADD_FAILURE() << "the check passed";
  } catch (const FailedCheck& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("internal compiler error: "), std::string::npos) << message;
    EXPECT_NE(message.find("check failed: value % 2 == 0: 3 is odd"), std::string::npos) << message;
  }
  EXPECT_EQ(set_check_failure_handler(previous), throw_failed_check);
}

TEST(CheckDeathTest, WithoutAHandlerAFailedCheckAborts) {
  EXPECT_DEATH(checked_half(5), "internal compiler error: .*check failed: .*5 is odd");
}

}  // namespace
}  // namespace kiln
