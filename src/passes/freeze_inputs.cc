#include "passes/freeze_inputs.h"

#include <vector>

namespace kiln {

Status freeze_inputs(Graph& graph, const std::map<std::string, Array>& values) {
  // Checked in full before the graph changes, so an error leaves it as it was.
  std::vector<std::pair<Value*, const Array*>> frozen;
  for (const auto& [name, array] : values) {
    Value* input = graph.find_value(name);
    if (input == nullptr || !input->is_graph_input()) {
      return Status::errorf("cannot freeze %{}: graph '{}' has no input of that name", name,
                            graph.name());
    }
    if (array.type() != input->type()) {
      return Status::errorf("cannot freeze %{}: its value is {}, the input {}", name,
                            array.type().to_string(), input->type().to_string());
    }
    if (graph.is_output(input)) {
      return Status::errorf("cannot freeze %{}: it is a graph output", name);
    }
    frozen.emplace_back(input, &array);
  }
  for (auto [input, array] : frozen) {
    KILN_ASSIGN_OR_RETURN(Node * constant,
                          graph.add_node(Op::constant, {}, Attrs{{"value", AttrValue(*array)}}));
    graph.move_computation_after(constant->output(), nullptr);
    KILN_RETURN_IF_ERROR(graph.replace_all_uses(input, constant->output()));
    const std::string name = input->name();
    graph.erase_input(input);
    graph.rename_value(constant->output(), name);
  }
  return Status::ok();
}

}  // namespace kiln
