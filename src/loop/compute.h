// Compute definitions: each graph op's output element written as a loop-IR expression of its
// input elements, and the table that holds them.
//
// A compute definition receives the output's index variables (one i64 Expr per output dim)
// and an *input accessor* that returns the expression for an input element at a multi-index;
// it returns the output element. Reductions are explicit `reduce` expressions (sums over the
// reduced axes, a max then a sum for softmax), so a definition is a pure value. The accessor
// is how lowering fuses: lower_group (loop/lower_group.h) hands a consumer an accessor that
// either loads from a buffer or inlines the producer's own definition at that index.
//
//   add (broadcasting b [1, 3] to [2, 3]):  out[i0, i1] = a[i0, i1] + b[0, i1]
//   sum (axes [1]):                          out[i0] = sum(k0, 0, 3, x[i0, k0])
//
// Definitions compute in the output's dtype, one rounding per operation; the reference
// interpreter computes in f64 and rounds once, so f32 results differ by rounding (exactly
// what a compiled kernel does). Data-dependent errors of the interpreter (an index out of
// range, an integer division by zero) cannot be raised by loop IR: definitions clamp indices
// into range so that every load stays inside its buffer, and agree with the interpreter on
// every input it accepts.
//
// An op's lowering record may also hold a *store nest*: statements of its own that lower_group
// stores the op's values with where storing the definition element by element would be slow
// (a gemm's block loop with its epilogues, scatter_add's accumulating stores, a max pool in
// two steps), for the nodes its predicate accepts. The definition stays the oracle and serves
// the other nodes (other dtypes, attributes).
//
// The table lives here rather than in the op record (ir/op.h) because kiln_ir cannot depend on
// kiln_loop: the graph IR is below the loop IR. It is keyed by kiln::Op, organised by the
// same families as ir/ops/ (loop/lowering/*.cc), and has a definition for every op: building
// the table checks it, and tests/unit/loop/lowering_table_test.cc names an op that has none.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/attribute.h"
#include "ir/graph.h"
#include "ir/op.h"
#include "loop/expr.h"
#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::loop {

namespace lowering {
class GroupContext;  // loop/lowering/group_context.h
struct GemmPlan;     // loop/lowering/gemm.h
}  // namespace lowering

// The expression of element `index` (one i64 Expr per dim) of input number `input`.
using InputAccessor = std::function<Expr(int input, const std::vector<Expr>& index)>;

// Fresh variable names for the binders definitions create (reduction variables, lets) and
// for loop variables. One generator serves a whole kernel, so names never repeat and an
// inlined definition never rebinds a name bound around it.
class NameGenerator {
 public:
  std::string fresh(std::string_view prefix);  // prefix + a number: "k0", "k1", ...

 private:
  int next_ = 0;
};

// Everything a definition may read.
struct ComputeArgs {
  const Attrs& attrs;                  // canonical: every schema attribute present
  std::span<const TensorType> inputs;  // input types
  std::span<const TensorType> outputs;
  int output = 0;                      // which output to define (multi-output ops)
  const std::vector<Expr>& index;      // the output element's index, one per output dim
  const InputAccessor& input;
  NameGenerator& names;
};

// The output element, of the output's dtype; an error when the op's attributes or types are
// outside what the definition supports.
using ComputeFn = std::function<Expected<Expr>(const ComputeArgs&)>;

// Which later stored values of a group ride on the blocks of `product`, a value the store
// nest computes block by block, and where the product lives (loop/lowering/gemm.h).
using PlanEpilogues =
    std::function<lowering::GemmPlan(const Value& product, const lowering::GroupContext& group)>;

// A store nest (see the top of this file), built through the group's context.
struct StoreNest {
  // Whether the nest stores `node` (it may serve some dtypes or attributes only); null: every
  // node of the op.
  std::function<bool(const Node& node)> applies = {};
  // The statements storing `value`, an output of such a node, into its buffer.
  std::function<Expected<Stmt>(const Value& value, lowering::GroupContext& group)> build = {};
  // Whether `build` reads the node's inputs from their buffers (a library call does), not
  // through the group's accessors: the group then stores an input it would otherwise inline.
  bool reads_input_buffers = false;
  // Null where no value rides on the nest's blocks.
  PlanEpilogues plan_epilogues = {};
};

struct Lowering {
  ComputeFn compute;
  std::optional<StoreNest> store_nest;
};

const Lowering& lowering_of(Op op);

// The store nest of `node`'s record where it has one that applies to `node`; null otherwise.
const StoreNest* store_nest_of(const Node& node);

// The definition of output `output` of `node` at `index`, reading inputs through `input`.
Expected<Expr> compute_element(const Node& node, int output, const std::vector<Expr>& index,
                               const InputAccessor& input, NameGenerator& names);

}  // namespace kiln::loop
