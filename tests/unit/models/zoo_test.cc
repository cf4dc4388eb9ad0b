// The model zoo: every preset builds verified graphs, parameter counts equal the published
// ones, the tiny presets run in the reference interpreter, and values are deterministic.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "interp/interpreter.h"
#include "ir/verifier.h"
#include "models/model.h"

namespace kiln {
namespace {

ModelInstance build(const std::string& preset, const ModelOptions& options = {}) {
  Expected<ModelInstance> model = build_model(preset, options);
  EXPECT_TRUE(model) << model.status().message();
  return std::move(model).value();  // throws, failing the test, when there is none
}

bool has_input(const ModelGraph& graph, std::string_view name) {
  for (const Value* input : graph.graph.inputs()) {
    if (input->name() == name) return true;
  }
  return false;
}

TEST(Zoo, EveryPresetBuildsVerifiedLossAndInferenceGraphs) {
  ASSERT_GE(zoo_presets().size(), 14u);
  for (const PresetInfo& preset : zoo_presets()) {
    SCOPED_TRACE(preset.name);
    ModelInstance model = build(preset.name);
    EXPECT_EQ(model.family, preset.family);
    for (const ModelGraph* graph : {&model.loss, &model.inference}) {
      EXPECT_TRUE(verify(graph->graph).is_ok()) << verify(graph->graph).message();
      EXPECT_EQ(graph->input_kinds.size(), graph->graph.inputs().size());
    }
    ASSERT_EQ(model.loss.graph.outputs().size(), 2u);
    EXPECT_EQ(model.loss.graph.outputs()[0]->type(), (TensorType{DType::f32, Shape{}}));
    ASSERT_EQ(model.inference.graph.outputs().size(), 1u);
    EXPECT_EQ(model.inference.graph.outputs()[0]->type(), model.loss.graph.outputs()[1]->type());
    EXPECT_FALSE(has_input(model.inference, "labels"));
    EXPECT_GT(model.parameter_count(), 0);
    EXPECT_GT(graph_flops(model.loss.graph), graph_flops(model.inference.graph));
  }
}

// BERT without token types or pooler, MLM head tied to the token embeddings: embeddings,
// layers (attention 4 x (H^2 + H), 2 layer norms, FFN 2 x 4H^2 + 5H), head (dense, norm, bias).
int64_t bert_parameters(int64_t layers, int64_t hidden, int64_t vocab) {
  const int64_t h = hidden;
  const int64_t embeddings = vocab * h + 512 * h + 2 * h;
  const int64_t layer = 4 * (h * h + h) + 2 * (2 * h) + (h * 4 * h + 4 * h) + (4 * h * h + h);
  const int64_t head = h * h + h + 2 * h + vocab;
  return embeddings + layers * layer + head;
}

TEST(Zoo, ParameterCountsMatchThePublishedModels) {
  // Hugging Face's BertForMaskedLM has 109,514,298 (base) and 335,174,458 (large) parameters,
  // including 2 x H token-type embeddings that the zoo's BERT does not have.
  EXPECT_EQ(bert_parameters(12, 768, 30522), 109'514'298 - 2 * 768);
  EXPECT_EQ(build("bert-base").parameter_count(), 109'514'298 - 2 * 768);
  EXPECT_EQ(build("bert-large").parameter_count(), 335'174'458 - 2 * 1024);
  EXPECT_EQ(build("bert-tiny").parameter_count(), bert_parameters(2, 128, 30522));
  // torchvision's resnet18 and resnet50; timm's vit_base_patch16_224 and deit_tiny_patch16_224.
  EXPECT_EQ(build("resnet-18").parameter_count(), 11'689'512);
  EXPECT_EQ(build("resnet-50").parameter_count(), 25'557'032);
  EXPECT_EQ(build("vit-base").parameter_count(), 86'567'656);
  EXPECT_EQ(build("vit-tiny").parameter_count(), 5'717'416);
  // By hand: 16x32 + 32, 32x32 + 32, 32x10 + 10.
  EXPECT_EQ(build("mlp-tiny").parameter_count(), 544 + 1056 + 330);
  // Cora-sized GCN: 1433x16 + 16 and 16x7 + 7.
  EXPECT_EQ(build("gcn-cora").parameter_count(), 1433 * 16 + 16 + 16 * 7 + 7);
  // XML-CNN tiny: embedding 1000x16, convolutions 8x16xk + 8 for k = 2, 4, 8, bottleneck
  // (3 x 8 x 4) x 32 + 32, output 32x64 + 64.
  EXPECT_EQ(build("xml-cnn-tiny").parameter_count(),
            16000 + (8 * 16 * 14 + 24) + (96 * 32 + 32) + (32 * 64 + 64));
}

TEST(Zoo, ResNetRunningStatisticsAreStateNotParameters) {
  ModelInstance model = build("resnet-tiny");
  ASSERT_TRUE(model.inputs.contains("stem.conv.bn.mean"));
  EXPECT_EQ(model.inputs.at("stem.conv.bn.mean").kind, InputKind::state);
  EXPECT_EQ(model.inputs.at("stem.conv.bn.scale").kind, InputKind::parameter);
  EXPECT_TRUE(has_input(model.inference, "stem.conv.bn.var"));
  EXPECT_FALSE(has_input(model.loss, "stem.conv.bn.var"));
}

// The tiny presets as the interpreter and the PyTorch cross-check run them.
struct TinyCase {
  std::string preset;
  ModelOptions options;
  double chance_loss;  // the loss of uninformed predictions: log(classes), or log 2 for BCE
};

std::vector<TinyCase> tiny_cases() {
  return {{"mlp-tiny", {}, std::log(10.0)},
          {"bert-tiny", {}, std::log(30522.0)},
          {"vit-tiny", {.image_size = 32}, std::log(1000.0)},
          {"resnet-tiny", {}, std::log(10.0)},
          {"xml-cnn-tiny", {}, std::log(2.0)},
          {"gcn-tiny", {}, std::log(4.0)}};
}

TEST(Zoo, TinyPresetsRunWithALossNearChance) {
  for (const TinyCase& tiny : tiny_cases()) {
    SCOPED_TRACE(tiny.preset);
    ModelInstance model = build(tiny.preset, tiny.options);
    Expected<std::vector<Array>> inputs = model.input_values(model.loss);
    ASSERT_TRUE(inputs) << inputs.status().message();
    Expected<std::vector<Array>> outputs = interpret(model.loss.graph, *inputs);
    ASSERT_TRUE(outputs) << outputs.status().message();
    const double loss = (*outputs)[0][0];
    EXPECT_TRUE(std::isfinite(loss));
    // Random weights predict little: the loss is within a factor 2 of chance.
    EXPECT_GT(loss, tiny.chance_loss / 2);
    EXPECT_LT(loss, tiny.chance_loss * 2);
  }
}

TEST(Zoo, InferenceGraphComputesTheLossGraphsLogitsWithoutBatchNorm) {
  for (const TinyCase& tiny : tiny_cases()) {
    if (tiny.preset == "resnet-tiny") continue;  // batch statistics versus running statistics
    SCOPED_TRACE(tiny.preset);
    ModelInstance model = build(tiny.preset, tiny.options);
    Expected<std::vector<Array>> loss_inputs = model.input_values(model.loss);
    Expected<std::vector<Array>> inference_inputs = model.input_values(model.inference);
    ASSERT_TRUE(loss_inputs && inference_inputs);
    Expected<std::vector<Array>> with_loss = interpret(model.loss.graph, *loss_inputs);
    Expected<std::vector<Array>> inference = interpret(model.inference.graph, *inference_inputs);
    ASSERT_TRUE(with_loss && inference);
    EXPECT_EQ((*with_loss)[1], (*inference)[0]);
  }
}

TEST(Zoo, ValuesDependOnlyOnSeedAndName) {
  ModelInstance a = build("bert-tiny", {.seed = 1});
  ModelInstance b = build("bert-tiny", {.batch = 3, .seed = 1});
  ModelInstance c = build("bert-tiny", {.seed = 2});
  for (const char* name : {"layer0.attn.wq", "embed.positions"}) {
    SCOPED_TRACE(name);
    Expected<Array> a_value = a.value(name);
    Expected<Array> b_value = b.value(name);
    Expected<Array> c_value = c.value(name);
    ASSERT_TRUE(a_value && b_value && c_value);
    EXPECT_EQ(*a_value, *b_value);
    EXPECT_NE(*a_value, *c_value);
  }
  // Different parameters of one model get different streams; data depends on the seed too.
  EXPECT_NE(*a.value("layer0.attn.wq"), *a.value("layer0.attn.wk"));
  EXPECT_NE(*a.value("tokens"), *c.value("tokens"));
}

TEST(Zoo, InitializationFollowsTheDocumentedRules) {
  ModelInstance model = build("bert-tiny");
  Expected<Array> weight = model.value("layer1.ffn.w1");
  Expected<Array> scale = model.value("layer1.ffn_norm.scale");
  Expected<Array> bias = model.value("layer1.ffn.b1");
  ASSERT_TRUE(weight && scale && bias);
  double sum_squares = 0;
  for (double v : weight->data) sum_squares += v * v;
  EXPECT_NEAR(std::sqrt(sum_squares / static_cast<double>(weight->size())), 0.02, 0.001);
  EXPECT_EQ(*scale, Array(DType::f32, Shape{128}, std::vector<double>(128, 1.0)));
  EXPECT_EQ(*bias, Array(DType::f32, Shape{512}));
  // Token ids are valid indices; about 15% of positions are predicted.
  ModelInstance big_batch = build("bert-tiny", {.batch = 64});
  Expected<Array> tokens = big_batch.value("tokens");
  Expected<Array> mask = big_batch.value("label_mask");
  ASSERT_TRUE(tokens && mask);
  for (double v : tokens->data) ASSERT_TRUE(v >= 0 && v < 30522 && v == std::floor(v)) << v;
  double masked = 0;
  for (double v : mask->data) masked += v;
  EXPECT_NEAR(masked / static_cast<double>(mask->size()), 0.15, 0.02);
}

TEST(Zoo, OptionsChangeShapes) {
  ModelInstance bert = build("bert-tiny", {.batch = 3, .seq_len = 7});
  EXPECT_EQ(bert.loss.graph.outputs()[1]->shape(), (Shape{3, 7, 30522}));
  ModelInstance vit = build("vit-tiny", {.image_size = 64});
  EXPECT_EQ(vit.inputs.at("pos_embed").type.shape, (Shape{1, 17, 192}));
  ModelInstance gcn = build("gcn-tiny", {.nodes = 100, .avg_degree = 2});
  EXPECT_EQ(gcn.loss.graph.outputs()[1]->shape(), (Shape{100, 4}));
}

TEST(Zoo, ErrorsNameThePresetAndOption) {
  auto error = [](std::string_view preset, const ModelOptions& options) {
    Expected<ModelInstance> model = build_model(preset, options);
    return model ? std::string("no error") : model.status().message();
  };
  EXPECT_EQ(error("bert-tiny", {.seq_len = 600}),
            "bert-tiny: seq_len 600 is longer than the 512 position embeddings");
  EXPECT_EQ(error("vit-tiny", {.image_size = 40}),
            "vit-tiny: image_size 40 is not a multiple of the patch size 16");
  EXPECT_EQ(error("xml-cnn-tiny", {.seq_len = 30}),
            "xml-cnn-tiny: seq_len 30 is not a multiple of the 4 pooling chunks");
  EXPECT_EQ(error("mlp-tiny", {.batch = 0}), "mlp-tiny: batch must be at least 1, got 0");
  EXPECT_EQ(error("gcn-tiny", {.nodes = 4, .avg_degree = 5}),
            "gcn-tiny: average degree 5 is more than a graph of 4 nodes can have");
  EXPECT_TRUE(error("gpt-5", {}).starts_with("unknown model 'gpt-5'; the zoo has mlp-tiny, "));
}

}  // namespace
}  // namespace kiln
