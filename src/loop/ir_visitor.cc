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
    case StmtKind::library_call:
      return visit_library_call(*s.as<LibraryCall>());
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

void IRVisitor::visit_library_call(const LibraryCall& node) {
  for (const MatrixRegion& operand : node.operands) visit(operand.offset);
  if (node.op == LibraryOp::gemm) {
    visit(node.gemm().m);
    visit(node.gemm().n);
    visit(node.gemm().k);
  }
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
    case StmtKind::library_call:
      return visit_library_call(*s.as<LibraryCall>(), s);
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

Stmt IRMutator::visit_library_call(const LibraryCall& node, const Stmt& self) {
  bool changed = false;
  std::vector<MatrixRegion> operands = node.operands;
  for (MatrixRegion& operand : operands) {
    Expr offset = mutate(operand.offset);
    changed = changed || !offset.same_as(operand.offset);
    operand.offset = std::move(offset);
  }
  std::variant<GemmShape, ConvGeometry> shape = node.shape;
  if (GemmShape* gemm = std::get_if<GemmShape>(&shape)) {
    for (Expr* size : {&gemm->m, &gemm->n, &gemm->k}) {
      Expr mutated = mutate(*size);
      changed = changed || !mutated.same_as(*size);
      *size = std::move(mutated);
    }
  }
  if (!changed) return self;
  return Stmt(std::make_shared<const LibraryCall>(node.op, std::move(operands), std::move(shape),
                                                  node.dtypes, node.epilogues, node.hints));
}

}  // namespace kiln::loop
