// A device a compilation is for: a kind and an ordinal, as the CUDA driver and PyTorch number
// the machine's GPUs ("cuda:1"). The kind decides what the compiler does (target/target.h);
// the ordinal only where the program runs, so caches key on the kind and the architecture,
// never on the ordinal.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln {

enum class DeviceKind : uint8_t {
  cpu,  // C++ for this CPU (the default schedule, OpenMP), compiled and loaded
  // CUDA for an NVIDIA GPU: each group mapped onto the GPU (loop/gpu_mapping.h), emitted as
  // CUDA C and compiled by NVRTC into a cubin (codegen/cuda), run by the CUDA executor
  // (runtime/cuda_executor.h); on a machine without a GPU, a compilation to read.
  cuda,
  // The GPU mapping's loop IR compiled for this CPU (GPU loops run serially): checks the
  // mapping against the interpreter on a machine without a GPU. Slow; for tests.
  cuda_mapping_on_cpu,
};

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int ordinal = 0;  // which GPU; 0 for the CPU

  bool operator==(const Device&) const = default;
};

// "cpu", "cuda", "cuda-mapping-on-cpu".
std::string_view device_kind_name(DeviceKind kind);

// "cpu", "cuda:1", "cuda-mapping-on-cpu:1" (an ordinal of 0 is written only for a GPU kind).
std::string device_name(const Device& device);

// The inverse of device_name, which also takes a GPU kind without an ordinal ("cuda": GPU 0).
Expected<Device> parse_device(std::string_view name);

}  // namespace kiln
