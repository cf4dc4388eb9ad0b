// The one calling convention between generated kernels and the runtime.
//
//   extern "C" void kiln_kernel_N(void* const* buffers);
//
// buffers[i] is the base address of the kernel's i-th parameter. The code generator
// (codegen/cpu/emitter.h) defines the same type for the functions it emits; the runtime cannot
// include the code generator, so the type is written twice and the compiler library, which
// sees both, asserts that they are the same.
#pragma once

namespace kiln::runtime {

using KernelFunction = void (*)(void* const* buffers);

}  // namespace kiln::runtime
