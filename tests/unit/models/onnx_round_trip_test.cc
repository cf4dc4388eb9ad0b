// Each tiny preset's inference graph, exported to ONNX and imported back, computes what the
// zoo's graph computes in the reference interpreter.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "frontend/onnx_import.h"
#include "interp/interpreter.h"
#include "models/model.h"

namespace kiln {
namespace {

// The largest difference relative to the largest magnitude of `expected`.
double relative_difference(const Array& actual, const Array& expected) {
  double difference = 0;
  double scale = 1e-30;
  for (int64_t i = 0; i < expected.size(); ++i) {
    difference = std::max(difference, std::abs(actual[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return difference / scale;
}

Expected<Array> run_inference(const ModelInstance& model) {
  KILN_ASSIGN_OR_RETURN(std::vector<Array> inputs, model.input_values(model.inference));
  KILN_ASSIGN_OR_RETURN(std::vector<Array> outputs, interpret(model.inference.graph, inputs));
  return std::move(outputs[0]);
}

// Exports, re-imports and runs the imported model on the zoo's data inputs.
Expected<Array> run_exported(const ModelInstance& model) {
  const std::string path = (std::filesystem::path(::testing::TempDir()) /
                            fmt::format("kiln_zoo_{}_{}.onnx", model.preset, getpid()))
                               .string();
  Status exported = export_inference_onnx(model, path);
  Expected<ImportedModel> imported = import_onnx_file(path);
  std::filesystem::remove(path);
  KILN_RETURN_IF_ERROR(exported);
  if (!imported) return imported.status();
  std::vector<Array> inputs;
  for (int i = 0; i < imported->num_data_inputs; ++i) {
    KILN_ASSIGN_OR_RETURN(Array value, model.value(imported->graph.inputs()[i]->name()));
    inputs.push_back(std::move(value));
  }
  for (Array& weight : imported->weights) inputs.push_back(std::move(weight));
  KILN_ASSIGN_OR_RETURN(std::vector<Array> outputs, interpret(imported->graph, inputs));
  return std::move(outputs[0]);
}

struct TinyCase {
  std::string preset;
  ModelOptions options;
};

TEST(ZooOnnx, ExportedInferenceGraphsComputeTheSameLogits) {
  for (TinyCase tiny : std::vector<TinyCase>{{"mlp-tiny", {}},
                                             {"bert-tiny", {.seq_len = 8}},
                                             {"vit-tiny", {.image_size = 32}},
                                             {"resnet-tiny", {}},
                                             {"xml-cnn-tiny", {}},
                                             {"gcn-tiny", {}}}) {
    SCOPED_TRACE(tiny.preset);
    Expected<ModelInstance> model = build_model(tiny.preset, tiny.options);
    ASSERT_TRUE(model) << model.status().message();
    tiny.options.portable = true;
    Expected<ModelInstance> portable = build_model(tiny.preset, tiny.options);
    ASSERT_TRUE(portable) << portable.status().message();

    Expected<Array> expected = run_inference(*model);
    ASSERT_TRUE(expected) << expected.status().message();
    Expected<Array> portable_logits = run_inference(*portable);
    ASSERT_TRUE(portable_logits) << portable_logits.status().message();
    Expected<Array> exported = run_exported(*portable);
    ASSERT_TRUE(exported) << exported.status().message();
    ASSERT_EQ(exported->type(), expected->type());
    // The portable graph sums GCN's sparse product in another order (adding zeros); export
    // writes epsilons as f32. Both differ by f32 rounding at most.
    EXPECT_LT(relative_difference(*portable_logits, *expected), 1e-6);
    EXPECT_LT(relative_difference(*exported, *expected), 1e-6);
  }
}

TEST(ZooOnnx, GcnWithoutPortableFormHasNoOnnxExport) {
  Expected<ModelInstance> model = build_model("gcn-tiny");
  ASSERT_TRUE(model);
  const Status status = export_inference_onnx(
      *model,
      (std::filesystem::path(::testing::TempDir()) / fmt::format("kiln_zoo_gcn_{}.onnx", getpid()))
          .string());
  ASSERT_FALSE(status.is_ok());
  EXPECT_NE(status.message().find("spmm"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace kiln
