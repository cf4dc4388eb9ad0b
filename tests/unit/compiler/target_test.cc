// The targets (target/target.h): devices as a kind and an ordinal, what each target decides,
// and a compilation for the CUDA mapping on the CPU that runs the same on any ordinal.
#include "target/target.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cost/device_profile.h"
#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/parser.h"
#include "kiln/kiln.h"
#include "loop/parser.h"

namespace kiln {
namespace {

TEST(Device, ParsesKindsAndOrdinalsAndPrintsThemBack) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"cpu", "cpu"},
      {"cuda", "cuda:0"},
      {"cuda:1", "cuda:1"},
      {"cuda-mapping-on-cpu", "cuda-mapping-on-cpu:0"},
      {"cuda-mapping-on-cpu:3", "cuda-mapping-on-cpu:3"}};
  for (const auto& [name, printed] : cases) {
    Expected<Device> device = parse_device(name);
    ASSERT_TRUE(device) << name << ": " << device.status().message();
    EXPECT_EQ(device_name(*device), printed);
    EXPECT_EQ(*parse_device(printed), *device);
  }
  EXPECT_EQ(parse_device("cuda:2")->ordinal, 2);
  EXPECT_EQ(parse_device("cuda:2")->kind, DeviceKind::cuda);
}

TEST(Device, RefusesUnknownKindsAndBadOrdinals) {
  for (const char* name : {"tpu", "cpu:1", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "CUDA"}) {
    Expected<Device> device = parse_device(name);
    ASSERT_FALSE(device) << name;
    EXPECT_EQ(device.status().code(), ErrorCode::invalid_input);
    EXPECT_NE(device.status().message().find(name), std::string::npos) << device.status().message();
  }
}

TEST(Target, EachKindHasItsTargetAndItsDecisions) {
  const CompileOptions options;
  const Target& cpu = target_for(DeviceKind::cpu);
  const Target& cuda = target_for(DeviceKind::cuda);
  const Target& mapping = target_for(DeviceKind::cuda_mapping_on_cpu);
  EXPECT_EQ(cpu.kind(), DeviceKind::cpu);
  EXPECT_EQ(cuda.kind(), DeviceKind::cuda);
  EXPECT_EQ(mapping.kind(), DeviceKind::cuda_mapping_on_cpu);
  // The CPU prices decompositions and computes convolutions channels last; the GPU mapping
  // keeps composites whole and convolutions as they are.
  EXPECT_TRUE(cpu.decomposes_by_cost());
  EXPECT_TRUE(cpu.computes_convolutions_channels_last());
  for (const Target* gpu : {&cuda, &mapping}) {
    EXPECT_FALSE(gpu->decomposes_by_cost());
    EXPECT_FALSE(gpu->computes_convolutions_channels_last());
    ASSERT_TRUE(gpu->gpu_profile(options));
  }
  EXPECT_FALSE(cpu.gpu_profile(options));
  EXPECT_TRUE(cpu.caches_compilations());
  EXPECT_TRUE(cuda.caches_compilations());
  EXPECT_FALSE(mapping.caches_compilations());
}

// The first statement of a kernel's text, as a library call.
loop::Stmt call_in(const std::string& kernel_text) {
  Expected<loop::Kernel> kernel = loop::parse_kernel(kernel_text);
  EXPECT_TRUE(kernel) << kernel.status().message();
  return kernel ? kernel->body : loop::Stmt();
}

TEST(Target, EachTargetsTableNamesTheLibraryOfACallOrRefusesIt) {
  const loop::Stmt f32_gemm = call_in(R"(kernel k(a: f32[4, 8], b: f32[8, 16], c: f32[4, 16]) {
  gemm(4, 16, 8) c[0, ld 16] = a[0, ld 8] * b[0, ld 16]
})");
  const loop::Stmt f64_gemm = call_in(R"(kernel k(a: f64[4, 8], b: f64[8, 16], c: f64[4, 16]) {
  gemm(4, 16, 8) c[0, ld 16] = a[0, ld 8] * b[0, ld 16]
})");
  const loop::Stmt conv = call_in(R"(kernel k(x: f32[1, 4, 3], w: f32[2, 3, 3], y: f32[1, 4, 2]) {
  conv(images 1, channels 3 to 2, groups 1, in [4], out [4], kernel [3], strides [1], pads [1], dilations [1]) y[0] = x[0] * w
})");
  // Not a call any lowering makes: an f16 by bf16 product.
  const loop::LibraryCall& f32 = *f32_gemm.as<loop::LibraryCall>();
  const loop::LibraryCall mixed(loop::LibraryOp::gemm, f32.operands, f32.shape,
                                {DType::f16, DType::bf16, DType::f32, DType::f32}, {}, {});
  // A bf16 product written in f32, as a convolution's gradients make it (loop/lower_conv.h).
  const loop::LibraryCall widening(loop::LibraryOp::gemm, f32.operands, f32.shape,
                                   {DType::bf16, DType::bf16, DType::f32, DType::f32}, {}, {});
  const Target& cpu = target_for(DeviceKind::cpu);
  const Target& cuda = target_for(DeviceKind::cuda);
  EXPECT_EQ(*cpu.library_for(f32), "oneDNN");
  EXPECT_EQ(*cpu.library_for(*f64_gemm.as<loop::LibraryCall>()), "OpenBLAS");
  EXPECT_EQ(*cpu.library_for(*conv.as<loop::LibraryCall>()), "oneDNN");
  EXPECT_EQ(*cuda.library_for(f32), "cuBLASLt");
  EXPECT_EQ(*cuda.library_for(*f64_gemm.as<loop::LibraryCall>()), "cuBLASLt");
  const Expected<std::string_view> gpu_conv = cuda.library_for(*conv.as<loop::LibraryCall>());
  ASSERT_FALSE(gpu_conv);
  EXPECT_EQ(gpu_conv.status().code(), ErrorCode::unsupported);
  EXPECT_EQ(gpu_conv.status().message(),
            "no library of the GPU computes a conv of (f32, f32, f32, f32)");
  const Expected<std::string_view> cpu_mixed = cpu.library_for(mixed);
  ASSERT_FALSE(cpu_mixed);
  EXPECT_EQ(cpu_mixed.status().message(),
            "no library of the CPU computes a gemm of (f16, bf16, f32, f32)");
  EXPECT_TRUE(is_widening_gemm(widening));
  EXPECT_EQ(*cpu.library_for(widening), "oneDNN");
  EXPECT_FALSE(cuda.library_for(widening));  // cuBLASLt could; Kiln's launches have one type
  // A kernel holding a call its target cannot run is refused before it is scheduled.
  EXPECT_TRUE(cpu.runs_library_calls({.name = "k", .params = {}, .body = conv}).is_ok());
  const Status refused = cuda.runs_library_calls({.name = "k", .params = {}, .body = conv});
  EXPECT_EQ(refused.code(), ErrorCode::unsupported);
}

// Mixed precision runs a contraction low only where the target has a library for it: matmuls
// everywhere (oneDNN, cuBLASLt); convolutions on the CPU (oneDNN), and in f32 on the GPU
// until cuDNN runs them. A mixed-precision gemm has a library on each.
TEST(Target, EachTargetSaysWhichContractionsRunInLowPrecision) {
  for (DeviceKind kind :
       {DeviceKind::cpu, DeviceKind::cuda, DeviceKind::cuda_mapping_on_cpu}) {
    const Target& target = target_for(kind);
    EXPECT_TRUE(target.computes_in_low_precision(Op::matmul));
    for (Op conv : {Op::conv, Op::conv_grad_data, Op::conv_grad_weight, Op::conv_channels_last}) {
      EXPECT_EQ(target.computes_in_low_precision(conv), kind == DeviceKind::cpu);
    }
  }
  const loop::Stmt call = call_in(R"(kernel k(a: bf16[2, 3], b: bf16[3, 4], c: bf16[2, 4]) {
  gemm(2, 4, 3) c[0, ld 4] = a[0, ld 3] * b[0, ld 4]
})");
  const loop::LibraryCall& gemm = *call.as<loop::LibraryCall>();
  EXPECT_TRUE(is_mixed_precision_gemm(gemm));
  EXPECT_EQ(*target_for(DeviceKind::cpu).library_for(gemm), "oneDNN");
  EXPECT_EQ(*target_for(DeviceKind::cuda).library_for(gemm), "cuBLASLt");
}

TEST(GpuProfile, PublishedFiguresSayTheyAreNotMeasured) {
  const cost::GpuProfile h100 = cost::h100_sxm_profile();
  const cost::GpuProfile h200 = cost::h200_profile();
  for (const cost::GpuProfile& gpu : {h100, h200}) {
    EXPECT_FALSE(gpu.measured) << gpu.gpu;
    EXPECT_EQ(gpu.architecture, "sm_90");
    EXPECT_EQ(gpu.sms, 132);
    // Tensor cores: TF32 and the 16-bit types well above the f32 rate of the CUDA cores.
    EXPECT_GT(gpu.tf32_flops, 3 * gpu.f32_flops);
    EXPECT_GT(gpu.bf16_flops, 1.9 * gpu.tf32_flops);
    EXPECT_EQ(gpu.bf16_flops, gpu.f16_flops);
  }
  EXPECT_GT(h200.copy_bandwidth, h100.copy_bandwidth);
  EXPECT_EQ(h200.bf16_flops, h100.bf16_flops);
  CompileOptions options;
  options.cuda.architecture = "sm_80";
  EXPECT_FALSE(target_for(DeviceKind::cuda).gpu_profile(options)) << "no figures for sm_80";
}

// The ordinal picks where a program runs, never what is compiled: the CUDA mapping on the CPU
// compiles the same kernels for GPUs 0 and 1, and both agree with the interpreter.
TEST(Target, TheOrdinalDoesNotChangeTheCompilation) {
  constexpr const char* kGraph = R"(graph @g(%x: f32[8,16], %w: f32[16,4]) {
  %m = matmul(%x, %w) : f32[8,4]
  %y = relu(%m) : f32[8,4]
  %s = sum(%y) {axes = [1]} : f32[8]
  return %y, %s
})";
  std::vector<std::string> sources;
  for (const int ordinal : {0, 1}) {
    Expected<Graph> graph = parse_graph(kGraph);
    ASSERT_TRUE(graph) << graph.status().message();
    CompileOptions options;
    options.device = {DeviceKind::cuda_mapping_on_cpu, ordinal};
    options.fusion.profile = cost::reference_profile();
    Expected<CompiledModel> model = Compiler(options).compile(graph->clone());
    ASSERT_TRUE(model) << model.status().message();
    const std::vector<Array> inputs = random_inputs(*graph, {.seed = 7});
    Expected<std::vector<Array>> outputs = model->run(inputs);
    ASSERT_TRUE(outputs) << outputs.status().message();
    Expected<std::vector<Array>> expected = interpret(*graph, inputs);
    ASSERT_TRUE(expected) << expected.status().message();
    ASSERT_EQ(outputs->size(), expected->size());
    for (size_t i = 0; i < outputs->size(); ++i) {
      const std::vector<double>& got = (*outputs)[i].data;
      const std::vector<double>& want = (*expected)[i].data;
      ASSERT_EQ(got.size(), want.size());
      for (size_t j = 0; j < got.size(); ++j) {
        EXPECT_NEAR(got[j], want[j], 1e-4 * (1 + std::abs(want[j]))) << "output " << i;
      }
    }
    Expected<std::string> source = kernel_source(model->compiled());
    ASSERT_TRUE(source) << source.status().message();
    sources.push_back(*source);
  }
  EXPECT_EQ(sources[0], sources[1]);
}

}  // namespace
}  // namespace kiln
