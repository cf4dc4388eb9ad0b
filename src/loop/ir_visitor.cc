#include "loop/ir_visitor.h"

#include "support/check.h"

namespace kiln::loop {

void IRVisitor::visit(const Expr& e) {
  switch (e.kind()) {
    case ExprKind::int_imm: return visit_int_imm(*e.as<IntImm>());
    case ExprKind::float_imm: return visit_float_imm(*e.as<FloatImm>());
    case ExprKind::variable: return visit_variable(*e.as<Variable>());
    case ExprKind::binary: return visit_binary(*e.as<Binary>());
    case ExprKind::logical_not: return visit_not(*e.as<Not>());
    case ExprKind::select: return visit_select(*e.as<Select>());
    case ExprKind::cast: return visit_cast(*e.as<Cast>());
    case ExprKind::load: return visit_load(*e.as<Load>());
    case ExprKind::call: return visit_call(*e.as<Call>());
    case ExprKind::let: return visit_let(*e.as<Let>());
    case ExprKind::reduce: return visit_reduce(*e.as<Reduce>());
  }
  KILN_UNREACHABLE("bad expression kind {}", static_cast<int>(e.kind()));
}

void IRVisitor::visit(const Stmt& s) {
  switch (s.kind()) {
    case StmtKind::for_loop: return visit_for(*s.as<For>());
    case StmtKind::store: return visit_store(*s.as<Store>());
    case StmtKind::let_stmt: return visit_let_stmt(*s.as<LetStmt>());
    case StmtKind::allocate: return visit_allocate(*s.as<Allocate>());
    case StmtKind::if_then_else: return visit_if_then_else(*s.as<IfThenElse>());
    case StmtKind::block: return visit_block(*s.as<Block>());
    case StmtKind::gemm: return visit_gemm(*s.as<Gemm>());
    case StmtKind::conv:
      return visit_conv(*s.as<Conv>());
  }
  KILN_UNREACHABLE("bad statement kind {}", static_cast<int>(s.kind()));
}

void IRVisitor::visit_binary(const Binary& node) {
  visit(node.a);
  visit(node.b);
}
void IRVisitor::visit_not(const Not& node) { visit(node.a); }
void IRVisitor::visit_select(const Select& node) {
  visit(node.condition);
  visit(node.true_value);
  visit(node.false_value);
}
void IRVisitor::visit_cast(const Cast& node) { visit(node.value); }
void IRVisitor::visit_load(const Load& node) { visit(node.index); }
void IRVisitor::visit_call(const Call& node) {
  for (const Expr& arg : node.args) visit(arg);
}
void IRVisitor::visit_let(const Let& node) {
  visit(node.value);
  visit(node.body);
}
void IRVisitor::visit_reduce(const Reduce& node) {
  visit(node.min);
  visit(node.extent);
  visit(node.body);
}

void IRVisitor::visit_for(const For& node) {
  visit(node.min);
  visit(node.extent);
  visit(node.body);
}
void IRVisitor::visit_store(const Store& node) {
  visit(node.index);
  visit(node.value);
}
void IRVisitor::visit_let_stmt(const LetStmt& node) {
  visit(node.value);
  visit(node.body);
}
void IRVisitor::visit_allocate(const Allocate& node) { visit(node.body); }
void IRVisitor::visit_if_then_else(const IfThenElse& node) {
  visit(node.condition);
  visit(node.then_case);
  if (node.else_case.defined()) visit(node.else_case);
}
void IRVisitor::visit_block(const Block& node) {
  for (const Stmt& s : node.stmts) visit(s);
}

void IRVisitor::visit_gemm(const Gemm& node) {
  visit(node.a.offset);
  visit(node.b.offset);
  visit(node.c.offset);
  visit(node.m);
  visit(node.n);
  visit(node.k);
}

void IRVisitor::visit_conv(const Conv& node) {
  visit(node.x_offset);
  visit(node.y_offset);
}

Expr IRMutator::mutate(const Expr& e) {
  switch (e.kind()) {
    case ExprKind::int_imm: return visit_int_imm(*e.as<IntImm>(), e);
    case ExprKind::float_imm: return visit_float_imm(*e.as<FloatImm>(), e);
    case ExprKind::variable: return visit_variable(*e.as<Variable>(), e);
    case ExprKind::binary: return visit_binary(*e.as<Binary>(), e);
    case ExprKind::logical_not: return visit_not(*e.as<Not>(), e);
    case ExprKind::select: return visit_select(*e.as<Select>(), e);
    case ExprKind::cast: return visit_cast(*e.as<Cast>(), e);
    case ExprKind::load: return visit_load(*e.as<Load>(), e);
    case ExprKind::call: return visit_call(*e.as<Call>(), e);
    case ExprKind::let: return visit_let(*e.as<Let>(), e);
    case ExprKind::reduce: return visit_reduce(*e.as<Reduce>(), e);
  }
  KILN_UNREACHABLE("bad expression kind {}", static_cast<int>(e.kind()));
}

Stmt IRMutator::mutate(const Stmt& s) {
  switch (s.kind()) {
    case StmtKind::for_loop: return visit_for(*s.as<For>(), s);
    case StmtKind::store: return visit_store(*s.as<Store>(), s);
    case StmtKind::let_stmt: return visit_let_stmt(*s.as<LetStmt>(), s);
    case StmtKind::allocate: return visit_allocate(*s.as<Allocate>(), s);
    case StmtKind::if_then_else: return visit_if_then_else(*s.as<IfThenElse>(), s);
    case StmtKind::block: return visit_block(*s.as<Block>(), s);
    case StmtKind::gemm: return visit_gemm(*s.as<Gemm>(), s);
    case StmtKind::conv:
      return visit_conv(*s.as<Conv>(), s);
  }
  KILN_UNREACHABLE("bad statement kind {}", static_cast<int>(s.kind()));
}

Expr IRMutator::visit_binary(const Binary& node, const Expr& self) {
  Expr a = mutate(node.a), b = mutate(node.b);
  if (a.same_as(node.a) && b.same_as(node.b)) return self;
  return binary(node.op, std::move(a), std::move(b));
}

Expr IRMutator::visit_not(const Not& node, const Expr& self) {
  Expr a = mutate(node.a);
  return a.same_as(node.a) ? self : !std::move(a);
}

Expr IRMutator::visit_select(const Select& node, const Expr& self) {
  Expr c = mutate(node.condition), t = mutate(node.true_value), f = mutate(node.false_value);
  if (c.same_as(node.condition) && t.same_as(node.true_value) && f.same_as(node.false_value)) {
    return self;
  }
  return select(std::move(c), std::move(t), std::move(f));
}

Expr IRMutator::visit_cast(const Cast& node, const Expr& self) {
  Expr value = mutate(node.value);
  return value.same_as(node.value) ? self : cast(node.type, std::move(value));
}

Expr IRMutator::visit_load(const Load& node, const Expr& self) {
  Expr index = mutate(node.index);
  return index.same_as(node.index) ? self : load(node.buffer, std::move(index));
}

Expr IRMutator::visit_call(const Call& node, const Expr& self) {
  std::vector<Expr> args;
  bool changed = false;
  for (const Expr& arg : node.args) {
    args.push_back(mutate(arg));
    changed = changed || !args.back().same_as(arg);
  }
  return changed ? call(node.intrinsic, std::move(args)) : self;
}

Expr IRMutator::visit_let(const Let& node, const Expr& self) {
  Expr value = mutate(node.value), body = mutate(node.body);
  if (value.same_as(node.value) && body.same_as(node.body)) return self;
  return let(node.name, std::move(value), std::move(body));
}

Expr IRMutator::visit_reduce(const Reduce& node, const Expr& self) {
  Expr min = mutate(node.min), extent = mutate(node.extent), body = mutate(node.body);
  if (min.same_as(node.min) && extent.same_as(node.extent) && body.same_as(node.body)) {
    return self;
  }
  return reduce(node.op, node.var, std::move(min), std::move(extent), std::move(body),
                node.vectorized);
}

Stmt IRMutator::visit_for(const For& node, const Stmt& self) {
  Expr min = mutate(node.min), extent = mutate(node.extent);
  Stmt body = mutate(node.body);
  if (min.same_as(node.min) && extent.same_as(node.extent) && body.same_as(node.body)) {
    return self;
  }
  return for_loop(node.var, std::move(min), std::move(extent), node.for_kind, std::move(body));
}

Stmt IRMutator::visit_store(const Store& node, const Stmt& self) {
  Expr index = mutate(node.index), value = mutate(node.value);
  if (index.same_as(node.index) && value.same_as(node.value)) return self;
  if (node.atomic) {
    const Stmt plain = store(node.buffer, index, std::move(value));
    const Expr* addend = addend_to_own_element(*plain.as<Store>());
    KILN_CHECK(addend != nullptr, "an atomic store is no longer its element plus an addend");
    return atomic_add(node.buffer, std::move(index), *addend);
  }
  return store(node.buffer, std::move(index), std::move(value));
}

Stmt IRMutator::visit_let_stmt(const LetStmt& node, const Stmt& self) {
  Expr value = mutate(node.value);
  Stmt body = mutate(node.body);
  if (value.same_as(node.value) && body.same_as(node.body)) return self;
  return let_stmt(node.name, std::move(value), std::move(body));
}

Stmt IRMutator::visit_allocate(const Allocate& node, const Stmt& self) {
  Stmt body = mutate(node.body);
  return body.same_as(node.body) ? self : allocate(node.buffer, std::move(body));
}

Stmt IRMutator::visit_if_then_else(const IfThenElse& node, const Stmt& self) {
  Expr condition = mutate(node.condition);
  Stmt then_case = mutate(node.then_case);
  Stmt else_case = node.else_case.defined() ? mutate(node.else_case) : Stmt();
  if (condition.same_as(node.condition) && then_case.same_as(node.then_case) &&
      else_case.same_as(node.else_case)) {
    return self;
  }
  return if_then_else(std::move(condition), std::move(then_case), std::move(else_case));
}

Stmt IRMutator::visit_block(const Block& node, const Stmt& self) {
  std::vector<Stmt> stmts;
  bool changed = false;
  for (const Stmt& s : node.stmts) {
    stmts.push_back(mutate(s));
    changed = changed || !stmts.back().same_as(s);
  }
  return changed ? block(std::move(stmts)) : self;
}

Stmt IRMutator::visit_gemm(const Gemm& node, const Stmt& self) {
  Expr a = mutate(node.a.offset), b = mutate(node.b.offset), c = mutate(node.c.offset);
  Expr m = mutate(node.m), n = mutate(node.n), k = mutate(node.k);
  if (a.same_as(node.a.offset) && b.same_as(node.b.offset) && c.same_as(node.c.offset) &&
      m.same_as(node.m) && n.same_as(node.n) && k.same_as(node.k)) {
    return self;
  }
  return gemm({.a = {node.a.buffer, std::move(a), node.a.leading_dim},
               .b = {node.b.buffer, std::move(b), node.b.leading_dim},
               .c = {node.c.buffer, std::move(c), node.c.leading_dim},
               .transpose_a = node.transpose_a,
               .transpose_b = node.transpose_b,
               .m = std::move(m),
               .n = std::move(n),
               .k = std::move(k),
               .accumulate = node.accumulate,
               .packed_b = node.packed_b});
}

Stmt IRMutator::visit_conv(const Conv& node, const Stmt& self) {
  Expr x = mutate(node.x_offset), y = mutate(node.y_offset);
  if (x.same_as(node.x_offset) && y.same_as(node.y_offset)) return self;
  ConvArgs args = conv_args(node);
  args.x_offset = std::move(x);
  args.y_offset = std::move(y);
  return conv(std::move(args));
}

}  // namespace kiln::loop
