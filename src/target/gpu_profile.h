// The GPU a cost estimate is for, beside the CPU's cost::DeviceProfile: what a roofline of GPU
// kernels needs (the copy bandwidth, the arithmetic rate of each precision, the fixed cost of a
// launch and of a kernel in a replayed CUDA graph, the SMs and the L2).
//
// Until Kiln measures a GPU (the GPU-performance issue: a profile measured on the GPU and
// cached, as the CPU's is), the profiles here are the published figures of NVIDIA's H100 SXM
// and H200 datasheets (dense tensor-core rates, without sparsity), and say so (`measured` is
// false); the launch costs are typical figures, not a datasheet's. The partitioner prices GPU
// kernels with the host CPU's profile until then (target/target.h).
#pragma once

#include <cstdint>
#include <string>

namespace kiln::cost {

struct GpuProfile {
  std::string gpu;           // "NVIDIA H100 SXM"
  std::string architecture;  // "sm_90", as NVRTC is asked for it
  bool measured = false;     // false: published figures
  int sms = 0;               // streaming multiprocessors
  int64_t l2_bytes = 0;
  double copy_bandwidth = 0;         // bytes/s moved (read + written) by a device-to-device copy
  double f64_flops = 0;              // flop/s on tensor cores where the GPU has them
  double f32_flops = 0;              // flop/s on CUDA cores (no tensor cores for f32)
  double tf32_flops = 0;             // flop/s of f32 products on tensor cores (TF32)
  double bf16_flops = 0;             // flop/s with f32 accumulation
  double f16_flops = 0;              // flop/s with f32 accumulation
  double launch_overhead = 0;        // seconds per kernel launched on its own
  double graph_kernel_overhead = 0;  // seconds per kernel of a replayed CUDA graph

  bool operator==(const GpuProfile&) const = default;
};

// The published figures of an H100 SXM (80 GB HBM3) and of an H200 (141 GB HBM3e, the same
// SMs at more bandwidth).
GpuProfile h100_sxm_profile();
GpuProfile h200_profile();

}  // namespace kiln::cost
