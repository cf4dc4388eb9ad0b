// The prelude of every generated C++ translation unit: includes and the small inline
// functions generated kernels call where C++'s own operators differ from the loop IR's
// semantics (loop/expr.h). Each helper mirrors its counterpart in loop/scalar.cc, ir/dtype.cc
// or support/float16.cc, which are the executable specification; the code generator's tests
// hold them to it by comparing compiled kernels with the loop-IR evaluator.
//
//  - kiln_div / kiln_mod: floor division and its remainder, x / 0 = x % 0 = 0, and no trap
//    on INT_MIN / -1 (C++'s / and % truncate and trap).
//  - kiln_bool: the byte a bool element is stored in (an enum, not a character type, so its
//    stores do not alias every other buffer).
//  - kiln_select: select with both branches evaluated, as loop IR defines it (loop/expr.h).
//  - kiln_min / kiln_max: std::min / std::max (same choice between equal operands, so -0.0
//    and 0.0 come out as the evaluator's), NaN when either operand is NaN; kiln_min_scalar /
//    kiln_max_scalar compute the same without a branch, for code outside vector loops.
//  - kiln_fmod: floating x - y * floor(x / y), computed in double as the evaluator does.
//  - kiln_abs: integer absolute value that wraps instead of overflowing.
//  - kiln_to_i32 / kiln_to_i64: float-to-integer casts that truncate toward zero and saturate
//    (NaN becomes 0); kiln_clamp_i32: the saturating i64-to-i32 cast.
//  - kiln_round_f16 / kiln_round_bf16: rounding a value to f16 or bf16 (through f32, as
//    round_to_dtype does); kiln_half_bits / kiln_half_value and the bf16 pair convert
//    between the 16-bit storage of a buffer and the float that holds an f16 or bf16 value in
//    generated code.
//  - kiln_sigmoid, kiln_rsqrt: 1 / (1 + exp(-x)) and 1 / sqrt(x) in the argument's type.
//  - kiln_gemm: loop IR's gemm statement through oneDNN's sgemm or OpenBLAS's cblas_dgemm
//    (row-major, alpha 1, beta 0 or 1), with m, n <= 0 and k <= 0 handled before the call;
//    an f32 product deep for its width (kiln_gemm_prefers_matmul) goes to kiln_gemm_dnnl.
//  - kiln_gemm_bf16 / kiln_gemm_f16: mixed precision's gemm (16-bit operands and result,
//    f32 accumulation) through oneDNN's matmul primitive (kiln_matmul_dnnl), else kiln_gemm
//    on f32 copies where oneDNN has no kernel for the CPU; kiln_gemm_bf16_f32 /
//    kiln_gemm_f16_f32 likewise into an f32 C.
//  - kiln_gemm_dnnl: an f32 gemm as a oneDNN matmul primitive (kiln_matmul_dnnl, which takes
//    the operands' dtype), B read where it lies or, with a state, kept packed (loop/stmt.h)
//    in the layout oneDNN chooses for this machine, packed into the state on the first call.
//    The state starts with a header (a tag and B's address), so a state that is zero, or was
//    filled for another B, is packed again. It returns false, computing nothing, when oneDNN
//    refuses, offers only its slow reference implementation, or the packed B would not fit,
//    and the caller then calls kiln_gemm's sgemm.
//  - kiln_conv_dnnl: loop IR's conv statement as a oneDNN convolution primitive on
//    channels-last images, its weights reordered into oneDNN's layout (kept in the state
//    from the first call on, as a packed B is, when the statement names one). A conv marked
//    winograd runs oneDNN's Winograd kernels where it has one for the shape, on x and y copied
//    into and out of the blocked layout those take (at the state's end, else in buffers of
//    the call); else the direct convolution. It returns
//    false, computing nothing, where oneDNN declines or offers only its reference
//    implementation, and the caller then calls kiln_conv_direct, the evaluator's loops.
//  - kiln_conv_bf16 / kiln_conv_f16: mixed precision's conv (16-bit images, weights, bias
//    and output, f32 accumulation) through oneDNN's convolution of that dtype
//    (kiln_convolution_dnnl, which kiln_conv_dnnl calls for f32), else the f32 one on widened
//    copies where oneDNN has no kernel for the CPU (f16 without AVX512-FP16).
// The prelude includes OpenBLAS's cblas.h in every unit, not only in units with a gemm: it
// stays one constant text (like the flags, part of every cache key), the header costs a few
// milliseconds of a compile that takes hundreds, and every kernel library links OpenBLAS
// anyway (kernel_compiler.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "loop/stmt.h"

namespace kiln::codegen::cpu {

std::string_view cpu_prelude();

// A packed B's state starts with a header of kPackedBHeaderBytes: kiln_gemm_dnnl writes
// kPackedBTag ("kilnpack") in its first int64 once B is packed there, and B's address in the
// second.
inline constexpr int64_t kPackedBTag = 0x6b696c6e7061636b;
inline constexpr int64_t kPackedBHeaderBytes = 64;

// The bytes of a state for the conv call `conv`'s kiln_conv_dnnl: the header, and room
// for its weights [O, C/groups, taps...] in oneDNN's blocked layouts (as
// packed_b_state_bytes). Marked winograd, also room for the transformed 3x3 weights
// Winograd's kernels take (a 6x6 tile each for F(4x4, 3x3), the largest form oneDNN uses) and,
// at the state's end, for the copies of x and y in the blocked layout they take (channels
// padded to 16).
int64_t conv_state_bytes(const loop::LibraryCall& conv);

// The bytes of a state for kiln_gemm_dnnl with a k x n B: its header, and room for oneDNN's
// blocked layouts, which pad each dimension to a block of at most 64.
int64_t packed_b_state_bytes(int64_t k, int64_t n);

}  // namespace kiln::codegen::cpu
