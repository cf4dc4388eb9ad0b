// MLP: a stack of dense layers with ReLU between them, classifying a feature vector; the loss
// is the mean cross-entropy against integer labels. For quick tests.
#include <fmt/ranges.h>

#include <cmath>

#include "models/presets.h"

namespace kiln {
namespace {

struct MlpConfig {
  std::vector<int64_t> widths;  // input features, hidden widths..., classes
  int64_t batch = 0;
};

Expected<std::vector<Value*>> build_mlp(ModelBuilder& m, const MlpConfig& config,
                                        const ModelOptions& options) {
  KILN_ASSIGN_OR_RETURN(const int64_t batch, size_option(options.batch, config.batch, "batch"));
  GraphBuilder& b = m.b();
  const int64_t classes = config.widths.back();
  Value* h = m.data("x", DType::f32, {batch, config.widths[0]}, normal_init(1));
  for (size_t i = 0; i + 1 < config.widths.size(); ++i) {
    if (i > 0) h = b.relu(h);
    const int64_t in = config.widths[i];
    const bool last = i + 2 == config.widths.size();
    h = dense(m, fmt::format("layer{}", i), h, in, config.widths[i + 1],
              fan_init(in, last ? 1.0 : std::sqrt(2.0)));
  }
  if (!m.is_loss()) return std::vector<Value*>{h};
  Value* labels = m.data("labels", DType::i64, {batch}, uniform_int_init(classes));
  return std::vector<Value*>{b.cross_entropy(h, labels), h};
}

Preset mlp_preset(std::string name, MlpConfig config) {
  std::string description =
      fmt::format("MLP {}, ReLU; batch {}", fmt::join(config.widths, "-"), config.batch);
  return {{std::move(name), "mlp", std::move(description)},
          [config](ModelBuilder& m, const ModelOptions& options) {
            return build_mlp(m, config, options);
          }};
}

}  // namespace

std::vector<Preset> mlp_presets() {
  return {mlp_preset("mlp-tiny", {{16, 32, 32, 10}, 4}),
          mlp_preset("mlp-mnist", {{784, 256, 256, 10}, 64})};
}

}  // namespace kiln
