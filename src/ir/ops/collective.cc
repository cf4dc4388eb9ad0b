// Collectives across the ranks of a data-parallel job: all_reduce (each rank gets the sum or
// the mean of every rank's x) and broadcast (each rank gets rank `root`'s x). The output has
// the input's type. On one rank both are the identity, which is their reference evaluation
// here; the interpreter and compiled programs run them through the process's communicator
// (comm/communicator.h), so that a job of several ranks computes the real thing (OpDef's
// `collective`).
//
// all_reduce's gradient is itself: every rank's loss depends on every rank's x through the
// sum (or the mean), so x's gradient on a rank gathers dy from every rank the same way.
// broadcast's gradient would be a sum of dy to the root and zero elsewhere, which needs an op
// that knows its rank; until one exists, differentiating through broadcast is refused.
#include <string>
#include <vector>

#include "ir/ops/op_family.h"

namespace kiln::ops {
namespace {

Expected<std::vector<TensorType>> infer_all_reduce(std::span<const TensorType> in,
                                                   const Attrs& attrs) {
  KILN_RETURN_IF_ERROR(require_floating(in[0], "x"));
  const std::string& reduction = attrs.get_string("reduction");
  if (reduction != "sum" && reduction != "mean") {
    return Status::errorf("attribute 'reduction' is '{}': the reductions are 'sum' and 'mean'",
                          reduction);
  }
  return std::vector<TensorType>{in[0]};
}

Expected<std::vector<TensorType>> infer_broadcast(std::span<const TensorType> in,
                                                  const Attrs& attrs) {
  if (attrs.get_int("root") < 0) {
    return Status::errorf("attribute 'root' is {}: a rank is at least 0", attrs.get_int("root"));
  }
  return std::vector<TensorType>{in[0]};
}

// A world of one's value: x itself.
Expected<std::vector<Array>> eval_identity(std::span<const Array> in, const Attrs&,
                                           std::span<const TensorType>) {
  return std::vector<Array>{in[0]};
}

std::vector<Value*> gradient_of_all_reduce(GraphBuilder& b, const Node& node,
                                           std::span<Value* const> dys) {
  return {b.apply1(Op::all_reduce, {dys[0]},
                   {{"reduction", node.attrs().get_string("reduction")}})};
}

OpDef& define(OpTable& table, Op op, std::string summary) {
  OpDef& def = table.define(op);
  def.summary = std::move(summary);
  def.fusion_kind = FusionKind::opaque;
  def.collective = true;
  def.min_inputs = def.max_inputs = 1;
  def.input_names = {"x"};
  // What the op itself reads and writes; the time its bytes take between ranks is the link
  // profile's to price (comm/link_profile.h, cost/estimate.h).
  def.cost = per_element_cost(1);
  def.eval = eval_identity;
  return def;
}

}  // namespace

void register_collective_ops(OpTable& table) {
  OpDef& all_reduce =
      define(table, Op::all_reduce, "x summed, or averaged, over every rank of the job");
  all_reduce.attrs = {
      {"reduction", AttrKind::string, AttrValue("sum"), "'sum' or 'mean' over the ranks"}};
  all_reduce.infer = infer_all_reduce;
  all_reduce.gradient = gradient_of_all_reduce;

  OpDef& broadcast = define(table, Op::broadcast, "rank `root`'s x, on every rank of the job");
  broadcast.attrs = {{"root", AttrKind::integer, AttrValue(0), "the rank whose x is sent"}};
  broadcast.infer = infer_broadcast;
  broadcast.cost = per_element_cost(0);
  broadcast.non_differentiable =
      "its gradient is a sum of every rank's gradient to the root, and no op knows its rank yet";
}

}  // namespace kiln::ops
