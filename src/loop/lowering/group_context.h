// What a store nest (StoreNest, loop/compute.h) sees of the group being lowered. Internal to
// src/loop.
//
// lower_group (loop/lower_group.h) stores most values with a loop nest over the value's
// shape that stores its compute definition. An op whose lowering record has a store nest
// (a gemm's block loop, scatter_add's accumulating stores, a max pool in two steps) builds
// its own statements instead, beside the op's definitions in loop/lowering/; GroupContext is
// all such a nest may use of the lowerer: the group's buffers and accessors, fresh names, the
// stores of a value's definition, and the gemm plans (loop/lowering/gemm.h), which read the
// group's decisions through the queries below. The group lowerer implements it.
//
// Errors are returned, never stored. An InputAccessor returns a plain Expr (definitions read
// their inputs as values), so an accessor that cannot build an inlined producer's element
// records the error in the AccessErrors it was made with and reads a zero instead. Whoever
// makes accessors creates the AccessErrors beside them and returns errors.result(...) of what
// it built: the error comes back from the function that created the accessor, and a result
// built with a failed read never leaves it.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "loop/compute.h"
#include "loop/lower_group.h"
#include "loop/lowering/lowering_family.h"
#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::loop::lowering {

struct GemmPlan;

// The first error of the accessors made with it (see the top of this file).
class AccessErrors {
 public:
  void record(const Status& status) {
    if (first_.is_ok()) first_ = status;
  }
  // `built`, or the first error recorded while it was built.
  template <typename T>
  Expected<T> result(T built) const {
    if (!first_.is_ok()) return first_;
    return built;
  }

 private:
  Status first_ = Status::ok();
};

class GroupContext {
 public:
  // --- The group's decisions, fixed before any nest is built (read by gemm planning) -----

  virtual const LowerGroupOptions& options() const = 0;
  // The values the group stores (outputs and materialised values), in node order: the order
  // their nests run.
  virtual std::span<const Value* const> stored_values() const = 0;
  // The position of `value` in stored_values(); nullopt when it is not stored.
  virtual std::optional<size_t> stored_position(const Value& value) const = 0;
  // Whether the group computes `value` (else it is a kernel input).
  virtual bool computes(const Value& value) const = 0;
  // Whether a node outside the group, or the graph's outputs, read `value`.
  virtual bool used_outside(const Value& value) const = 0;
  // Whether `node`'s definition, with its inlined producers, reads `value`.
  virtual bool reads_through_inlining(const Node& node, const Value& value) const = 0;
  // Whether the group stores `node`'s values by their definitions (no store nest of their
  // own, and not batch norm's statistics first).
  virtual bool stored_by_definition(const Node& node) const = 0;
  // Whether an earlier product's gemm plan already stores `value` in its block loop.
  virtual bool claimed_as_epilogue(const Value& value) const = 0;

  // --- Building statements ----------------------------------------------------------------

  // One generator for every name in the kernel.
  virtual NameGenerator& names() = 0;
  // The buffer holding a stored value or a kernel input.
  virtual const Buffer& buffer_of(const Value& value) const = 0;
  // The plan of a product whose record plans epilogues; null for any other value.
  virtual const GemmPlan* gemm_plan(const Value& product) const = 0;
  // The accessor of `node`'s inputs: a load where the input is in a buffer, else its
  // producer's definition inlined at the index read. Failures go to `errors`.
  virtual InputAccessor inputs(const Node& node, AccessErrors& errors) = 0;
  // A load of element `index` of a stored value.
  virtual Expr load_from(const Value& value, const std::vector<Expr>& index) const = 0;
  // The store of `element` at `index` of a stored value.
  virtual Stmt store_element(const Value& value, const std::vector<Expr>& index,
                             Expr element) const = 0;
  // The stores of `values`' definitions at `index`, in order (a later value may load an
  // earlier one's element, stored just before): a gemm's epilogues.
  virtual Expected<Stmt> store_definitions(const std::vector<const Value*>& values,
                                           const std::vector<Expr>& index) = 0;
  // What `build` returns, built while every read of `value` is `element_at(index)` instead
  // of a load of its buffer: a product that lives one block at a time.
  virtual Expected<Stmt> with_reads_of(const Value& value, const ElementAt& element_at,
                                       const std::function<Expected<Stmt>()>& build) = 0;

  // Fresh loop variables over `dims` (appended to `vars`), and the index they make.
  std::vector<Expr> fresh_index(const std::vector<int64_t>& dims, std::vector<std::string>& vars);

 protected:
  ~GroupContext() = default;
};

// `body` inside serial loops over `vars`, from 0 to `dims`, vars[0] outermost.
Stmt loop_nest(const std::vector<std::string>& vars, const std::vector<int64_t>& dims, Stmt body);

}  // namespace kiln::loop::lowering
