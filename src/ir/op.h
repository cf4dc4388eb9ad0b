// The op registry: one record per op holding everything Kiln knows about it.
//
// An OpDef names the op, documents its inputs, declares its attribute schema (with defaults),
// its fusion kind, and four functions: type inference, cost, reference evaluation and the
// gradient rule (or the reason the op has none). Later subsystems add fields here rather than
// keeping side tables, so adding an op touches: ops.def, its family file in ops/, its ONNX
// mapping and its tests. The one exception is the lowering to a loop-IR compute definition:
// it names loop-IR types, and kiln_ir sits below kiln_loop, so it lives in a table keyed by Op
// in loop/compute.h (families in loop/lowering/), whose test fails when an op has neither a
// definition nor a reason. tests/unit/ir/registry_test.cc fails when a record lacks a
// field.
//
// Semantics shared by all records:
//  - Type inference receives the input types and the node's canonical attributes (every schema
//    attribute present, defaults filled) and returns the output types or an error naming the
//    offending input or attribute. There is no implicit dtype promotion.
//  - Reference evaluation receives f64 Arrays (see ir/array.h), the attributes, and the output
//    types already inferred; it returns arrays rounded to the output dtypes. It may fail only on
//    data-dependent errors (an index out of range).
//  - The gradient rule (reverse mode, see autodiff/gradients.h) receives a builder appending to
//    the graph being differentiated, the forward node, and one gradient per node output (the
//    gradient of the loss with respect to that output, of its type; nullptr where the output
//    carries none, but never all of them). It returns one gradient per node input, of the input's type, built from
//    ordinary ops, or nullptr where the input gets none: integer and bool inputs (indices,
//    labels, conditions), and inputs of piecewise-constant ops, whose gradient is zero almost
//    everywhere. Builder errors are recorded in the builder, as for any builder call. An op
//    without a rule states why in `non_differentiable`; every op has exactly one of the two.
//  - The decomposition (composites only: softmax, log_softmax, layer_norm, batch_norm_train,
//    the losses) builds the node's outputs from primitive ops, one value per output, in the
//    very form the gradient rules use for the same statistics (a layer norm's centered input,
//    variance and reciprocal deviation), so that after decomposition common-subexpression
//    elimination shares them between forward and backward. passes/decompose.h applies it.
//  - The precision policy says how a mixed-precision compilation computes the op
//    (passes/precision.h), after torch.autocast's lists of ops.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/array.h"
#include "ir/attribute.h"
#include "ir/shape.h"
#include "support/status.h"

namespace kiln {

class GraphBuilder;
class Node;
class Value;

enum class Op : uint16_t {
#define KILN_OP(id, text) id,
#include "ir/ops.def"
#undef KILN_OP
};

inline constexpr int kNumOps = 0
#define KILN_OP(id, text) +1
#include "ir/ops.def"
#undef KILN_OP
    ;

// How an op may fuse with its neighbours, after TVM's op patterns.
enum class FusionKind {
  elementwise,  // out[i] = f(in[i]), same shapes
  broadcast,    // out[i] = f(in[broadcast(i)]), NumPy broadcasting
  injective,    // each output element reads one input element (layout, gather)
  reduction,    // reduces over axes or windows (sum, softmax, pooling)
  contraction,  // matmul, convolution: compute bound, library inner block
  opaque,       // anything else (scatter, gradients of windows)
};

std::string_view fusion_kind_name(FusionKind kind);

// Elementwise, broadcast and injective ops compute an output element from one element of each
// input: cheap to recompute where a consumer reads it, so lowering inlines them.
bool is_inlinable(FusionKind kind);
// Elementwise and broadcast ops read each input at the output's own index (a broadcast dim
// at 0): the ops that can run on a block of their input as it is produced.
bool reads_at_own_index(FusionKind kind);

struct AttrSpec {
  std::string name;
  AttrKind kind;
  std::optional<AttrValue> default_value;  // none: the attribute is required
  std::string doc;
};

// Work an op does: arithmetic operations and bytes of its inputs read and outputs written,
// assuming each is touched once (the unfused baseline the cost model refines).
struct Cost {
  double flops = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
};

using InferFn =
    std::function<Expected<std::vector<TensorType>>(std::span<const TensorType>, const Attrs&)>;
using CostFn = std::function<Cost(std::span<const TensorType> inputs,
                                  std::span<const TensorType> outputs, const Attrs&)>;
using EvalFn = std::function<Expected<std::vector<Array>>(
    std::span<const Array> inputs, const Attrs&, std::span<const TensorType> outputs)>;

using GradFn = std::function<std::vector<Value*>(GraphBuilder& builder, const Node& node,
                                                 std::span<Value* const> output_grads)>;

using DecomposeFn = std::function<std::vector<Value*>(GraphBuilder& builder, const Node& node)>;

// How an op computes under mixed precision (passes/precision.h).
enum class PrecisionPolicy : uint8_t {
  follow,  // in its operands' dtype (elementwise, layout, max and min): the default
  low,     // in the low dtype, accumulating in f32: matmul and the convolutions
  f32,     // in f32 whatever its operands: sums and means, exp and log, softmax, the
           // normalizations and losses, where bf16's 8 bits of precision would show
};

inline constexpr int kVariadic = -1;

struct OpDef {
  Op op{};
  std::string name;
  std::string summary;  // one line, shown by `kiln ops`
  FusionKind fusion_kind = FusionKind::opaque;
  // Input names, for documentation and error messages. A variadic op lists one name and sets
  // max_inputs = kVariadic.
  std::vector<std::string> input_names;
  int min_inputs = 0;
  int max_inputs = 0;
  std::vector<AttrSpec> attrs;
  InferFn infer;
  CostFn cost;
  EvalFn eval;
  GradFn gradient;                 // empty for ops that are not differentiable, which then say
  std::string non_differentiable;  // why here (e.g. "output is bool")
  DecomposeFn decompose;           // composites only; empty for primitives
  PrecisionPolicy precision = PrecisionPolicy::follow;
  // A collective (all_reduce, broadcast): its value depends on every rank's, so the
  // interpreter and the compiled program run it through a communicator (comm/communicator.h),
  // the program as a step of its own. It is never fused, folded or lowered into a kernel; its
  // reference evaluation is a world of one's, where it is the identity.
  bool collective = false;

  const AttrSpec* find_attr(std::string_view attr_name) const;
};

const OpDef& op_def(Op op);
const OpDef* find_op(std::string_view name);  // nullptr if unknown
std::span<const OpDef> all_op_defs();         // in ops.def order

// Validates `given` against the op's schema: unknown names and wrong kinds are errors, required
// attributes must be present, defaults are filled in. The result lists the schema's attributes
// in schema order.
Expected<Attrs> canonicalize_attrs(const OpDef& def, const Attrs& given);

// Checks arity, then runs the op's inference. `attrs` must be canonical.
Expected<std::vector<TensorType>> infer_types(const OpDef& def, std::span<const TensorType> inputs,
                                              const Attrs& attrs);

}  // namespace kiln
