// Reverse-mode automatic differentiation on the Graph IR.
//
// build_gradients appends to a graph the ops that compute the gradient of a scalar loss with
// respect to chosen values (parameters, inputs, or intermediate values). It walks the nodes
// between them in reverse order, seeds the loss with 1, and calls each node's gradient rule
// (the `gradient` field of its op record, ir/op.h), which builds the node's input gradients
// from its output gradients with ordinary Kiln ops; a value used several times gets the sum of
// its users' contributions. The backward graph is therefore plain IR that every later pass,
// the fusion partitioner and the interpreter handle like the forward graph.
//
//   %h = tanh(%x) : f64[3]
//   %loss = sum(%h) : f64[]
// gains, for the gradient with respect to %x:
//   %1 = constant() {value = tensor<f64[]>[1.0]} : f64[]   the seed, d loss / d loss
//   %2 = reshape(%1) {shape = [1]} : f64[1]                sum's rule: broadcast dy back
//   %3 = broadcast_to(%2) {shape = [3]} : f64[3]
//   %4 = mul(%h, %h) : f64[3]                              tanh's rule: dy * (1 - y * y)
//   %5 = neg(%4) : f64[3]
//   %6 = constant() {value = tensor<f64[]>[1.0]} : f64[]
//   %7 = add(%5, %6) : f64[3]
//   %8 = mul(%3, %7) : f64[3]                              the gradient of %x
//
// Only floating values carry gradients: integer and bool values (indices, labels, masks) stop
// them, and piecewise-constant ops (floor, sign) pass none. Nodes that do not lie on a path from
// a `wrt` value to the loss are not differentiated, and the gradients a rule builds for inputs
// that need none are removed again, so the appended ops are only those the result uses.
#pragma once

#include <span>
#include <vector>

#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

// Appends to `graph` the gradient of `loss` (a floating scalar of the graph) with respect to
// each value in `wrt` (floating values of the graph) and returns them, one per `wrt` value in
// order, each of its value's type. The graph's outputs are left as they are: the caller decides
// which values to return. A `wrt` value the loss does not depend on gets zeros (a `fill`), as
// its gradient is zero, so that a training step can treat every parameter alike.
//
// Errors: a null or foreign loss or `wrt` value; a loss that is not a floating scalar; a `wrt`
// value that is not floating; a node on the path from `wrt` to the loss whose op has no
// gradient rule (the error names the node, the op and the op's reason). After an error the
// graph may hold some unused gradient nodes; it still verifies.
Expected<std::vector<Value*>> build_gradients(Graph& graph, Value* loss,
                                              std::span<Value* const> wrt);

}  // namespace kiln
