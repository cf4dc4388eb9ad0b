// ONNX export (see onnx_export.h): one export rule per Kiln op, listed in a table at the end of
// this file that must name every op exactly once (checked at compile time).
#include "frontend/onnx_export.h"

#include <fmt/format.h>
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <numbers>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "frontend/onnx_tensor.h"
#include "support/check.h"

namespace kiln {
namespace {

// ---- building the ONNX graph ------------------------------------------------------------------

// The ONNX graph under construction and the tensor names taken in it.
class Exporter {
 public:
  explicit Exporter(onnx::GraphProto& graph) : graph_(graph) {}

  onnx::GraphProto& graph() { return graph_; }

  // Takes `name` as it is (a Kiln value's name); false if it is taken already.
  bool claim(const std::string& name) { return taken_.insert(name).second; }

  // A tensor name nobody has taken: `base`, else `base.1`, `base.2`, ...
  std::string fresh(std::string_view base) {
    std::string name(base);
    for (int i = 1; !taken_.insert(name).second; ++i) name = fmt::format("{}.{}", base, i);
    return name;
  }

  // Adds an initializer holding `value`; returns its name.
  std::string initializer(std::string_view base, const Array& value) {
    std::string name = fresh(base);
    *graph_.add_initializer() = tensor_proto_from_array(name, value);
    return name;
  }

  std::string scalar(std::string_view base, DType dtype, double value) {
    return initializer(base, Array::scalar(dtype, value));
  }

  // A 1-d int64 initializer, written from the integers themselves (an Array holds doubles,
  // which are exact only up to 2^53).
  std::string ints(std::string_view base, const std::vector<int64_t>& values) {
    std::string name = fresh(base);
    onnx::TensorProto& tensor = *graph_.add_initializer();
    tensor.set_name(name);
    tensor.set_data_type(onnx::TensorProto::INT64);
    tensor.add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) tensor.add_int64_data(v);
    return name;
  }

  // Appends a node named after its first output.
  onnx::NodeProto& node(std::string_view op_type, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs) {
    onnx::NodeProto& node = *graph_.add_node();
    node.set_op_type(std::string(op_type));
    node.set_name(outputs.at(0));
    for (const std::string& input : inputs) node.add_input(input);
    for (const std::string& output : outputs) node.add_output(output);
    return node;
  }

  // A node computing an intermediate tensor, named from `base`; returns the tensor's name.
  std::string apply(std::string_view op_type, const std::vector<std::string>& inputs,
                    std::string_view base) {
    return node(op_type, inputs, {fresh(base)}).output(0);
  }

 private:
  onnx::GraphProto& graph_;
  std::unordered_set<std::string> taken_;
};

void set_int(onnx::NodeProto& node, std::string_view name, int64_t value) {
  onnx::AttributeProto& attr = *node.add_attribute();
  attr.set_name(std::string(name));
  attr.set_type(onnx::AttributeProto::INT);
  attr.set_i(value);
}

void set_float(onnx::NodeProto& node, std::string_view name, double value) {
  onnx::AttributeProto& attr = *node.add_attribute();
  attr.set_name(std::string(name));
  attr.set_type(onnx::AttributeProto::FLOAT);
  attr.set_f(static_cast<float>(value));
}

void set_ints(onnx::NodeProto& node, std::string_view name, const std::vector<int64_t>& values) {
  onnx::AttributeProto& attr = *node.add_attribute();
  attr.set_name(std::string(name));
  attr.set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) attr.add_ints(v);
}

void set_string(onnx::NodeProto& node, std::string_view name, std::string_view value) {
  onnx::AttributeProto& attr = *node.add_attribute();
  attr.set_name(std::string(name));
  attr.set_type(onnx::AttributeProto::STRING);
  attr.set_s(std::string(value));
}

void set_tensor(onnx::NodeProto& node, std::string_view name, onnx::TensorProto value) {
  onnx::AttributeProto& attr = *node.add_attribute();
  attr.set_name(std::string(name));
  attr.set_type(onnx::AttributeProto::TENSOR);
  *attr.mutable_t() = std::move(value);
}

void set_type(onnx::ValueInfoProto& info, const std::string& name, const TensorType& type) {
  info.set_name(name);
  onnx::TypeProto::Tensor& tensor = *info.mutable_type()->mutable_tensor_type();
  tensor.set_elem_type(onnx_from_dtype(type.dtype));
  onnx::TensorShapeProto& shape = *tensor.mutable_shape();  // present even for a scalar
  for (int64_t dim : type.shape.dims()) shape.add_dim()->set_dim_value(dim);
}

// ---- what converters read from a Kiln node ------------------------------------------------------

const std::string& input(const Node& node, int i) { return node.input(i)->name(); }
const std::string& output(const Node& node) { return node.output()->name(); }

std::vector<std::string> inputs(const Node& node) {
  std::vector<std::string> names;
  for (const Value* value : node.inputs()) names.push_back(value->name());
  return names;
}

std::vector<std::string> outputs(const Node& node) {
  std::vector<std::string> names;
  for (const Value* value : node.outputs()) names.push_back(value->name());
  return names;
}

// The name a converter gives the tensors it adds: "<output>/<what>".
std::string temp(const Node& node, std::string_view what) {
  return fmt::format("{}/{}", output(node), what);
}

std::vector<int64_t> spatial_dims(const Shape& shape) {
  return std::vector<int64_t>(shape.dims().begin() + 2, shape.dims().end());
}

// A per-spatial-dim attribute of conv or pooling; an empty list means `count` times `fill`.
std::vector<int64_t> per_dim(const Attrs& attrs, std::string_view name, size_t count,
                             int64_t fill) {
  std::vector<int64_t> values = attrs.get_ints(name);
  if (values.empty()) values.assign(count, fill);
  return values;
}

// ---- converters -------------------------------------------------------------------------------

using ExportFn = Status (*)(Exporter&, const Node&);

// An ONNX op type as a template argument: direct<"Neg">.
template <size_t N>
struct OnnxOp {
  constexpr OnnxOp(const char (&text)[N]) { std::copy_n(text, N, chars); }  // NOLINT
  std::string_view view() const { return {chars, N - 1}; }
  char chars[N];
};

// The ONNX op of the same meaning, same inputs and outputs, no attributes.
template <OnnxOp kOnnx>
Status direct(Exporter& ex, const Node& node) {
  ex.node(kOnnx.view(), inputs(node), outputs(node));
  return Status::ok();
}

Status export_rsqrt(Exporter& ex, const Node& node) {
  const std::string root = ex.apply("Sqrt", {input(node, 0)}, temp(node, "sqrt"));
  ex.node("Reciprocal", {root}, {output(node)});
  return Status::ok();
}

// 0.5 * x * (1 + erf(x / sqrt(2))), or with the tanh form's gate
// tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)): the reference evaluation's arithmetic, in its
// order (ONNX has Gelu only from opset 20).
Status export_gelu(Exporter& ex, const Node& node) {
  const std::string& x = input(node, 0);
  const DType dtype = node.input(0)->dtype();
  const auto constant = [&](std::string_view what, double value) {
    return ex.scalar(temp(node, what), dtype, value);
  };
  std::string gate;
  if (node.attrs().get_string("approximate") == "tanh") {
    std::string cubic =
        ex.apply("Mul", {x, constant("coefficient", 0.044715)}, temp(node, "cubic"));
    cubic = ex.apply("Mul", {cubic, x}, temp(node, "cubic"));
    cubic = ex.apply("Mul", {cubic, x}, temp(node, "cubic"));
    const std::string inner = ex.apply("Add", {x, cubic}, temp(node, "inner"));
    const std::string scaled =
        ex.apply("Mul", {inner, constant("sqrt_2_over_pi", std::sqrt(2.0 / std::numbers::pi))},
                 temp(node, "scaled"));
    gate = ex.apply("Tanh", {scaled}, temp(node, "tanh"));
  } else {
    const std::string scaled =
        ex.apply("Div", {x, constant("sqrt2", std::numbers::sqrt2)}, temp(node, "scaled"));
    gate = ex.apply("Erf", {scaled}, temp(node, "erf"));
  }
  const std::string one_plus = ex.apply("Add", {gate, constant("one", 1)}, temp(node, "one_plus"));
  const std::string half_x = ex.apply("Mul", {x, constant("half", 0.5)}, temp(node, "half_x"));
  ex.node("Mul", {half_x, one_plus}, {output(node)});
  return Status::ok();
}

Status export_cast(Exporter& ex, const Node& node) {
  onnx::NodeProto& cast = ex.node("Cast", {input(node, 0)}, {output(node)});
  set_int(cast, "to", onnx_from_dtype(node.attrs().get_dtype("to")));
  return Status::ok();
}

// Less, LessOrEqual, Greater, GreaterOrEqual. ONNX orders numbers only, so bools are compared
// as 0 and 1 in i32, as Kiln compares them.
template <OnnxOp kOnnx>
Status compare(Exporter& ex, const Node& node) {
  std::vector<std::string> operands = inputs(node);
  if (node.input(0)->dtype() == DType::boolean) {
    for (std::string& operand : operands) {
      onnx::NodeProto& cast = ex.node("Cast", {operand}, {ex.fresh(temp(node, "as_int"))});
      set_int(cast, "to", onnx::TensorProto::INT32);
      operand = cast.output(0);
    }
  }
  ex.node(kOnnx.view(), operands, outputs(node));
  return Status::ok();
}

// mod: ONNX Mod, except the floored remainder of floats, which ONNX defines only for integers:
// r = fmod(a, b), plus b where r is non-zero and its sign differs from b's.
Status export_mod(Exporter& ex, const Node& node) {
  const std::string& a = input(node, 0);
  const std::string& b = input(node, 1);
  const DType dtype = node.input(0)->dtype();
  const bool fmod = node.attrs().get_bool("fmod");
  if (fmod || !is_floating(dtype)) {
    set_int(ex.node("Mod", {a, b}, {output(node)}), "fmod", fmod ? 1 : 0);
    return Status::ok();
  }
  onnx::NodeProto& truncated = ex.node("Mod", {a, b}, {ex.fresh(temp(node, "fmod"))});
  set_int(truncated, "fmod", 1);
  const std::string& r = truncated.output(0);
  const std::string zero = ex.scalar(temp(node, "zero"), dtype, 0);
  const std::string r_is_zero = ex.apply("Equal", {r, zero}, temp(node, "r_is_zero"));
  const std::string r_nonzero = ex.apply("Not", {r_is_zero}, temp(node, "r_nonzero"));
  const std::string r_negative = ex.apply("Less", {r, zero}, temp(node, "r_negative"));
  const std::string b_negative = ex.apply("Less", {b, zero}, temp(node, "b_negative"));
  const std::string signs_differ =
      ex.apply("Xor", {r_negative, b_negative}, temp(node, "signs_differ"));
  const std::string shift = ex.apply("And", {r_nonzero, signs_differ}, temp(node, "shift"));
  const std::string shifted = ex.apply("Add", {r, b}, temp(node, "shifted"));
  ex.node("Where", {shift, shifted, r}, {output(node)});
  return Status::ok();
}

// Reduce*: ReduceSum takes its axes as an input at opset 17, the others as an attribute. An
// empty list (every axis) is left out, which means every axis in ONNX too.
template <OnnxOp kOnnx, bool kAxesAsInput>
Status reduce(Exporter& ex, const Node& node) {
  const std::vector<int64_t>& axes = node.attrs().get_ints("axes");
  std::vector<std::string> operands = {input(node, 0)};
  if (kAxesAsInput && !axes.empty()) operands.push_back(ex.ints(temp(node, "axes"), axes));
  onnx::NodeProto& reduction = ex.node(kOnnx.view(), operands, {output(node)});
  if (!kAxesAsInput && !axes.empty()) set_ints(reduction, "axes", axes);
  set_int(reduction, "keepdims", node.attrs().get_bool("keepdims") ? 1 : 0);
  return Status::ok();
}

template <OnnxOp kOnnx>
Status arg_reduce(Exporter& ex, const Node& node) {
  onnx::NodeProto& reduction = ex.node(kOnnx.view(), {input(node, 0)}, {output(node)});
  set_int(reduction, "axis", node.attrs().get_int("axis"));
  set_int(reduction, "keepdims", node.attrs().get_bool("keepdims") ? 1 : 0);
  set_int(reduction, "select_last_index", node.attrs().get_bool("select_last_index") ? 1 : 0);
  return Status::ok();
}

Status export_constant(Exporter& ex, const Node& node) {
  onnx::NodeProto& constant = ex.node("Constant", {}, {output(node)});
  set_tensor(constant, "value",
             tensor_proto_from_array(output(node), node.attrs().get_tensor("value")));
  return Status::ok();
}

Status export_reshape(Exporter& ex, const Node& node) {
  const std::vector<int64_t>& dims = node.output()->shape().dims();
  onnx::NodeProto& reshape =
      ex.node("Reshape", {input(node, 0), ex.ints(temp(node, "shape"), dims)}, {output(node)});
  // ONNX reads a 0 in the shape as "the input's extent" unless allowzero is set.
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) set_int(reshape, "allowzero", 1);
  return Status::ok();
}

Status export_transpose(Exporter& ex, const Node& node) {
  std::vector<int64_t> perm = node.attrs().get_ints("perm");
  if (perm.empty()) {
    for (int i = node.input(0)->rank() - 1; i >= 0; --i) perm.push_back(i);
  }
  onnx::NodeProto& transpose = ex.node("Transpose", {input(node, 0)}, {output(node)});
  // An empty INTS attribute reads as a missing one; a scalar needs no permutation anyway.
  if (!perm.empty()) set_ints(transpose, "perm", perm);
  return Status::ok();
}

Status export_broadcast_to(Exporter& ex, const Node& node) {
  ex.node("Expand", {input(node, 0), ex.ints(temp(node, "shape"), node.output()->shape().dims())},
          {output(node)});
  return Status::ok();
}

// Slice has ONNX's own semantics. Bounds are clamped to [-(dim + 1), dim] and steps to
// [-dim, dim] (never 0) first, which selects the same elements and keeps every value small.
Status export_slice(Exporter& ex, const Node& node) {
  const Attrs& attrs = node.attrs();
  const Shape& shape = node.input(0)->shape();
  std::vector<int64_t> starts = attrs.get_ints("starts");
  std::vector<int64_t> ends = attrs.get_ints("ends");
  std::vector<int64_t> axes = attrs.get_ints("axes");
  std::vector<int64_t> steps = attrs.get_ints("steps");
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  for (size_t i = 0; i < starts.size(); ++i) {
    if (axes[i] < 0) axes[i] += shape.rank();
    const int64_t dim = shape.dim(static_cast<int>(axes[i]));
    starts[i] = std::clamp<int64_t>(starts[i], -dim - 1, dim);
    ends[i] = std::clamp<int64_t>(ends[i], -dim - 1, dim);
    const int64_t max_step = std::max<int64_t>(dim, 1);
    steps[i] = std::clamp<int64_t>(steps[i], -max_step, max_step);
  }
  ex.node("Slice",
          {input(node, 0), ex.ints(temp(node, "starts"), starts), ex.ints(temp(node, "ends"), ends),
           ex.ints(temp(node, "axes"), axes), ex.ints(temp(node, "steps"), steps)},
          {output(node)});
  return Status::ok();
}

Status export_concat(Exporter& ex, const Node& node) {
  set_int(ex.node("Concat", inputs(node), {output(node)}), "axis", node.attrs().get_int("axis"));
  return Status::ok();
}

Status export_split(Exporter& ex, const Node& node) {
  const std::string sizes = ex.ints(temp(node, "sizes"), node.attrs().get_ints("sizes"));
  set_int(ex.node("Split", {input(node, 0), sizes}, outputs(node)), "axis",
          node.attrs().get_int("axis"));
  return Status::ok();
}

Status export_pad(Exporter& ex, const Node& node) {
  const std::string pads = ex.ints(temp(node, "pads"), node.attrs().get_ints("pads"));
  const std::string value =
      ex.scalar(temp(node, "value"), node.input(0)->dtype(), node.attrs().get_float("value"));
  set_string(ex.node("Pad", {input(node, 0), pads, value}, {output(node)}), "mode", "constant");
  return Status::ok();
}

Status export_gather(Exporter& ex, const Node& node) {
  set_int(ex.node("Gather", inputs(node), {output(node)}), "axis", node.attrs().get_int("axis"));
  return Status::ok();
}

// scatter_add is ScatterND with reduction "add" on data whose indexed axis is moved first: each
// index (non-negative, as int64, with a trailing axis of 1) then names one slice of data, and
// the updates, with their index dims moved first, hold one slice per index.
Status export_scatter_add(Exporter& ex, const Node& node) {
  const Shape& data = node.input(0)->shape();
  const int rank = data.rank();
  const int index_rank = node.input(1)->rank();
  const int axis = *normalize_axis(node.attrs().get_int("axis"), rank);
  // Data axes with `axis` first; update axes with the index dims first.
  std::vector<int64_t> data_perm = {axis};
  std::vector<int64_t> update_perm;
  for (int i = 0; i < index_rank; ++i) update_perm.push_back(axis + i);
  for (int i = 0; i < rank; ++i) {
    if (i == axis) continue;
    data_perm.push_back(i);
    update_perm.push_back(i < axis ? i : i - 1 + index_rank);
  }
  std::vector<int64_t> inverse(data_perm.size());
  for (size_t i = 0; i < data_perm.size(); ++i) {
    inverse[static_cast<size_t>(data_perm[i])] = static_cast<int64_t>(i);
  }
  const auto transpose = [&](const std::string& value, const std::vector<int64_t>& perm,
                             std::string_view what) {
    onnx::NodeProto& moved = ex.node("Transpose", {value}, {ex.fresh(temp(node, what))});
    set_ints(moved, "perm", perm);
    return moved.output(0);
  };
  const bool move = axis != 0;
  const std::string moved_data =
      move ? transpose(input(node, 0), data_perm, "data") : input(node, 0);
  const std::string moved_updates =
      move ? transpose(input(node, 2), update_perm, "updates") : input(node, 2);

  onnx::NodeProto& cast = ex.node("Cast", {input(node, 1)}, {ex.fresh(temp(node, "indices"))});
  set_int(cast, "to", onnx::TensorProto::INT64);
  const std::string& indices = cast.output(0);
  const std::string negative = ex.apply(
      "Less", {indices, ex.scalar(temp(node, "zero"), DType::i64, 0)}, temp(node, "negative"));
  const std::string wrapped = ex.apply(
      "Add",
      {indices, ex.scalar(temp(node, "extent"), DType::i64, static_cast<double>(data.dim(axis)))},
      temp(node, "wrapped"));
  const std::string resolved =
      ex.apply("Where", {negative, wrapped, indices}, temp(node, "resolved"));
  const std::string tuples = ex.apply(
      "Unsqueeze", {resolved, ex.ints(temp(node, "tuple_axis"), {-1})}, temp(node, "tuples"));

  onnx::NodeProto& scatter = ex.node("ScatterND", {moved_data, tuples, moved_updates},
                                     {move ? ex.fresh(temp(node, "scattered")) : output(node)});
  set_string(scatter, "reduction", "add");
  if (move) set_ints(ex.node("Transpose", {scatter.output(0)}, {output(node)}), "perm", inverse);
  return Status::ok();
}

Status export_one_hot(Exporter& ex, const Node& node) {
  const Attrs& attrs = node.attrs();
  const std::string depth =
      ex.scalar(temp(node, "depth"), DType::i64, static_cast<double>(attrs.get_int("depth")));
  const std::string values = ex.initializer(
      temp(node, "values"), Array(attrs.get_dtype("dtype"), Shape{2},
                                  {attrs.get_float("off_value"), attrs.get_float("on_value")}));
  set_int(ex.node("OneHot", {input(node, 0), depth, values}, {output(node)}), "axis",
          attrs.get_int("axis"));
  return Status::ok();
}

// iota: Range(0, extent) in i64 along the counted axis, viewed as [1, .., extent, .., 1] and
// expanded to the whole shape, then cast to the dtype when it is not i64.
Status export_iota(Exporter& ex, const Node& node) {
  const Shape& shape = node.output()->shape();
  const DType dtype = node.output()->dtype();
  const int axis = *normalize_axis(node.attrs().get_int("axis"), shape.rank());
  const double extent = static_cast<double>(shape.dim(axis));
  const bool spread = shape.rank() > 1;
  const bool cast = dtype != DType::i64;
  const std::string range_name = spread || cast ? ex.fresh(temp(node, "range")) : output(node);
  std::string counted = ex.node("Range",
                                {ex.scalar(temp(node, "start"), DType::i64, 0),
                                 ex.scalar(temp(node, "limit"), DType::i64, extent),
                                 ex.scalar(temp(node, "delta"), DType::i64, 1)},
                                {range_name})
                            .output(0);
  if (spread) {
    std::vector<int64_t> view(static_cast<size_t>(shape.rank()), 1);
    view[static_cast<size_t>(axis)] = shape.dim(axis);
    const std::string viewed =
        ex.apply("Reshape", {counted, ex.ints(temp(node, "view_shape"), view)}, temp(node, "view"));
    counted = ex.node("Expand", {viewed, ex.ints(temp(node, "shape"), shape.dims())},
                      {cast ? ex.fresh(temp(node, "expanded")) : output(node)})
                  .output(0);
  }
  if (cast) set_int(ex.node("Cast", {counted}, {output(node)}), "to", onnx_from_dtype(dtype));
  return Status::ok();
}

Status export_fill(Exporter& ex, const Node& node) {
  const Attrs& attrs = node.attrs();
  const DType dtype = attrs.get_dtype("dtype");
  const double value = attrs.get_float("value");
  const std::string shape = ex.ints(temp(node, "shape"), attrs.get_ints("shape"));
  if (dtype == DType::bf16) {
    // ConstantOfShape has no bf16 before opset 20; a bf16 scalar expanded says the same.
    ex.node("Expand", {ex.scalar(temp(node, "value"), dtype, value), shape}, {output(node)});
    return Status::ok();
  }
  onnx::NodeProto& fill = ex.node("ConstantOfShape", {shape}, {output(node)});
  set_tensor(fill, "value", tensor_proto_from_array("value", Array(dtype, Shape{1}, {value})));
  return Status::ok();
}

// matmul: Gemm when both operands are matrices and one is transposed, else MatMul after
// Transposes of the last two dims of the transposed operands.
Status export_matmul(Exporter& ex, const Node& node) {
  const bool transpose_a = node.attrs().get_bool("transpose_a");
  const bool transpose_b = node.attrs().get_bool("transpose_b");
  if ((transpose_a || transpose_b) && node.input(0)->rank() == 2 && node.input(1)->rank() == 2) {
    onnx::NodeProto& gemm = ex.node("Gemm", inputs(node), {output(node)});
    set_int(gemm, "transA", transpose_a ? 1 : 0);
    set_int(gemm, "transB", transpose_b ? 1 : 0);
    return Status::ok();
  }
  std::vector<std::string> operands = inputs(node);
  for (int i = 0; i < 2; ++i) {
    if (!(i == 0 ? transpose_a : transpose_b)) continue;
    const int rank = node.input(i)->rank();
    std::vector<int64_t> perm;
    for (int axis = 0; axis < rank; ++axis) perm.push_back(axis);
    std::swap(perm[static_cast<size_t>(rank - 2)], perm[static_cast<size_t>(rank - 1)]);
    onnx::NodeProto& transpose =
        ex.node("Transpose", {operands[static_cast<size_t>(i)]},
                {ex.fresh(temp(node, i == 0 ? "a_transposed" : "b_transposed"))});
    set_ints(transpose, "perm", perm);
    operands[static_cast<size_t>(i)] = transpose.output(0);
  }
  ex.node("MatMul", operands, {output(node)});
  return Status::ok();
}

// The window attributes conv and conv_grad_data share, all given explicitly.
void set_conv_attrs(onnx::NodeProto& conv, const Attrs& attrs, const Shape& w) {
  const size_t spatial = static_cast<size_t>(w.rank() - 2);
  set_ints(conv, "kernel_shape", spatial_dims(w));
  set_ints(conv, "strides", per_dim(attrs, "strides", spatial, 1));
  set_ints(conv, "pads", per_dim(attrs, "pads", 2 * spatial, 0));
  set_ints(conv, "dilations", per_dim(attrs, "dilations", spatial, 1));
  set_int(conv, "group", attrs.get_int("groups"));
}

Status export_conv(Exporter& ex, const Node& node) {
  set_conv_attrs(ex.node("Conv", inputs(node), {output(node)}), node.attrs(),
                 node.input(1)->shape());
  return Status::ok();
}

// conv_grad_data is ConvTranspose of grad_out by the same weight. ConvTranspose's natural
// output extent is stride * (in - 1) + dilated kernel - pads; conv's floor division can have
// dropped up to stride - 1 trailing input positions, which output_padding restores.
Status export_conv_grad_data(Exporter& ex, const Node& node) {
  const Attrs& attrs = node.attrs();
  const Shape& grad_out = node.input(0)->shape();
  const Shape& w = node.input(1)->shape();
  const Shape& x = node.output()->shape();
  const size_t spatial = static_cast<size_t>(x.rank() - 2);
  const std::vector<int64_t> strides = per_dim(attrs, "strides", spatial, 1);
  const std::vector<int64_t> pads = per_dim(attrs, "pads", 2 * spatial, 0);
  const std::vector<int64_t> dilations = per_dim(attrs, "dilations", spatial, 1);
  std::vector<int64_t> output_padding;
  for (size_t i = 0; i < spatial; ++i) {
    const int d = static_cast<int>(i) + 2;
    const int64_t natural = strides[i] * (grad_out.dim(d) - 1) + (w.dim(d) - 1) * dilations[i] + 1 -
                            pads[i] - pads[i + spatial];
    output_padding.push_back(x.dim(d) - natural);
    KILN_CHECK(output_padding.back() >= 0 && output_padding.back() < strides[i],
               "conv_grad_data input_shape {} does not match its grad_out {}", x.to_string(),
               grad_out.to_string());
  }
  onnx::NodeProto& conv = ex.node("ConvTranspose", inputs(node), {output(node)});
  set_conv_attrs(conv, attrs, w);
  set_ints(conv, "output_padding", output_padding);
  return Status::ok();
}

// max_pool and avg_pool: floor-mode windows, padding never counted by max.
Status export_pool(Exporter& ex, const Node& node, std::string_view onnx_op) {
  const Attrs& attrs = node.attrs();
  const size_t spatial = static_cast<size_t>(node.input(0)->rank() - 2);
  onnx::NodeProto& pool = ex.node(onnx_op, {input(node, 0)}, {output(node)});
  set_ints(pool, "kernel_shape", attrs.get_ints("kernel"));
  set_ints(pool, "strides", per_dim(attrs, "strides", spatial, 1));
  set_ints(pool, "pads", per_dim(attrs, "pads", 2 * spatial, 0));
  if (const AttrValue* include_pad = attrs.find("count_include_pad")) {
    set_int(pool, "count_include_pad", include_pad->as_bool() ? 1 : 0);
  }
  return Status::ok();
}

Status export_max_pool(Exporter& ex, const Node& node) { return export_pool(ex, node, "MaxPool"); }
Status export_avg_pool(Exporter& ex, const Node& node) {
  return export_pool(ex, node, "AveragePool");
}

template <OnnxOp kOnnx>
Status softmax(Exporter& ex, const Node& node) {
  set_int(ex.node(kOnnx.view(), {input(node, 0)}, {output(node)}), "axis",
          node.attrs().get_int("axis"));
  return Status::ok();
}

Status export_layer_norm(Exporter& ex, const Node& node) {
  onnx::NodeProto& norm = ex.node("LayerNormalization", inputs(node), {output(node)});
  set_int(norm, "axis", node.attrs().get_int("axis"));
  set_float(norm, "epsilon", node.attrs().get_float("epsilon"));
  return Status::ok();
}

Status export_batch_norm_infer(Exporter& ex, const Node& node) {
  set_float(ex.node("BatchNormalization", inputs(node), {output(node)}), "epsilon",
            node.attrs().get_float("epsilon"));
  return Status::ok();
}

// batch_norm_train: BatchNormalization in training mode with momentum 0, whose running
// statistics are then exactly the batch's mean and (biased) variance; the running statistics
// it is given are zeros that momentum 0 ignores.
Status export_batch_norm_train(Exporter& ex, const Node& node) {
  const TensorType stats = node.output(1)->type();
  const Array zeros(stats.dtype, stats.shape);
  const std::string mean = ex.initializer(temp(node, "input_mean"), zeros);
  const std::string var = ex.initializer(temp(node, "input_var"), zeros);
  onnx::NodeProto& norm =
      ex.node("BatchNormalization", {input(node, 0), input(node, 1), input(node, 2), mean, var},
              outputs(node));
  set_float(norm, "epsilon", node.attrs().get_float("epsilon"));
  set_float(norm, "momentum", 0.0);
  set_int(norm, "training_mode", 1);
  return Status::ok();
}

Status export_dropout(Exporter& ex, const Node& node) {
  const double ratio = node.attrs().get_float("ratio");
  if (ratio != 0) {
    return Status::errorf(
        "dropout with ratio {} has no ONNX export: its mask comes from Kiln's counter-based RNG "
        "(seed, offset), which no ONNX op reproduces; only ratio 0 (the identity) exports",
        ratio);
  }
  ex.node("Identity", {input(node, 0)}, {output(node)});
  return Status::ok();
}

// cross_entropy and nll_loss take scores [..., C]; ONNX's losses take [N, C, d1, ...] with
// labels [N, d1, ...]. Rank 2 is both; higher ranks move the class axis to 1; rank 1 (one
// position) becomes a batch of one, and its unreduced loss is reshaped back to a scalar.
template <OnnxOp kOnnx>
Status class_loss(Exporter& ex, const Node& node) {
  const Shape& shape = node.input(0)->shape();
  const int rank = shape.rank();
  std::string scores = input(node, 0);
  std::string labels = input(node, 1);
  if (rank == 1) {
    scores = ex.apply("Reshape", {scores, ex.ints(temp(node, "batch_shape"), {1, shape.dim(0)})},
                      temp(node, "scores"));
    labels = ex.apply("Reshape", {labels, ex.ints(temp(node, "label_shape"), {1})},
                      temp(node, "labels"));
  } else if (rank > 2) {
    std::vector<int64_t> perm = {0, rank - 1};
    for (int axis = 1; axis < rank - 1; ++axis) perm.push_back(axis);
    onnx::NodeProto& transpose = ex.node("Transpose", {scores}, {ex.fresh(temp(node, "scores"))});
    set_ints(transpose, "perm", perm);
    scores = transpose.output(0);
  }
  const std::string& reduction = node.attrs().get_string("reduction");
  const bool unbatch = rank == 1 && reduction == "none";
  onnx::NodeProto& loss = ex.node(kOnnx.view(), {scores, labels},
                                  {unbatch ? ex.fresh(temp(node, "losses")) : output(node)});
  set_string(loss, "reduction", reduction);
  if (unbatch) {
    ex.node("Reshape", {loss.output(0), ex.ints(temp(node, "scalar_shape"), {})}, {output(node)});
  }
  return Status::ok();
}

// binary_cross_entropy: max(z, 0) - z * t + softplus(-|z|) per element, the reference's stable
// form (ONNX's Softplus is log(exp(x) + 1)), then ReduceSum or ReduceMean over every axis.
Status export_binary_cross_entropy(Exporter& ex, const Node& node) {
  const std::string& z = input(node, 0);
  const std::string& t = input(node, 1);
  const std::string positive = ex.apply("Relu", {z}, temp(node, "positive"));
  const std::string product = ex.apply("Mul", {z, t}, temp(node, "product"));
  const std::string difference = ex.apply("Sub", {positive, product}, temp(node, "difference"));
  const std::string magnitude = ex.apply("Abs", {z}, temp(node, "magnitude"));
  const std::string negated = ex.apply("Neg", {magnitude}, temp(node, "negated"));
  const std::string softplus = ex.apply("Softplus", {negated}, temp(node, "softplus"));
  const std::string& reduction = node.attrs().get_string("reduction");
  if (reduction == "none") {
    ex.node("Add", {difference, softplus}, {output(node)});
    return Status::ok();
  }
  const std::string losses = ex.apply("Add", {difference, softplus}, temp(node, "losses"));
  set_int(ex.node(reduction == "sum" ? "ReduceSum" : "ReduceMean", {losses}, {output(node)}),
          "keepdims", 0);
  return Status::ok();
}

// ---- the table --------------------------------------------------------------------------------

struct ExportRule {
  Op op;
  ExportFn convert;                // nullptr: the op has no ONNX export, because...
  std::string_view no_export_why;  // ...of this
};

constexpr ExportRule exported(Op op, ExportFn convert) { return {op, convert, {}}; }
constexpr ExportRule not_exported(Op op, std::string_view why) { return {op, nullptr, why}; }

constexpr ExportRule kRules[] = {
    // Elementwise unary
    exported(Op::neg, &direct<"Neg">),
    exported(Op::abs, &direct<"Abs">),
    exported(Op::exp, &direct<"Exp">),
    exported(Op::log, &direct<"Log">),
    exported(Op::sqrt, &direct<"Sqrt">),
    exported(Op::rsqrt, &export_rsqrt),
    exported(Op::reciprocal, &direct<"Reciprocal">),
    exported(Op::tanh, &direct<"Tanh">),
    exported(Op::sigmoid, &direct<"Sigmoid">),
    exported(Op::relu, &direct<"Relu">),
    exported(Op::gelu, &export_gelu),
    exported(Op::erf, &direct<"Erf">),
    exported(Op::sin, &direct<"Sin">),
    exported(Op::cos, &direct<"Cos">),
    exported(Op::floor, &direct<"Floor">),
    exported(Op::ceil, &direct<"Ceil">),
    exported(Op::round, &direct<"Round">),
    exported(Op::sign, &direct<"Sign">),
    exported(Op::logical_not, &direct<"Not">),
    exported(Op::cast, &export_cast),
    exported(Op::identity, &direct<"Identity">),
    // Elementwise binary and ternary
    exported(Op::add, &direct<"Add">),
    exported(Op::sub, &direct<"Sub">),
    exported(Op::mul, &direct<"Mul">),
    exported(Op::div, &direct<"Div">),
    exported(Op::pow, &direct<"Pow">),
    exported(Op::max, &direct<"Max">),
    exported(Op::min, &direct<"Min">),
    exported(Op::mod, &export_mod),
    exported(Op::equal, &direct<"Equal">),
    exported(Op::less, &compare<"Less">),
    exported(Op::less_equal, &compare<"LessOrEqual">),
    exported(Op::greater, &compare<"Greater">),
    exported(Op::greater_equal, &compare<"GreaterOrEqual">),
    exported(Op::logical_and, &direct<"And">),
    exported(Op::logical_or, &direct<"Or">),
    exported(Op::logical_xor, &direct<"Xor">),
    exported(Op::where, &direct<"Where">),
    // Reductions
    exported(Op::reduce_sum, &reduce<"ReduceSum", true>),
    exported(Op::reduce_mean, &reduce<"ReduceMean", false>),
    exported(Op::reduce_max, &reduce<"ReduceMax", false>),
    exported(Op::reduce_min, &reduce<"ReduceMin", false>),
    exported(Op::reduce_prod, &reduce<"ReduceProd", false>),
    exported(Op::argmax, &arg_reduce<"ArgMax">),
    exported(Op::argmin, &arg_reduce<"ArgMin">),
    // Layout and data movement
    exported(Op::constant, &export_constant),
    exported(Op::reshape, &export_reshape),
    exported(Op::transpose, &export_transpose),
    exported(Op::broadcast_to, &export_broadcast_to),
    exported(Op::slice, &export_slice),
    exported(Op::concat, &export_concat),
    exported(Op::split, &export_split),
    exported(Op::pad, &export_pad),
    exported(Op::gather, &export_gather),
    exported(Op::scatter_add, &export_scatter_add),
    exported(Op::one_hot, &export_one_hot),
    exported(Op::iota, &export_iota),
    exported(Op::fill, &export_fill),
    // Contractions
    exported(Op::matmul, &export_matmul),
    exported(Op::conv, &export_conv),
    exported(Op::conv_grad_data, &export_conv_grad_data),
    not_exported(Op::conv_grad_weight, "ONNX has no convolution weight-gradient op"),
    not_exported(Op::conv_channels_last,
                 "ONNX's Conv takes channels first (Kiln's CPU layout stage makes this op)"),
    not_exported(Op::spmm, "ONNX has no sparse (CSR) matrix product"),
    // Pooling
    exported(Op::max_pool, &export_max_pool),
    exported(Op::avg_pool, &export_avg_pool),
    not_exported(Op::max_pool_grad, "ONNX has no pooling gradient op"),
    not_exported(Op::avg_pool_grad, "ONNX has no pooling gradient op"),
    // Composites
    exported(Op::softmax, &softmax<"Softmax">),
    exported(Op::log_softmax, &softmax<"LogSoftmax">),
    exported(Op::layer_norm, &export_layer_norm),
    exported(Op::batch_norm_train, &export_batch_norm_train),
    exported(Op::batch_norm_infer, &export_batch_norm_infer),
    exported(Op::dropout, &export_dropout),
    exported(Op::cross_entropy, &class_loss<"SoftmaxCrossEntropyLoss">),
    exported(Op::binary_cross_entropy, &export_binary_cross_entropy),
    exported(Op::nll_loss, &class_loss<"NegativeLogLikelihoodLoss">),
    // Collectives
    not_exported(Op::all_reduce, "ONNX has no collectives between processes"),
    not_exported(Op::broadcast, "ONNX has no collectives between processes"),
};

consteval bool every_op_has_one_rule() {
  for (int op = 0; op < kNumOps; ++op) {
    int rules = 0;
    for (const ExportRule& rule : kRules) rules += static_cast<int>(rule.op) == op ? 1 : 0;
    if (rules != 1) return false;
  }
  return std::size(kRules) == static_cast<size_t>(kNumOps);
}
static_assert(every_op_has_one_rule(), "every Kiln op needs exactly one ONNX export rule");

const ExportRule& rule_for(Op op) {
  const auto* rule = std::find_if(std::begin(kRules), std::end(kRules),
                                  [op](const ExportRule& r) { return r.op == op; });
  KILN_CHECK(rule != std::end(kRules), "op '{}' has no export rule", op_def(op).name);
  return *rule;
}

// ---- the model --------------------------------------------------------------------------------

Status export_inputs(const Graph& graph, const OnnxExportOptions& options, Exporter& ex) {
  std::set<std::string> used;
  for (const Value* value : graph.inputs()) {
    auto it = options.initializers.find(value->name());
    if (it == options.initializers.end()) {
      set_type(*ex.graph().add_input(), value->name(), value->type());
      continue;
    }
    const Array& array = it->second;
    if (array.type() != value->type() || array.size() != array.shape.num_elements()) {
      return Status::errorf(
          "the initializer for input '{}' is {} with {} elements; the input is {}", value->name(),
          array.type().to_string(), array.size(), value->type().to_string());
    }
    *ex.graph().add_initializer() = tensor_proto_from_array(value->name(), array);
    used.insert(value->name());
  }
  for (const auto& [name, array] : options.initializers) {
    if (!used.contains(name)) {
      return Status::errorf("an initializer is given for '{}', which is not an input of the graph",
                            name);
    }
  }
  return Status::ok();
}

Status export_nodes(const Graph& graph, Exporter& ex) {
  for (const Node* node : graph.nodes()) {
    const ExportRule& rule = rule_for(node->op());
    Status status = rule.convert != nullptr ? rule.convert(ex, *node)
                                            : Status::errorf("op '{}' has no ONNX export: {}",
                                                             node->op_name(), rule.no_export_why);
    if (!status) return status.with_context(fmt::format("node '{}'", output(*node)));
  }
  return Status::ok();
}

// Graph outputs, and value_info for every other value nodes compute. ONNX lists each output
// name once, computed by a node: a graph input returned as it is, or a value returned twice,
// goes through an Identity.
void export_outputs(const Graph& graph, Exporter& ex) {
  std::unordered_set<std::string> output_names;
  for (const Value* value : graph.outputs()) {
    std::string name = value->name();
    if (value->is_graph_input() || output_names.contains(name)) {
      name = ex.apply("Identity", {name}, name);
    }
    output_names.insert(name);
    set_type(*ex.graph().add_output(), name, value->type());
  }
  for (const Node* node : graph.nodes()) {
    for (const Value* value : node->outputs()) {
      if (!output_names.contains(value->name())) {
        set_type(*ex.graph().add_value_info(), value->name(), value->type());
      }
    }
  }
}

// ONNX's checker, then its shape inference in strict mode: types checked against each op's
// schema, and inferred shapes and types merged with the declared ones (any difference is an
// error). What another runtime would check; it also declares the converters' intermediates.
Status check_and_infer(onnx::ModelProto& model) {
  try {
    onnx::checker::check_model(model);
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type_val=*/true,
                                                                   /*strict_mode_val=*/1));
  } catch (const std::exception& error) {
    return Status::errorf("the exported model fails ONNX's checks: {}", error.what());
  }
  return Status::ok();
}

Expected<onnx::ModelProto> build_model(const Graph& graph, const OnnxExportOptions& options) {
  if (graph.outputs().empty()) return Status::error("the graph has no outputs");
  onnx::ModelProto model;
  model.set_ir_version(kOnnxExportIrVersion);
  model.set_producer_name("kiln");
  onnx::OperatorSetIdProto& opset = *model.add_opset_import();
  opset.set_domain("");
  opset.set_version(kOnnxExportOpset);
  onnx::GraphProto& proto = *model.mutable_graph();
  proto.set_name(graph.name());

  Exporter ex(proto);
  // Kiln names first, so that no name a converter makes up takes one of them.
  for (const Value* value : graph.inputs()) {
    KILN_CHECK(ex.claim(value->name()), "value name '{}' is not unique", value->name());
  }
  for (const Node* node : graph.nodes()) {
    for (const Value* value : node->outputs()) {
      KILN_CHECK(ex.claim(value->name()), "value name '{}' is not unique", value->name());
    }
  }
  KILN_RETURN_IF_ERROR(export_inputs(graph, options, ex));
  KILN_RETURN_IF_ERROR(export_nodes(graph, ex));
  export_outputs(graph, ex);
  KILN_RETURN_IF_ERROR(check_and_infer(model));
  return model;
}

Status write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::errorf("{}: cannot open for writing: {}", path, std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return Status::errorf("{}: write error", path);
  return Status::ok();
}

}  // namespace

Expected<std::string> export_onnx(const Graph& graph, const OnnxExportOptions& options) {
  KILN_ASSIGN_OR_RETURN(onnx::ModelProto model, build_model(graph, options));
  std::string bytes;
  if (!model.SerializeToString(&bytes)) {
    return Status::error("the model is too large for one protobuf message (2 GiB)");
  }
  return bytes;
}

Expected<std::string> export_onnx(const ImportedModel& model, const OnnxExportOptions& options) {
  const std::vector<Value*>& inputs = model.graph.inputs();
  if (model.num_data_inputs < 0 ||
      static_cast<size_t>(model.num_data_inputs) + model.weights.size() != inputs.size()) {
    return Status::errorf("the model has {} inputs, not {} data inputs plus {} weights",
                          inputs.size(), model.num_data_inputs, model.weights.size());
  }
  OnnxExportOptions merged = options;
  for (size_t i = 0; i < model.weights.size(); ++i) {
    merged.initializers.emplace(inputs[static_cast<size_t>(model.num_data_inputs) + i]->name(),
                                model.weights[i]);
  }
  return export_onnx(model.graph, merged);
}

Status export_onnx_file(const Graph& graph, const std::string& path,
                        const OnnxExportOptions& options) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, export_onnx(graph, options));
  return write_file(path, bytes);
}

Status export_onnx_file(const ImportedModel& model, const std::string& path,
                        const OnnxExportOptions& options) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, export_onnx(model, options));
  return write_file(path, bytes);
}

bool has_onnx_export(Op op) { return rule_for(op).convert != nullptr; }

}  // namespace kiln
