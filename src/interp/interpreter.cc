#include "interp/interpreter.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "comm/communicator.h"
#include "ir/printer.h"
#include "support/check.h"

namespace kiln {
namespace {

// A collective's value on this rank: its input reduced, or broadcast, over the ranks through
// the process's communicator, in f64 as the interpreter computes everything, then rounded to
// the output's dtype. In a world of one this is the op's reference evaluation, the identity.
Expected<std::vector<Array>> evaluate_collective(const Node& node, std::span<const Array> args) {
  Array value = args[0];
  comm::Communicator& comm = comm::default_communicator();
  if (node.op() == Op::all_reduce) {
    KILN_ASSIGN_OR_RETURN(comm::Reduction reduction,
                          comm::parse_reduction(node.attrs().get_string("reduction")));
    KILN_RETURN_IF_ERROR(
        comm.all_reduce(value.data.data(), value.size(), comm::DataType::f64, reduction));
  } else {
    KILN_CHECK(node.op() == Op::broadcast, "collective op '{}' is not interpreted",
               node.op_name());
    const auto root = static_cast<int>(
        std::min<int64_t>(node.attrs().get_int("root"), std::numeric_limits<int>::max()));
    KILN_RETURN_IF_ERROR(comm.broadcast(
        value.data.data(), value.size() * static_cast<int64_t>(sizeof(double)), root));
  }
  value.round_to_dtype();
  return std::vector<Array>{std::move(value)};
}

Expected<std::vector<Array>> evaluate(const Node& node, std::span<const Array> args) {
  if (node.def().collective) return evaluate_collective(node, args);
  return node.def().eval(args, node.attrs(), node.output_types());
}

}  // namespace

Expected<std::vector<Array>> interpret(const Graph& graph, std::span<const Array> inputs,
                                       const InterpreterOptions& options) {
  if (inputs.size() != graph.inputs().size()) {
    return Status::errorf("graph '{}' takes {} inputs, got {}", graph.name(),
                          graph.inputs().size(), inputs.size());
  }
  // Remaining uses of each value; graph outputs hold one extra use so they are never released.
  std::unordered_map<const Value*, int> remaining_uses;
  for (const Node* node : graph.nodes()) {
    for (const Value* input : node->inputs()) ++remaining_uses[input];
  }
  for (const Value* output : graph.outputs()) ++remaining_uses[output];

  std::unordered_map<const Value*, Array> live;
  int64_t live_elements = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value* input = graph.inputs()[i];
    if (inputs[i].type() != input->type()) {
      return Status::errorf("input %{} expects {}, got {}", input->name(),
                            input->type().to_string(), inputs[i].type().to_string());
    }
    if (remaining_uses[input] == 0) continue;  // unused: never held
    live.emplace(input, inputs[i]);
    live_elements += inputs[i].size();
  }

  for (const Node* node : graph.nodes()) {
    int64_t new_elements = 0;
    for (const Value* output : node->outputs()) new_elements += output->shape().num_elements();
    if (live_elements + new_elements > options.max_live_elements) {
      return Status::errorf(
          "node %{} ({}): the reference interpreter would hold {} elements at once, above its "
          "limit of {}",
          node->output()->name(), node->op_name(), live_elements + new_elements,
          options.max_live_elements);
    }
    std::vector<Array> args;
    args.reserve(node->inputs().size());
    for (const Value* input : node->inputs()) args.push_back(live.at(input));
    Expected<std::vector<Array>> results = evaluate(*node, args);
    if (!results) {
      return results.status().with_context(fmt::format("node {}", print_node(*node)));
    }
    for (int i = 0; i < node->num_outputs(); ++i) {
      live.emplace(node->output(i), std::move((*results)[static_cast<size_t>(i)]));
    }
    live_elements += new_elements;
    for (const Value* input : node->inputs()) {
      if (--remaining_uses[input] == 0) {
        live_elements -= live.at(input).size();
        live.erase(input);
      }
    }
    for (const Value* output : node->outputs()) {
      if (remaining_uses[output] == 0) {
        live_elements -= live.at(output).size();
        live.erase(output);
      }
    }
  }

  std::vector<Array> outputs;
  for (const Value* output : graph.outputs()) outputs.push_back(live.at(output));
  return outputs;
}

}  // namespace kiln
