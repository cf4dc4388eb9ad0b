// The GPU targets (target/target.h): CUDA, and the CUDA mapping compiled for this CPU.
#pragma once

#include "target/target.h"

namespace kiln {

const Target& cuda_target();
const Target& cuda_mapping_on_cpu_target();

}  // namespace kiln
