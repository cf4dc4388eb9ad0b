// Conv statements (loop/stmt.h) compiled to oneDNN's direct and Winograd convolutions:
// hand-built kernels of several geometries against the loop-IR evaluator, with the weights
// kept reordered in a state and without (a kept state's reuse is compiler/channels_last_test.cc's),
// and the text form read back. oneDNN sums in its own order, so results agree within f32's
// tolerance, not bit for bit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "codegen/cpu/kernel_compiler.h"
#include "codegen/cpu/prelude.h"
#include "loop/evaluator.h"
#include "loop/parser.h"
#include "loop/printer.h"
#include "loop/verifier.h"
#include "unit/codegen/codegen_test_util.h"

namespace kiln::codegen::cpu {
namespace {

using namespace loop;
using testing::random_args;
using testing::run_compiled;
using testing::TempDir;

struct ConvCase {
  std::string name;
  ConvGeometry geometry;
  bool keep_weights = false;
  bool bias = false;
  bool relu = false;
  bool winograd = false;
};

// The case's conv statement over parameters x, w, y with a margin before and after each
// image block, so that offsets matter; w kept in a state parameter when asked.
Kernel conv_kernel(const ConvCase& c) {
  const ConvGeometry& g = c.geometry;
  const int64_t margin = 3;
  const Buffer x = Buffer::param("x", DType::f32, {g.x_elements() + 2 * margin});
  const Buffer w = Buffer::param("w", DType::f32, {g.w_elements()});
  const Buffer y = Buffer::param("y", DType::f32, {g.y_elements() + 2 * margin});
  std::vector<Buffer> params = {x, w, y};
  const Buffer bias = c.bias ? Buffer::param("b", DType::f32, {g.out_channels}) : Buffer();
  if (c.bias) params.push_back(bias);
  ConvArgs args{.x = x,
                .x_offset = margin,
                .w = w,
                .bias = bias,
                .y = y,
                .y_offset = margin,
                .geometry = g,
                .relu = c.relu,
                .winograd = c.winograd,
                .packed_w = {}};
  if (c.keep_weights) {
    const int64_t bytes = conv_state_bytes(*conv(args).as<LibraryCall>());
    args.packed_w = Buffer::param("state", DType::i64, {bytes / 8});
    params.push_back(args.packed_w);
  }
  return Kernel{c.name, params, conv(std::move(args))};
}

std::vector<ConvCase> cases() {
  return {
      {"pointwise_2d",
       {.images = 2,
        .channels = 32,
        .out_channels = 48,
        .groups = 1,
        .in_spatial = {5, 6},
        .out_spatial = {5, 6},
        .kernel = {1, 1},
        .strides = {1, 1},
        .pads_begin = {0, 0},
        .dilations = {1, 1}},
       true},
      {"padded_3x3",
       {.images = 1,
        .channels = 16,
        .out_channels = 32,
        .groups = 1,
        .in_spatial = {7, 7},
        .out_spatial = {7, 7},
        .kernel = {3, 3},
        .strides = {1, 1},
        .pads_begin = {1, 1},
        .dilations = {1, 1}},
       true},
      // Stride 2 over an odd extent: the window stops short of the last column (pads_end -1).
      {"strided_7x7",
       {.images = 1,
        .channels = 3,
        .out_channels = 16,
        .groups = 1,
        .in_spatial = {15, 15},
        .out_spatial = {8, 8},
        .kernel = {7, 7},
        .strides = {2, 2},
        .pads_begin = {3, 3},
        .dilations = {1, 1}},
       false},
      {"strided_pointwise",
       {.images = 1,
        .channels = 16,
        .out_channels = 16,
        .groups = 1,
        .in_spatial = {9, 9},
        .out_spatial = {5, 5},
        .kernel = {1, 1},
        .strides = {2, 2},
        .pads_begin = {0, 0},
        .dilations = {1, 1}},
       true},
      {"dilated_1d",
       {.images = 3,
        .channels = 20,
        .out_channels = 12,
        .groups = 1,
        .in_spatial = {30},
        .out_spatial = {26},
        .kernel = {3},
        .strides = {1},
        .pads_begin = {0},
        .dilations = {2}},
       false},
      {"grouped_1d",
       {.images = 2,
        .channels = 8,
        .out_channels = 12,
        .groups = 4,
        .in_spatial = {11},
        .out_spatial = {11},
        .kernel = {4},
        .strides = {1},
        .pads_begin = {2},
        .dilations = {1}},
       false},
      {"volume",
       {.images = 1,
        .channels = 4,
        .out_channels = 8,
        .groups = 1,
        .in_spatial = {4, 5, 6},
        .out_spatial = {4, 5, 6},
        .kernel = {3, 3, 3},
        .strides = {1, 1, 1},
        .pads_begin = {1, 1, 1},
        .dilations = {1, 1, 1}},
       false},
      // oneDNN's epilogue: the bias, then relu as the relu op (x > 0 ? x : 0).
      {"bias_relu",
       {.images = 1,
        .channels = 16,
        .out_channels = 32,
        .groups = 1,
        .in_spatial = {6, 6},
        .out_spatial = {6, 6},
        .kernel = {3, 3},
        .strides = {1, 1},
        .pads_begin = {1, 1},
        .dilations = {1, 1}},
       true,
       true,
       true},
      {"bias_only",
       {.images = 2,
        .channels = 24,
        .out_channels = 8,
        .groups = 1,
        .in_spatial = {10},
        .out_spatial = {5},
        .kernel = {2},
        .strides = {2},
        .pads_begin = {0},
        .dilations = {1}},
       false,
       true,
       false},
      // Winograd's algorithm, its transformed weights kept (F(4x4, 3x3)'s 6x6 tiles, at these
      // channel counts), the bias and relu after it.
      {"winograd_3x3",
       {.images = 2,
        .channels = 128,
        .out_channels = 128,
        .groups = 1,
        .in_spatial = {9, 10},
        .out_spatial = {9, 10},
        .kernel = {3, 3},
        .strides = {1, 1},
        .pads_begin = {1, 1},
        .dilations = {1, 1}},
       true,
       true,
       true,
       true},
      // Asked for where oneDNN has no Winograd kernel (stride 2): the direct convolution.
      {"winograd_declined",
       {.images = 1,
        .channels = 16,
        .out_channels = 16,
        .groups = 1,
        .in_spatial = {9, 9},
        .out_spatial = {5, 5},
        .kernel = {3, 3},
        .strides = {2, 2},
        .pads_begin = {1, 1},
        .dilations = {1, 1}},
       true,
       false,
       false,
       true},
  };
}

bool c_relu(const Kernel& kernel) {
  return kernel.body.as<LibraryCall>()->applies(EpilogueKind::relu);
}
bool c_winograd(const Kernel& kernel) { return kernel.body.as<LibraryCall>()->hints.winograd; }

TEST(ConvCodegen, CompiledConvsMatchTheEvaluator) {
  std::vector<Kernel> kernels;
  for (const ConvCase& c : cases()) {
    kernels.push_back(conv_kernel(c));
    ASSERT_TRUE(verify(kernels.back()).is_ok()) << verify(kernels.back()).message();
  }
  TempDir cache;
  CpuCompileOptions options;
  options.cache_dir = cache.path();
  Expected<CompiledKernels> compiled = compile_kernels(kernels, options);
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  for (size_t i = 0; i < kernels.size(); ++i) {
    SCOPED_TRACE(print(kernels[i]));
    std::vector<std::vector<double>> expected = random_args(kernels[i], 20261127 + i);
    const bool kept = kernels[i].params.back().name() == "state";
    if (kept) std::fill(expected.back().begin(), expected.back().end(), 0.0);
    // A NaN input reaches some outputs, which relu makes 0 (the relu op's select); not with
    // Winograd's algorithm, whose transforms carry it to a whole tile.
    if (c_relu(kernels[i]) && !c_winograd(kernels[i])) expected[0][7] = std::nan("");
    const std::vector<std::vector<double>> actual =
        run_compiled(compiled->function(i), kernels[i], expected);
    ASSERT_TRUE(run_kernel(kernels[i], expected).is_ok());
    const int64_t depth = kernels[i].params[1].flat_size();
    for (size_t e = 0; e < actual[2].size(); ++e) {
      ASSERT_FALSE(std::isnan(expected[2][e]) && c_relu(kernels[i])) << "element " << e;
      if (std::isnan(expected[2][e])) continue;
      ASSERT_NEAR(actual[2][e], expected[2][e], 1e-4 * std::fabs(expected[2][e]) + 1e-6 * depth)
          << "element " << e;
    }
    if (kept) {
      // The test's buffers pass through doubles, which keep the tag only to 53 bits.
      EXPECT_EQ(actual.back()[0], static_cast<double>(kPackedBTag)) << "the state was filled";
    }
    if (kept && c_winograd(kernels[i])) {
      // Winograd's kernels leave y's blocked copy at the state's end (oneDNN has them on
      // AVX-512 machines); the direct convolution never writes there.
      const std::vector<double>& state = actual.back();
      const bool end_written =
          std::any_of(state.end() - 64, state.end(), [](double v) { return v != 0; });
      if (kernels[i].name == "winograd_declined") {
        EXPECT_FALSE(end_written) << "the stride-2 convolution ran Winograd's kernels";
      } else if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
        EXPECT_TRUE(end_written) << "Winograd's kernels did not run";
      }
    }
  }
}

TEST(ConvCodegen, TheTextFormReadsBack) {
  for (const ConvCase& c : cases()) {
    const Kernel kernel = conv_kernel(c);
    const std::string text = print(kernel);
    SCOPED_TRACE(text);
    Expected<Kernel> parsed = parse_kernel(text);
    ASSERT_TRUE(parsed.has_value()) << parsed.status().message();
    EXPECT_EQ(print(*parsed), text);
  }
}

TEST(ConvCodegen, TheVerifierRefusesWhatIsNoConvolution) {
  const auto refused = [](ConvCase c, std::string_view message) {
    const Status status = verify(conv_kernel(c));
    EXPECT_FALSE(status.is_ok()) << message;
    EXPECT_NE(status.message().find(message), std::string::npos) << status.message();
  };
  ConvCase short_output = cases()[1];
  short_output.geometry.out_spatial = {5, 7};  // two windows fewer than fit
  refused(short_output, "output size is not its window's");
  ConvCase uneven_groups = cases()[5];
  uneven_groups.geometry.groups = 3;
  refused(uneven_groups, "divisible");
  ConvCase lists = cases()[0];
  lists.geometry.strides = {1};
  refused(lists, "spatial dims");
  // A region past its buffer: the geometry grows, the buffers stay.
  ConvCase geometry = cases()[0];
  Kernel kernel = conv_kernel(geometry);
  const LibraryCall& statement = *kernel.body.as<LibraryCall>();
  ConvArgs args = conv_args(statement);
  args.geometry.images = 3;
  kernel.body = conv(std::move(args));
  const Status past = verify(kernel);
  EXPECT_FALSE(past.is_ok());
  EXPECT_NE(past.message().find("reaches past"), std::string::npos) << past.message();
}

}  // namespace
}  // namespace kiln::codegen::cpu
