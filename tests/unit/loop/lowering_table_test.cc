// The lowering table has one entry per op: a compute definition or the reason there is none.
#include <gtest/gtest.h>

#include "loop/compute.h"
#include "unit/test_util.h"

namespace kiln::loop {
namespace {

TEST(LoweringTable, EveryOpHasADefinitionOrAReason) {
  for (const OpDef& def : all_op_defs()) {
    const Lowering& entry = lowering_of(def.op);
    EXPECT_NE(static_cast<bool>(entry.compute), !entry.not_lowered.empty())
        << "op '" << def.name << "' needs exactly one of a compute definition and a reason";
  }
}

TEST(LoweringTable, OpsWithoutDefinitionsAreTheKnownFew) {
  std::vector<std::string> missing;
  for (const OpDef& def : all_op_defs()) {
    if (!lowering_of(def.op).compute) missing.push_back(def.name);
  }
  EXPECT_EQ(missing, (std::vector<std::string>{"scatter_add", "max_pool_grad", "dropout"}));
}

TEST(LoweringTable, ComputeElementNamesAnOpWithoutADefinition) {
  Graph graph;
  Value* x = graph.add_input({DType::f32, Shape{4}});
  Node* node = *graph.add_node(Op::dropout, {x});
  NameGenerator names;
  const InputAccessor input = [](int, const std::vector<Expr>&) { return make_zero(DType::f32); };
  EXPECT_TRUE(::kiln::testing::is_error_with(
      compute_element(*node, 0, {var("i")}, input, names).status(),
      {"dropout", "not lowered", "xor"}));
}

}  // namespace
}  // namespace kiln::loop
