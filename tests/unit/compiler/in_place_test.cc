// Outputs written over inputs' memory (compiler/in_place.h): small programs whose kernels read
// the input before, at or after the output's writes, and a compiled Adam step run with every
// update the check allows written in place, which must give what the step gives apart; an
// output at the address of an input that was not allowed is refused.
#include "compiler/in_place.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "compiler/tensor_bytes.h"
#include "kiln/kiln.h"
#include "loop/parser.h"
#include "models/model.h"

namespace kiln {
namespace {

using runtime::Program;
using runtime::Step;
using runtime::Storage;

// Input 0 and output 0, 32 floats each, an arena buffer of as many, and kernels whose
// parameters are named for them (in0, out0, t0); kernel k runs in step k.
struct SmallProgram {
  Program program;
  std::vector<loop::Kernel> kernels;

  explicit SmallProgram(const std::vector<std::string>& sources) {
    program.input_bytes = {128};
    program.output_bytes = {128};
    program.buffers = {{Storage::input, 0, 0, 128},
                       {Storage::output, 0, 0, 128},
                       {Storage::arena, 0, 0, 128}};
    const std::map<std::string, int> buffer_named = {{"in0", 0}, {"out0", 1}, {"t0", 2}};
    for (const std::string& source : sources) {
      Expected<loop::Kernel> kernel = loop::parse_kernel(source);
      EXPECT_TRUE(kernel) << kernel.status().message();
      if (!kernel) continue;
      std::vector<int> buffers;
      for (const loop::Buffer& param : kernel->params) buffers.push_back(buffer_named.at(param.name()));
      Step step;
      step.kernel = static_cast<int>(kernels.size());
      step.buffers = buffers;
      step.label = "kernel " + std::to_string(kernels.size());
      program.steps.push_back(std::move(step));
      kernels.push_back(std::move(*kernel));
    }
    program.num_kernels = static_cast<int>(kernels.size());
  }

  Status check() const {
    std::vector<const loop::Kernel*> pointers;
    for (const loop::Kernel& kernel : kernels) pointers.push_back(&kernel);
    return InPlaceCheck(program, pointers).check(0, 0);
  }
};

constexpr const char* kHeader = "kernel k(in0: f32[32], out0: f32[32]) {\n";

std::string kernel_of(const std::string& body) { return kHeader + body + "\n}\n"; }

TEST(InPlace, AnElementwiseUpdateMayOverwriteItsInput) {
  EXPECT_TRUE(SmallProgram({kernel_of("for (i0, 0, 32) { out0[i0] = in0[i0]*2.0f }")}).check());
  // Split and vectorized, as the default schedule leaves it: one element an iteration still.
  EXPECT_TRUE(SmallProgram({kernel_of("for (i0.o, 0, 4) { vectorized for (i0.i, 0, 8) { "
                                      "out0[i0.o*8 + i0.i] = in0[i0.o*8 + i0.i] + 1.0f } }")})
                  .check());
  // The input read whole by an earlier kernel only (a transpose into the arena).
  EXPECT_TRUE(SmallProgram({"kernel k(in0: f32[32], t0: f32[32]) {\n"
                            "for (i0, 0, 32) { t0[i0] = in0[31 - i0] }\n}\n",
                            "kernel k(t0: f32[32], out0: f32[32]) {\n"
                            "for (i0, 0, 32) { out0[i0] = t0[i0] }\n}\n"})
                  .check());
  // Read and written by one kernel, the reads in a statement of their own before the write.
  EXPECT_TRUE(SmallProgram({"kernel k(in0: f32[32], out0: f32[32]) {\n"
                            "allocate t1: f32[32] in local {\n"
                            "for (i0, 0, 32) { t1[i0] = in0[31 - i0] }\n"
                            "for (i1, 0, 32) { out0[i1] = t1[i1] }\n}\n}\n"})
                  .check());
}

TEST(InPlace, ReadingAnotherElementOrAfterTheWriteIsRefused) {
  const Status neighbour = SmallProgram({kernel_of(
      "for (i0, 0, 31) { out0[i0] = in0[i0 + 1] }")}).check();
  ASSERT_FALSE(neighbour);
  EXPECT_NE(neighbour.message().find("may touch the same element"), std::string::npos)
      << neighbour.message();

  const Status later = SmallProgram({kernel_of("for (i0, 0, 32) { out0[i0] = 1.0f }\n"
                                               "for (i1, 0, 32) { out0[i1] = in0[i1] }")})
                           .check();
  ASSERT_FALSE(later);
  EXPECT_NE(later.message().find("reads the input after"), std::string::npos) << later.message();

  // A whole row read (a reduction) for each element written: another element's old value.
  const Status row = SmallProgram({kernel_of(
      "for (i0, 0, 32) { out0[i0] = in0[i0] - sum(k1, 0, 32, in0[k1]) }")}).check();
  EXPECT_FALSE(row);
}

TEST(InPlace, AStepThatReadsTheInputAfterTheWriterIsRefused) {
  SmallProgram program({kernel_of("for (i0, 0, 32) { out0[i0] = in0[i0]*2.0f }")});
  Step copy;
  copy.kind = Step::Kind::copy;
  copy.buffers = {0, 2};
  copy.label = "copy the input";
  program.program.steps.push_back(std::move(copy));
  const Status status = program.check();
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("step 1 (copy the input) reads the input"), std::string::npos)
      << status.message();
}

// An Adam step: each updated parameter and moment (output X.next of input X).
TEST(InPlace, AnAdamStepRunInPlaceGivesWhatItGivesApart) {
  Expected<ModelInstance> preset = build_model("mlp-tiny", {});
  ASSERT_TRUE(preset) << preset.status().message();
  Expected<TrainingStep> step = build_training_step(*preset, Optimizer::adam());
  ASSERT_TRUE(step) << step.status().message();
  Expected<CompiledModel> model = Compiler().compile(step->graph.clone());
  ASSERT_TRUE(model) << model.status().message();
  const Graph& graph = model->graph();
  const std::vector<const loop::Kernel*> kernels = model->compiled().program_kernels();
  std::map<std::string, int64_t> input_of;
  for (size_t i = 0; i < graph.inputs().size(); ++i) input_of[graph.inputs()[i]->name()] = i;
  std::vector<std::pair<int64_t, int64_t>> candidates;
  std::map<std::string, Status> why;
  const InPlaceCheck check(model->program(), kernels);
  for (size_t o = 0; o < graph.outputs().size(); ++o) {
    const std::string& name = graph.outputs()[o]->name();
    if (!name.ends_with(".next")) continue;
    const auto input = input_of.find(name.substr(0, name.size() - 5));
    if (input == input_of.end()) continue;
    candidates.emplace_back(static_cast<int64_t>(o), input->second);
    why[name] = check.check(candidates.back().first, candidates.back().second);
  }
  const std::vector<std::pair<int64_t, int64_t>> allowed = model->allow_in_place(candidates);
  // Most of the state is updated element by element once the gradient is complete.
  EXPECT_GE(allowed.size(), candidates.size() / 2);
  for (const char* name : {"layer0.b.next", "layer0.w.m.next", "layer2.b.v.next"}) {
    EXPECT_TRUE(why.at(name)) << name << ": " << why.at(name).message();
  }
  // A gemm computes the last layer's weight gradient into the new weight's memory, where the
  // update then reads it, after which it reads the old weight: apart.
  ASSERT_FALSE(why.at("layer2.w.next"));
  EXPECT_NE(why.at("layer2.w.next").message().find("reads the input after"), std::string::npos)
      << why.at("layer2.w.next").message();

  Expected<std::vector<Array>> first = first_step_inputs(*preset, step->graph);
  ASSERT_TRUE(first) << first.status().message();
  const std::vector<Array>& inputs = *first;
  const auto run = [&](const std::vector<std::pair<int64_t, int64_t>>& in_place) {
    std::vector<std::vector<std::byte>> in, out;
    for (const Array& input : inputs) in.push_back(encode_array(input));
    for (const Value* output : graph.outputs()) {
      out.emplace_back(static_cast<size_t>(output->shape().num_elements() *
                                           dtype_size_bytes(output->dtype())));
    }
    std::vector<const void*> in_pointers;
    std::vector<void*> out_pointers;
    for (auto& bytes : in) in_pointers.push_back(bytes.data());
    for (auto& bytes : out) out_pointers.push_back(bytes.data());
    for (const auto& [o, i] : in_place) out_pointers[static_cast<size_t>(o)] = in[i].data();
    const Status ran = model->run_raw(in_pointers, out_pointers);
    EXPECT_TRUE(ran) << ran.message();
    std::vector<Array> outputs;
    for (size_t o = 0; o < graph.outputs().size(); ++o) {
      outputs.push_back(decode_array(graph.outputs()[o]->type(),
                                     static_cast<const std::byte*>(out_pointers[o])));
    }
    return outputs;
  };
  const std::vector<Array> apart = run({});
  const std::vector<Array> together = run(allowed);
  for (size_t o = 0; o < apart.size(); ++o) {
    EXPECT_EQ(apart[o], together[o]) << graph.outputs()[o]->name();
  }
  // Any other output at an input's address is refused before anything runs.
  std::vector<std::vector<std::byte>> in, out;
  std::vector<const void*> in_pointers;
  std::vector<void*> out_pointers;
  for (const Array& input : inputs) in.push_back(encode_array(input));
  for (const Value* output : graph.outputs()) {
    out.emplace_back(static_cast<size_t>(output->shape().num_elements() *
                                         dtype_size_bytes(output->dtype())));
  }
  for (auto& bytes : in) in_pointers.push_back(bytes.data());
  for (auto& bytes : out) out_pointers.push_back(bytes.data());
  for (size_t o = 0; o < graph.outputs().size(); ++o) {
    if (graph.outputs()[o]->name() == "layer2.w.next") {
      out_pointers[o] = in[static_cast<size_t>(input_of.at("layer2.w"))].data();
    }
  }
  const Status refused = model->run_raw(in_pointers, out_pointers);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.message().find("does not allow"), std::string::npos) << refused.message();
}

}  // namespace
}  // namespace kiln
