// The zoo's registry entries, one list per model family (each in its own file: mlp.cc,
// bert.cc, vit.cc, resnet.cc, xml_cnn.cc, gcn.cc); model.cc joins them. Internal to
// kiln_models: users go through build_model (models/model.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "models/layers.h"
#include "models/model.h"

namespace kiln {

struct Preset {
  PresetInfo info;
  // Builds one graph of the model into `m` and returns its outputs (the loss then the logits
  // for GraphKind::loss, the logits for GraphKind::inference), or says which option does not
  // fit the preset.
  std::function<Expected<std::vector<Value*>>(ModelBuilder& m, const ModelOptions& options)> build;
};

std::vector<Preset> mlp_presets();
std::vector<Preset> bert_presets();
std::vector<Preset> vit_presets();
std::vector<Preset> resnet_presets();
std::vector<Preset> xml_cnn_presets();
std::vector<Preset> gcn_presets();

// An option's value, or the preset's default; errors when it is below `minimum`, naming the
// option.
Expected<int64_t> size_option(const std::optional<int64_t>& value, int64_t default_value,
                              std::string_view option, int64_t minimum = 1);

}  // namespace kiln
