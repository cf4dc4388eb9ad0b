// Walks the op registry: every op must have a complete record.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "ir/op.h"

namespace kiln {
namespace {

TEST(OpRegistry, EveryOpHasACompleteRecord) {
  ASSERT_EQ(static_cast<int>(all_op_defs().size()), kNumOps);
  for (const OpDef& def : all_op_defs()) {
    SCOPED_TRACE(def.name);
    EXPECT_FALSE(def.name.empty());
    EXPECT_FALSE(def.summary.empty()) << "op lacks a summary";
    EXPECT_TRUE(def.infer) << "op lacks type inference";
    EXPECT_TRUE(def.cost) << "op lacks a cost function";
    EXPECT_TRUE(def.eval) << "op lacks a reference evaluation";
    EXPECT_NE(static_cast<bool>(def.gradient), !def.non_differentiable.empty())
        << "op needs exactly one of a gradient rule and a reason it has none";
    EXPECT_GE(def.min_inputs, 0);
    EXPECT_TRUE(def.max_inputs == kVariadic || def.max_inputs >= def.min_inputs);
    // Input names: one per possible input, or a single name for a variadic op.
    if (def.max_inputs == kVariadic) {
      EXPECT_EQ(def.input_names.size(), 1u);
    } else {
      EXPECT_EQ(static_cast<int>(def.input_names.size()), def.max_inputs);
    }
    std::set<std::string> attr_names;
    for (const AttrSpec& spec : def.attrs) {
      EXPECT_TRUE(attr_names.insert(spec.name).second) << "duplicate attribute " << spec.name;
      EXPECT_FALSE(spec.doc.empty()) << "attribute " << spec.name << " lacks a doc line";
      if (spec.default_value) {
        EXPECT_EQ(spec.default_value->kind(), spec.kind) << "default of " << spec.name;
      }
    }
  }
}

// Exactly the ops through which no floating value flows (bool or integer results or inputs, no
// inputs), second-order max_pool, and broadcast (whose gradient needs the rank) lack a
// gradient rule.
TEST(OpRegistry, OnlyOpsWithoutFloatingDataflowLackAGradientRule) {
  std::set<std::string> without_rule;
  for (const OpDef& def : all_op_defs()) {
    if (!def.gradient) without_rule.insert(def.name);
  }
  const std::set<std::string> expected = {
      "not",    "equal",   "less",   "less_equal", "greater", "greater_equal",
      "and",    "or",      "xor",    "argmax",     "argmin",  "constant",
      "one_hot", "iota",   "fill",   "max_pool_grad", "conv_channels_last", "broadcast"};
  EXPECT_EQ(without_rule, expected);
}

TEST(OpRegistry, LooksUpByName) {
  for (const OpDef& def : all_op_defs()) {
    const OpDef* found = find_op(def.name);
    ASSERT_NE(found, nullptr) << def.name;
    EXPECT_EQ(found->op, def.op);
    EXPECT_EQ(&op_def(def.op), &def);
  }
  EXPECT_EQ(find_op("no_such_op"), nullptr);
}

TEST(OpRegistry, CanonicalAttrsFillDefaultsAndRejectUnknownNames) {
  const OpDef& gelu = op_def(Op::gelu);
  Expected<Attrs> filled = canonicalize_attrs(gelu, {});
  ASSERT_TRUE(filled.has_value()) << filled.status().message();
  EXPECT_EQ(filled->get_string("approximate"), "none");

  Expected<Attrs> unknown = canonicalize_attrs(gelu, {{"axis", 1}});
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.status().message(), "op 'gelu' has no attribute 'axis'");

  Expected<Attrs> wrong_kind = canonicalize_attrs(gelu, {{"approximate", 3}});
  ASSERT_FALSE(wrong_kind.has_value());
  EXPECT_EQ(wrong_kind.status().message(),
            "attribute 'approximate' of op 'gelu': expected string, got int");

  Expected<Attrs> missing = canonicalize_attrs(op_def(Op::cast), {});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().message(), "op 'cast' requires attribute 'to' (dtype)");
}

TEST(OpRegistry, ArityIsChecked) {
  Expected<std::vector<TensorType>> result =
      infer_types(op_def(Op::exp), std::vector<TensorType>{}, Attrs{});
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.status().message(), "op 'exp' takes 1 inputs, got 0");
}

}  // namespace
}  // namespace kiln
