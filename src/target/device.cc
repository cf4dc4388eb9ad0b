#include "target/device.h"

#include <fmt/format.h>

#include <charconv>

namespace kiln {

std::string_view device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu:
      return "cpu";
    case DeviceKind::cuda:
      return "cuda";
    case DeviceKind::cuda_mapping_on_cpu:
      return "cuda-mapping-on-cpu";
  }
  return "?";
}

std::string device_name(const Device& device) {
  if (device.kind == DeviceKind::cpu) return "cpu";
  return fmt::format("{}:{}", device_kind_name(device.kind), device.ordinal);
}

Expected<Device> parse_device(std::string_view name) {
  const size_t colon = name.find(':');
  const std::string_view kind_name = name.substr(0, colon);
  Device device;
  if (kind_name == "cpu") {
    device.kind = DeviceKind::cpu;
  } else if (kind_name == "cuda") {
    device.kind = DeviceKind::cuda;
  } else if (kind_name == "cuda-mapping-on-cpu") {
    device.kind = DeviceKind::cuda_mapping_on_cpu;
  } else {
    return Status::errorf("unknown device '{}' (cpu, cuda, cuda:N, cuda-mapping-on-cpu)", name);
  }
  if (colon == std::string_view::npos) return device;
  const std::string_view ordinal = name.substr(colon + 1);
  const auto [end, error] =
      std::from_chars(ordinal.data(), ordinal.data() + ordinal.size(), device.ordinal);
  if (device.kind == DeviceKind::cpu || ordinal.empty() || error != std::errc() ||
      end != ordinal.data() + ordinal.size() || device.ordinal < 0) {
    return Status::errorf("device '{}': an ordinal is a GPU's number, as in cuda:1", name);
  }
  return device;
}

}  // namespace kiln
