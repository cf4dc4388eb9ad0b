// Model sources (driver/model_source.h): a file or zoo:NAME, the options that apply to each
// kind refused on the other with the option named, and the inputs each kind gives.
#include "driver/model_source.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace kiln {
namespace {

std::string example_file() {
  const char* source_dir = std::getenv("KILN_SOURCE_DIR");
  return std::string(source_dir != nullptr ? source_dir : ".") + "/examples/encoder_layer.kiln";
}

TEST(ModelSource, NamesAZooPresetByPrefix) {
  EXPECT_EQ(zoo_preset_of("zoo:bert-tiny"), "bert-tiny");
  EXPECT_EQ(zoo_preset_of("model.onnx"), std::nullopt);
  EXPECT_EQ(zoo_preset_of("./zoo/model.kiln"), std::nullopt);
}

TEST(ModelSource, LoadsAPresetsTrainingStepWithItsOwnInputs) {
  ModelSourceOptions options{.spec = "zoo:mlp-tiny"};
  options.graph.train = true;
  Expected<SourceModel> model = load_model_source(options);
  ASSERT_TRUE(model) << model.status().message();
  EXPECT_EQ(model->description.rfind("mlp-tiny training step (adam): ", 0), 0u)
      << model->description;
  std::vector<std::string> random;
  Expected<std::vector<Array>> inputs = model_inputs(*model, options, {}, random);
  ASSERT_TRUE(inputs) << inputs.status().message();
  EXPECT_EQ(inputs->size(), model->graph.inputs().size());
  EXPECT_TRUE(random.empty());
}

TEST(ModelSource, LoadsAFileWithRandomInputsWhereNoneAreGiven) {
  ModelSourceOptions options{.spec = example_file(), .seed = 3};
  Expected<SourceModel> model = load_model_source(options);
  ASSERT_TRUE(model) << model.status().message();
  EXPECT_NE(model->description.find("graph @encoder_layer: 13 inputs, 0 weights"),
            std::string::npos)
      << model->description;
  std::vector<std::string> random;
  Expected<std::vector<Array>> inputs = model_inputs(*model, options, {}, random);
  ASSERT_TRUE(inputs) << inputs.status().message();
  EXPECT_EQ(inputs->size(), 13u);
  EXPECT_EQ(random.size(), 13u);
  EXPECT_EQ(random.front(), "%x");
}

TEST(ModelSource, RefusesOptionsOfTheOtherKind) {
  ModelSourceOptions file{.spec = example_file()};
  file.zoo.batch = 4;
  Expected<SourceModel> with_batch = load_model_source(file);
  ASSERT_FALSE(with_batch);
  EXPECT_NE(with_batch.status().message().find("--batch applies to zoo presets"), std::string::npos)
      << with_batch.status().message();

  ModelSourceOptions preset{.spec = "zoo:mlp-tiny"};
  preset.shapes = {"x=1x2"};
  Expected<SourceModel> with_shape = load_model_source(preset);
  ASSERT_FALSE(with_shape);
  EXPECT_NE(with_shape.status().message().find("--shape applies to ONNX models"),
            std::string::npos);

  ModelSourceOptions unknown{.spec = "zoo:nope"};
  Expected<SourceModel> missing = load_model_source(unknown);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("unknown model 'nope'"), std::string::npos);

  ModelSourceOptions given_inputs{.spec = "zoo:mlp-tiny"};
  Expected<SourceModel> model = load_model_source(given_inputs);
  ASSERT_TRUE(model) << model.status().message();
  std::map<std::string, Array> given;
  given.emplace("x", Array(DType::f32, Shape({1})));
  std::vector<std::string> random;
  EXPECT_FALSE(model_inputs(*model, given_inputs, std::move(given), random));
}

TEST(ModelSource, FreezesAPresetsParameters) {
  ModelSourceOptions options{.spec = "zoo:mlp-tiny", .freeze = true};
  options.graph.inference = true;
  Expected<SourceModel> model = load_model_source(options);
  ASSERT_TRUE(model) << model.status().message();
  EXPECT_NE(model->description.find("inference graph (parameters frozen)"), std::string::npos);
  EXPECT_EQ(model->graph.inputs().size(), 1u);  // x alone: the weights are constants
  std::vector<std::string> random;
  Expected<std::vector<Array>> inputs = model_inputs(*model, options, {}, random);
  ASSERT_TRUE(inputs) << inputs.status().message();
  EXPECT_EQ(inputs->size(), 1u);
}

}  // namespace
}  // namespace kiln
