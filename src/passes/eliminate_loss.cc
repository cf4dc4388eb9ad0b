#include "passes/eliminate_loss.h"

#include <vector>

#include "passes/dead_code.h"

namespace kiln {

Expected<int> eliminate_loss(Graph& step) {
  const std::vector<Value*>& outputs = step.outputs();
  if (outputs.size() < 2) {
    return Status::errorf("loss elimination needs a step with the loss first and other outputs "
                          "after it; @{} has {} output(s)",
                          step.name(), outputs.size());
  }
  const Value* loss = outputs.front();
  if (!is_floating(loss->dtype()) || loss->rank() != 0) {
    return Status::errorf("the first output of @{}, %{} ({}), is not a floating scalar loss",
                          step.name(), loss->name(), loss->type().to_string());
  }
  const int nodes_before = step.num_nodes();
  step.set_outputs(std::vector<Value*>(outputs.begin() + 1, outputs.end()));
  eliminate_dead_code(step);
  return nodes_before - step.num_nodes();
}

}  // namespace kiln
