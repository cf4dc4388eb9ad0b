// The prelude of every generated CUDA translation unit, compiled by NVRTC with no headers:
// fixed-width integer types, and the device functions generated kernels call where CUDA's own
// operators differ from the loop IR's semantics (loop/expr.h). Each mirrors its CPU
// counterpart (codegen/cpu/prelude.h lists what they do); the CUDA-only parts are
//  - kiln_exp, kiln_log, ...: the math function of the argument's type (expf for float), so
//    that an f32 computation never goes through double;
//  - kiln_block_reduce: a block's threads combining one value each (warp shuffles, then
//    shared memory), for the reductions a block computes together;
//  - kiln_gemm_f32 / kiln_gemm_f64: the launches for loop IR's gemm statement, a 16 x 16
//    shared-memory tile per block. A library GEMM (cuBLASLt) is the faster choice and needs a
//    GPU to choose and check it.
#pragma once

#include <string_view>

namespace kiln::codegen::cuda {

std::string_view cuda_prelude();

}  // namespace kiln::codegen::cuda
