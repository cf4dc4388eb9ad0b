#include "compiler/options.h"

namespace kiln {

Expected<Device> parse_device(std::string_view name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  if (name == "cuda-mapping-on-cpu") return Device::cuda_mapping_on_cpu;
  return Status::errorf("unknown device '{}' (cpu, cuda, cuda-mapping-on-cpu)", name);
}

std::string_view stage_name(Stage stage) {
  switch (stage) {
    case Stage::verify:
      return "verify";
    case Stage::rewrite:
      return "rewrite";
    case Stage::substitute:
      return "substitute";
    case Stage::decompose:
      return "decompose";
    case Stage::layout:
      return "layout";
    case Stage::partition:
      return "partition";
    case Stage::lower:
      return "lower";
    case Stage::schedule:
      return "schedule";
    case Stage::scratch:
      return "scratch";
    case Stage::pack_weights:
      return "pack-weights";
    case Stage::share_kernels:
      return "share-kernels";
    case Stage::plan_memory:
      return "plan-memory";
    case Stage::codegen:
      return "codegen";
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
