#include "target/target.h"

#include "target/cpu_target.h"
#include "target/cuda_target.h"

namespace kiln {

Expected<cost::DeviceProfile> Target::cost_profile(const CompileOptions& options) const {
  return cost::given_or_host_profile(options.fusion.profile);
}

const Target& target_for(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu:
      return cpu_target();
    case DeviceKind::cuda:
      return cuda_target();
    case DeviceKind::cuda_mapping_on_cpu:
      return cuda_mapping_on_cpu_target();
  }
  KILN_UNREACHABLE("device kind {}", static_cast<int>(kind));
}

}  // namespace kiln
