#include "target/gpu_profile.h"

namespace kiln::cost {

GpuProfile h100_sxm_profile() {
  return {.gpu = "NVIDIA H100 SXM",
          .architecture = "sm_90",
          .measured = false,
          .sms = 132,
          .l2_bytes = int64_t{50} << 20,
          .copy_bandwidth = 3.35e12,
          .f64_flops = 67e12,
          .f32_flops = 67e12,
          .tf32_flops = 494.7e12,
          .bf16_flops = 989.4e12,
          .f16_flops = 989.4e12,
          .launch_overhead = 3e-6,
          .graph_kernel_overhead = 1e-6};
}

GpuProfile h200_profile() {
  GpuProfile profile = h100_sxm_profile();
  profile.gpu = "NVIDIA H200";
  profile.copy_bandwidth = 4.8e12;
  return profile;
}

}  // namespace kiln::cost
