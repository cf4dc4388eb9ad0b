#include "passes/precision.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ir/op.h"

namespace kiln {
namespace {

// The floating dtypes the pass moves between: f32 and the low dtype. Others are left alone.
bool is_policy_dtype(DType dtype) { return dtype == DType::f32 || is_low_precision(dtype); }

// f32 is wider than f16 and bf16; two different low dtypes meet in f32.
DType widest(DType a, DType b) { return a == b ? a : DType::f32; }

class PrecisionRewriter {
 public:
  PrecisionRewriter(const Graph& source, DType low, RunsInLowPrecision runs_low)
      : source_(source), low_(low), runs_low_(std::move(runs_low)), out_(source.name()) {}

  Expected<PrecisionSummary> run() {
    find_f32_demand();
    for (const Value* input : source_.inputs()) {
      Value* copy = out_.add_input(input->type(), input->name());
      map_[input] = copy;
      weight_like_[copy] = true;
    }
    for (const Node* node : source_.nodes()) KILN_RETURN_IF_ERROR(rewrite(*node));
    std::vector<Value*> outputs;
    for (const Value* output : source_.outputs()) {
      KILN_ASSIGN_OR_RETURN(Value * kept, keep_output_dtype(*output));
      outputs.push_back(kept);
    }
    out_.set_outputs(std::move(outputs));
    return summary_;
  }

  Graph take() { return std::move(out_); }

 private:
  // The dtype `node` computes in, from its policy and its (rewritten) floating inputs; nullopt
  // where the pass leaves its inputs as they are.
  std::optional<DType> compute_dtype(const Node& node, const std::vector<Value*>& inputs) const {
    std::vector<const Value*> floating;
    for (const Value* input : inputs) {
      if (is_floating(input->dtype())) floating.push_back(input);
    }
    if (node.op() == Op::cast || floating.empty()) return std::nullopt;
    for (const Value* input : floating) {
      if (!is_policy_dtype(input->dtype())) return std::nullopt;
    }
    switch (node.def().precision) {
      case PrecisionPolicy::low:
        return !runs_low_ || runs_low_(node.op()) ? low_ : DType::f32;
      case PrecisionPolicy::f32:
        return DType::f32;
      case PrecisionPolicy::follow:
        if (f32_demand_.contains(&node)) return DType::f32;
        break;
    }
    // The widest dtype of the operands that decide it: all but the broadcast parameters and
    // constants (a bias, a scalar), which are cast to it.
    int64_t largest = 0;
    for (const Value* input : floating) largest = std::max(largest, input->shape().num_elements());
    std::optional<DType> deciding, any;
    for (const Value* input : floating) {
      any = any ? widest(*any, input->dtype()) : input->dtype();
      if (!weight_like_.at(input) || input->shape().num_elements() == largest) {
        deciding = deciding ? widest(*deciding, input->dtype()) : input->dtype();
      }
    }
    return deciding ? deciding : any;
  }

  Status rewrite(const Node& node) {
    std::vector<Value*> inputs;
    for (const Value* input : node.inputs()) inputs.push_back(map_.at(input));
    bool weight_like = true;
    for (const Value* input : inputs) weight_like = weight_like && weight_like_.at(input);
    if (const std::optional<DType> dtype = compute_dtype(node, inputs)) {
      for (Value*& input : inputs) {
        if (is_floating(input->dtype()) && input->dtype() != *dtype) {
          KILN_ASSIGN_OR_RETURN(input, cast(input, *dtype));
        }
      }
    }
    std::vector<std::string> names;
    for (const Value* output : node.outputs()) names.push_back(output->name());
    KILN_ASSIGN_OR_RETURN(Node * copy,
                          out_.add_node(node.op(), std::move(inputs), node.attrs(), names));
    bool low = false;
    for (int i = 0; i < node.num_outputs(); ++i) {
      Value* output = copy->output(i);
      map_[node.output(i)] = output;
      weight_like_[output] = weight_like && node.def().precision == PrecisionPolicy::follow;
      low = low || is_low_precision(output->dtype());
    }
    if (low && node.op() != Op::cast) ++summary_.low_precision_nodes;
    return Status::ok();
  }

  // `value` cast to `dtype`, one cast per value and dtype however many nodes read it.
  Expected<Value*> cast(Value* value, DType dtype) {
    auto [it, inserted] = casts_.try_emplace({value, dtype}, nullptr);
    if (!inserted) return it->second;
    const std::string name = fmt::format("{}.{}", value->name(), dtype_name(dtype));
    KILN_ASSIGN_OR_RETURN(Node * node, out_.add_node(Op::cast, {value}, {{"to", dtype}},
                                                     std::vector<std::string>{name}));
    it->second = node->output();
    weight_like_[it->second] = weight_like_.at(value);
    ++summary_.casts_inserted;
    return it->second;
  }

  // The rewritten `output`, cast back to its dtype (and under its name) where it changed.
  Expected<Value*> keep_output_dtype(const Value& output) {
    Value* value = map_.at(&output);
    if (value->dtype() == output.dtype()) return value;
    out_.rename_value(value, fmt::format("{}.{}", output.name(), dtype_name(value->dtype())));
    KILN_ASSIGN_OR_RETURN(Node * node, out_.add_node(Op::cast, {value}, {{"to", output.dtype()}},
                                                     std::vector<std::string>{output.name()}));
    ++summary_.casts_inserted;
    return node->output();
  }

  // The follow nodes whose results reach only graph outputs of no low dtype (f32, f64, bool,
  // integers) and ops that compute in f32, through follow nodes alike: an optimizer's update of
  // an f32 parameter and its state from a gradient a low contraction made, a loss scale's
  // unscaling and its overflow test (whose verdict may keep an f64 step count), a scaling
  // before a softmax. They compute in f32, as the optimizer runs outside autocast's region: a
  // squared f16 gradient underflows to zero, Adam's update divides by its root, and a loss
  // scale of 65536 is infinite in f16.
  void find_f32_demand() {
    const std::span<Node* const> nodes = source_.nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      const Node& node = **it;
      if (node.def().precision != PrecisionPolicy::follow) continue;
      bool used = false, only_f32 = true;
      for (const Value* output : node.outputs()) {
        if (source_.is_output(output)) {
          used = true;
          only_f32 = only_f32 && !is_low_precision(output->dtype());
        }
        for (const Node* user : output->users()) {
          used = true;
          only_f32 = only_f32 && (user->def().precision == PrecisionPolicy::f32 ||
                                  f32_demand_.contains(user));
        }
      }
      if (used && only_f32) f32_demand_.insert(&node);
    }
  }

  const Graph& source_;
  const DType low_;
  const RunsInLowPrecision runs_low_;
  Graph out_;
  std::map<const Value*, Value*> map_;
  // Values computed from graph inputs and constants alone, through follow ops (a bias, its
  // reshape): cast down where they broadcast against a low activation, rather than lifting it
  // to f32.
  std::map<const Value*, bool> weight_like_;
  std::map<std::pair<Value*, DType>, Value*> casts_;
  std::set<const Node*> f32_demand_;
  PrecisionSummary summary_ = {.low = low_};
};

}  // namespace

std::string_view precision_name(Precision precision) {
  switch (precision) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "fp32";
}

Expected<Precision> parse_precision(std::string_view name) {
  for (Precision precision : kAllPrecisions) {
    if (precision_name(precision) == name) return precision;
  }
  return Status::errorf("unknown precision '{}' (fp32, tf32, bf16 or fp16)", name);
}

std::optional<DType> low_precision_dtype(Precision precision) {
  switch (precision) {
    case Precision::bf16: return DType::bf16;
    case Precision::fp16: return DType::f16;
    case Precision::fp32:
    case Precision::tf32: return std::nullopt;
  }
  return std::nullopt;
}

Expected<PrecisionSummary> apply_precision(Graph& graph, Precision precision,
                                           const RunsInLowPrecision& runs_low) {
  const std::optional<DType> low = low_precision_dtype(precision);
  if (!low) return PrecisionSummary{};
  PrecisionRewriter rewriter(graph, *low, runs_low);
  Expected<PrecisionSummary> summary = rewriter.run();
  if (!summary) {
    return summary.status().with_context(
        fmt::format("applying the {} precision policy", precision_name(precision)));
  }
  graph = rewriter.take();
  return *summary;
}

}  // namespace kiln
