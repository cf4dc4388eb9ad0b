// IRVisitor and IRMutator: the traversal every loop-IR pass starts from.
//
// A visitor walks a tree; a pass overrides the handlers of the nodes it cares about and calls
// the base handler to keep walking into children. A mutator rebuilds a tree bottom-up: each
// handler receives the node and its handle (`self`) and returns the replacement; the base
// handlers mutate the children and return `self` unchanged when no child changed, so
// untouched subtrees stay shared. A library call's base handlers visit (or mutate) its
// expressions: its operands' offsets in order, then a gemm's m, n and k. Handlers have
// distinct names (visit_binary, visit_for, ...) so that overriding one hides no other.
#pragma once

#include "loop/expr.h"
#include "loop/stmt.h"

namespace kiln::loop {

class IRVisitor {
 public:
  virtual ~IRVisitor() = default;
  void visit(const Expr& e);
  void visit(const Stmt& s);

 protected:
  virtual void visit_int_imm(const IntImm&) {}
  virtual void visit_float_imm(const FloatImm&) {}
  virtual void visit_variable(const Variable&) {}
  virtual void visit_binary(const Binary& node);
  virtual void visit_not(const Not& node);
  virtual void visit_select(const Select& node);
  virtual void visit_cast(const Cast& node);
  virtual void visit_load(const Load& node);
  virtual void visit_call(const Call& node);
  virtual void visit_let(const Let& node);
  virtual void visit_reduce(const Reduce& node);

  virtual void visit_for(const For& node);
  virtual void visit_store(const Store& node);
  virtual void visit_let_stmt(const LetStmt& node);
  virtual void visit_allocate(const Allocate& node);
  virtual void visit_if_then_else(const IfThenElse& node);
  virtual void visit_block(const Block& node);
  virtual void visit_library_call(const LibraryCall& node);
};

class IRMutator {
 public:
  virtual ~IRMutator() = default;
  Expr mutate(const Expr& e);
  Stmt mutate(const Stmt& s);

 protected:
  virtual Expr visit_int_imm(const IntImm&, const Expr& self) { return self; }
  virtual Expr visit_float_imm(const FloatImm&, const Expr& self) { return self; }
  virtual Expr visit_variable(const Variable&, const Expr& self) { return self; }
  virtual Expr visit_binary(const Binary& node, const Expr& self);
  virtual Expr visit_not(const Not& node, const Expr& self);
  virtual Expr visit_select(const Select& node, const Expr& self);
  virtual Expr visit_cast(const Cast& node, const Expr& self);
  virtual Expr visit_load(const Load& node, const Expr& self);
  virtual Expr visit_call(const Call& node, const Expr& self);
  virtual Expr visit_let(const Let& node, const Expr& self);
  virtual Expr visit_reduce(const Reduce& node, const Expr& self);

  virtual Stmt visit_for(const For& node, const Stmt& self);
  virtual Stmt visit_store(const Store& node, const Stmt& self);
  virtual Stmt visit_let_stmt(const LetStmt& node, const Stmt& self);
  virtual Stmt visit_allocate(const Allocate& node, const Stmt& self);
  virtual Stmt visit_if_then_else(const IfThenElse& node, const Stmt& self);
  virtual Stmt visit_block(const Block& node, const Stmt& self);
  virtual Stmt visit_library_call(const LibraryCall& node, const Stmt& self);
};

}  // namespace kiln::loop
