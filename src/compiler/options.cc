#include "compiler/options.h"

namespace kiln {

std::string_view stage_name(Stage stage) {
  switch (stage) {
#define KILN_STAGE_NAME(identifier, name) \
  case Stage::identifier:                 \
    return name;
    KILN_STAGES(KILN_STAGE_NAME)
#undef KILN_STAGE_NAME
  }
  return "?";
}

Expected<Stage> parse_stage(std::string_view name) {
  std::string names;
  for (const Stage stage : kStages) {
    if (stage_name(stage) == name) return stage;
    names += names.empty() ? "" : ", ";
    names += stage_name(stage);
  }
  return Status::errorf("unknown stage '{}' ({})", name, names);
}

}  // namespace kiln
