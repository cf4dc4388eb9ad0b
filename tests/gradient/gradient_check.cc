#include "gradient/gradient_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "autodiff/gradients.h"
#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/builder.h"
#include "ir/verifier.h"

namespace kiln::testing {
namespace {

constexpr double kRelativeStep = 1e-6;
constexpr double kTolerance = 1e-6;

// The forward graph extended by one weight input per floating output and the weighted-sum
// loss as its only output, with the values of the weight inputs appended to `inputs`.
struct LossGraph {
  Graph graph;
  std::vector<Array> inputs;
  std::vector<std::string> wrt;  // names of the floating forward inputs
};

Expected<LossGraph> make_loss_graph(const Graph& forward, const std::vector<Array>& inputs,
                                    uint64_t seed) {
  LossGraph result{forward.clone(), inputs, {}};
  for (const Value* input : forward.inputs()) {
    if (is_floating(input->dtype())) result.wrt.push_back(input->name());
  }
  GraphBuilder b(result.graph);
  Value* loss = nullptr;
  for (size_t k = 0; k < forward.outputs().size(); ++k) {
    Value* output = result.graph.outputs()[k];
    if (!is_floating(output->dtype())) continue;
    Value* weight = b.input(fmt::format("loss_weight_{}", k), output->dtype(), output->shape());
    result.inputs.push_back(random_array(output->type(), seed + k));
    Value* term = b.sum(b.mul(output, weight), {});
    loss = loss == nullptr ? term : b.add(loss, term);
  }
  KILN_RETURN_IF_ERROR(b.status());
  if (loss == nullptr) return Status::error("the graph has no floating output");
  result.graph.set_outputs({loss});
  return result;
}

Expected<double> evaluate_loss(const LossGraph& loss, const std::vector<Array>& inputs) {
  KILN_ASSIGN_OR_RETURN(std::vector<Array> outputs, interpret(loss.graph, inputs));
  return outputs[0][0];
}

size_t input_index(const Graph& graph, const std::string& name) {
  const auto& inputs = graph.inputs();
  auto it = std::ranges::find_if(inputs, [&](const Value* v) { return v->name() == name; });
  return static_cast<size_t>(it - inputs.begin());
}

// Random draws `shape.num_elements()` normal values, for the shaping helpers below.
std::vector<double> normals(const Shape& shape, uint64_t seed) {
  return random_array({DType::f64, shape}, seed).data;
}

}  // namespace

Expected<std::vector<Array>> analytic_gradients(const Graph& forward,
                                                const std::vector<Array>& inputs, uint64_t seed) {
  KILN_ASSIGN_OR_RETURN(LossGraph loss, make_loss_graph(forward, inputs, seed));
  std::vector<Value*> wrt;
  for (const std::string& name : loss.wrt) wrt.push_back(loss.graph.find_value(name));
  KILN_ASSIGN_OR_RETURN(std::vector<Value*> grads,
                        build_gradients(loss.graph, loss.graph.outputs()[0], wrt));
  loss.graph.set_outputs(std::move(grads));
  KILN_RETURN_IF_ERROR(verify(loss.graph).with_context("gradient graph"));
  return interpret(loss.graph, loss.inputs);
}

Expected<std::vector<Array>> numeric_gradients(const Graph& forward,
                                               const std::vector<Array>& inputs, uint64_t seed) {
  KILN_ASSIGN_OR_RETURN(LossGraph loss, make_loss_graph(forward, inputs, seed));
  std::vector<Array> grads;
  std::vector<Array> perturbed = loss.inputs;
  for (const std::string& name : loss.wrt) {
    const size_t index = input_index(loss.graph, name);
    Array& x = perturbed[index];
    Array grad(x.dtype, x.shape);
    for (int64_t i = 0; i < x.size(); ++i) {
      const double original = x[i];
      const double step = kRelativeStep * std::max(1.0, std::fabs(original));
      x[i] = original + step;
      KILN_ASSIGN_OR_RETURN(const double above, evaluate_loss(loss, perturbed));
      x[i] = original - step;
      KILN_ASSIGN_OR_RETURN(const double below, evaluate_loss(loss, perturbed));
      x[i] = original;
      grad[i] = (above - below) / (2 * step);
    }
    grads.push_back(std::move(grad));
  }
  return grads;
}

::testing::AssertionResult gradients_match(const Expected<Graph>& forward,
                                           const std::vector<Array>& inputs) {
  if (!forward) return ::testing::AssertionFailure() << forward.status().message();
  Expected<std::vector<Array>> analytic = analytic_gradients(*forward, inputs);
  if (!analytic) return ::testing::AssertionFailure() << analytic.status().message();
  Expected<std::vector<Array>> numeric = numeric_gradients(*forward, inputs);
  if (!numeric) return ::testing::AssertionFailure() << numeric.status().message();
  std::vector<std::string> names;
  for (const Value* input : forward->inputs()) {
    if (is_floating(input->dtype())) names.push_back(input->name());
  }
  for (size_t k = 0; k < names.size(); ++k) {
    const Array& a = (*analytic)[k];
    const Array& n = (*numeric)[k];
    if (a.shape != n.shape) {
      return ::testing::AssertionFailure()
             << "gradient of %" << names[k] << " has shape " << a.shape.to_string() << ", expected "
             << n.shape.to_string();
    }
    for (int64_t i = 0; i < a.size(); ++i) {
      if (!(std::fabs(a[i] - n[i]) <= kTolerance * std::max(1.0, std::fabs(n[i])))) {
        return ::testing::AssertionFailure()
               << "gradient of %" << names[k] << " " << n.shape.to_string() << " at element " << i
               << ": autodiff " << a[i] << ", finite differences " << n[i];
      }
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult op_gradients_match(Op op, const std::vector<Array>& inputs,
                                              const Attrs& attrs) {
  GraphBuilder b(std::string(op_def(op).name));
  std::vector<Value*> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    values.push_back(b.input(fmt::format("in{}", i), inputs[i].dtype, inputs[i].shape));
  }
  for (Value* output : b.apply(op, values, attrs)) b.output(output);
  return gradients_match(b.finish(), inputs);
}

::testing::AssertionResult arrays_agree(const std::vector<Array>& actual,
                                        const std::vector<Array>& expected, double tolerance) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << actual.size() << " arrays, expected " << expected.size();
  }
  for (size_t k = 0; k < actual.size(); ++k) {
    if (actual[k].type() != expected[k].type()) {
      return ::testing::AssertionFailure()
             << "array " << k << " is " << actual[k].type().to_string() << ", expected "
             << expected[k].type().to_string();
    }
    for (int64_t i = 0; i < actual[k].size(); ++i) {
      const double a = actual[k][i];
      const double e = expected[k][i];
      if (!(std::fabs(a - e) <= tolerance * std::max(1.0, std::fabs(e)))) {
        return ::testing::AssertionFailure()
               << "array " << k << " element " << i << ": " << a << ", expected " << e;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

Array normal(Shape shape, uint64_t seed) { return random_array({DType::f64, shape}, seed); }

Array uniform(Shape shape, double lo, double hi, uint64_t seed) {
  std::vector<double> values = normals(shape, seed);
  // The normal CDF maps a standard normal to a uniform in (0, 1).
  for (double& v : values) v = lo + (hi - lo) * 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
  return Array(DType::f64, std::move(shape), std::move(values));
}

Array away_from_zero(Shape shape, uint64_t seed) {
  std::vector<double> values = normals(shape, seed);
  for (double& v : values) v = std::copysign(0.2 + std::fabs(v), v);
  return Array(DType::f64, std::move(shape), std::move(values));
}

Array distinct(Shape shape, uint64_t seed, double offset) {
  const std::vector<double> keys = normals(shape, seed);
  std::vector<size_t> order(keys.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::ranges::sort(order, [&](size_t i, size_t j) { return keys[i] < keys[j]; });
  std::vector<double> values(keys.size());
  const auto middle = static_cast<int64_t>(keys.size() / 2);
  for (size_t rank = 0; rank < order.size(); ++rank) {
    values[order[rank]] = 0.25 * static_cast<double>(static_cast<int64_t>(rank) - middle) + offset;
  }
  return Array(DType::f64, std::move(shape), std::move(values));
}

Array integers(Shape shape, int64_t range, uint64_t seed, DType dtype) {
  return random_array({dtype, std::move(shape)}, seed, range);
}

}  // namespace kiln::testing
