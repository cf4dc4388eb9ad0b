// The library call statement (loop/stmt.h): one statement for every operation a library
// computes, with its dtypes, epilogues and hints; printed and parsed back in each operation's
// form, checked by the verifier against its operands and its operation's epilogues.
#include <gtest/gtest.h>

#include <string>

#include "loop/parser.h"
#include "loop/printer.h"
#include "loop/stmt.h"
#include "loop/verifier.h"

namespace kiln::loop {
namespace {

constexpr const char* kGemm = R"(kernel k(a: f32[8, 4], b: f32[8, 16], c: f32[4, 16], p: i64[64]) {
  gemm(4, 16, 8) c[0, ld 16] = a[0, ld 4]^T * b[0, ld 16] packed in p
}
)";

constexpr const char* kConv =
    R"(kernel k(x: f32[2, 5, 5, 3], w: f32[4, 3, 3, 3], bias: f32[4], y: f32[2, 5, 5, 4], p: i64[4096]) {
  conv(images 2, channels 3 to 4, groups 1, in [5, 5], out [5, 5], kernel [3, 3], strides [1, 1], pads [1, 1], dilations [1, 1]) y[0] = x[0] * w + bias relu winograd packed in p
}
)";

const LibraryCall& call_of(const Kernel& kernel) {
  const LibraryCall* call = kernel.body.as<LibraryCall>();
  EXPECT_NE(call, nullptr) << print(kernel);
  return *call;
}

TEST(LibraryCall, AGemmRoundTripsAndHoldsItsOperandsShapeAndHints) {
  Expected<Kernel> kernel = parse_kernel(kGemm);
  ASSERT_TRUE(kernel) << kernel.status().message();
  EXPECT_EQ(print(*kernel), kGemm);
  const LibraryCall& call = call_of(*kernel);
  EXPECT_EQ(call.op, LibraryOp::gemm);
  EXPECT_EQ(library_op_name(call.op), "gemm");
  ASSERT_EQ(call.operands.size(), 3u);
  EXPECT_EQ(call.a().buffer.name(), "a");
  EXPECT_EQ(call.c().leading_dim, 16);
  EXPECT_TRUE(call.gemm().transpose_a);
  EXPECT_FALSE(call.gemm().accumulate);
  EXPECT_EQ(call.dtypes, (LibraryDTypes{DType::f32, DType::f32, DType::f32, DType::f32}));
  EXPECT_TRUE(call.epilogues.empty());
  EXPECT_EQ(call.hints.packed.name(), "p");
  // A copy through its arguments is the same statement.
  EXPECT_EQ(print(gemm(gemm_args(call))), print(kernel->body));
}

TEST(LibraryCall, AConvRoundTripsWithItsEpiloguesInOrder) {
  Expected<Kernel> kernel = parse_kernel(kConv);
  ASSERT_TRUE(kernel) << kernel.status().message();
  EXPECT_EQ(print(*kernel), kConv);
  const LibraryCall& call = call_of(*kernel);
  EXPECT_EQ(call.op, LibraryOp::conv);
  ASSERT_EQ(call.epilogues.size(), 2u);
  EXPECT_EQ(call.epilogues[0].kind, EpilogueKind::bias);
  EXPECT_EQ(call.epilogues[0].operand.name(), "bias");
  EXPECT_EQ(call.epilogues[1].kind, EpilogueKind::relu);
  EXPECT_EQ(call.bias().name(), "bias");
  EXPECT_TRUE(call.applies(EpilogueKind::relu));
  EXPECT_TRUE(call.hints.winograd);
  EXPECT_EQ(call.conv().out_channels, 4);
  EXPECT_EQ(print(conv(conv_args(call))), print(kernel->body));
}

// `kernel` with its library call rebuilt with other dtypes or epilogues.
Kernel with_call(const Kernel& kernel, const LibraryDTypes& dtypes,
                 std::vector<Epilogue> epilogues) {
  const LibraryCall& call = call_of(kernel);
  Kernel changed = kernel;
  changed.body = Stmt(std::make_shared<const LibraryCall>(
      call.op, call.operands, call.shape, dtypes, std::move(epilogues), call.hints));
  return changed;
}

TEST(LibraryCall, TheVerifierHoldsItsDtypesToItsOperands) {
  Expected<Kernel> kernel = parse_kernel(kGemm);
  ASSERT_TRUE(kernel) << kernel.status().message();
  const Status mixed =
      verify(with_call(*kernel, {DType::bf16, DType::bf16, DType::f32, DType::f32}, {}));
  ASSERT_FALSE(mixed.is_ok());
  EXPECT_NE(mixed.message().find("a gemm call computes (bf16, bf16, f32, f32) on operands of "
                                 "(f32, f32, f32)"),
            std::string::npos)
      << mixed.message();
  const Status relu =
      verify(with_call(*kernel, call_of(*kernel).dtypes, {{EpilogueKind::relu, Buffer()}}));
  ASSERT_FALSE(relu.is_ok());
  EXPECT_NE(relu.message().find("takes no epilogue"), std::string::npos) << relu.message();
}

TEST(LibraryCall, AConvsEpiloguesAreABiasThenARelu) {
  Expected<Kernel> kernel = parse_kernel(kConv);
  ASSERT_TRUE(kernel) << kernel.status().message();
  const LibraryCall& call = call_of(*kernel);
  const Epilogue bias = call.epilogues[0], relu = call.epilogues[1];
  EXPECT_TRUE(verify(with_call(*kernel, call.dtypes, {relu})).is_ok());
  EXPECT_TRUE(verify(with_call(*kernel, call.dtypes, {bias})).is_ok());
  for (const std::vector<Epilogue>& wrong :
       {std::vector<Epilogue>{relu, bias}, std::vector<Epilogue>{bias, bias},
        std::vector<Epilogue>{{EpilogueKind::bias, {}}}}) {
    const Status refused = verify(with_call(*kernel, call.dtypes, wrong));
    ASSERT_FALSE(refused.is_ok());
    EXPECT_NE(refused.message().find("a bias (with its buffer), then a relu"), std::string::npos)
        << refused.message();
  }
}

}  // namespace
}  // namespace kiln::loop
