#include "loop/substitute.h"

#include <type_traits>

#include "loop/ir_visitor.h"
#include "support/check.h"

namespace kiln::loop {
namespace {

class Substituter : public IRMutator {
 public:
  explicit Substituter(const Substitution& replacements) : replacements_(replacements) {
    for (const auto& [name, replacement] : replacements) {
      std::set<std::string, std::less<>> names = free_vars(replacement);
      captured_.insert(names.begin(), names.end());
    }
  }

 protected:
  Expr visit_variable(const Variable& node, const Expr& self) override {
    if (shadowed_.contains(node.name)) return self;
    auto it = replacements_.find(node.name);
    return it == replacements_.end() ? self : it->second;
  }

  Expr visit_let(const Let& node, const Expr& self) override {
    Expr value = mutate(node.value);
    Expr body = in_scope_of(node.name, [&] { return mutate(node.body); });
    if (value.same_as(node.value) && body.same_as(node.body)) return self;
    return let(node.name, std::move(value), std::move(body));
  }

  Expr visit_reduce(const Reduce& node, const Expr& self) override {
    Expr min = mutate(node.min), extent = mutate(node.extent);
    Expr body = in_scope_of(node.var, [&] { return mutate(node.body); });
    if (min.same_as(node.min) && extent.same_as(node.extent) && body.same_as(node.body)) {
      return self;
    }
    return reduce(node.op, node.var, std::move(min), std::move(extent), std::move(body),
                  node.vectorized);
  }

  Stmt visit_for(const For& node, const Stmt& self) override {
    Expr min = mutate(node.min), extent = mutate(node.extent);
    Stmt body = in_scope_of(node.var, [&] { return mutate(node.body); });
    if (min.same_as(node.min) && extent.same_as(node.extent) && body.same_as(node.body)) {
      return self;
    }
    return for_loop(node.var, std::move(min), std::move(extent), node.for_kind, std::move(body));
  }

  Stmt visit_let_stmt(const LetStmt& node, const Stmt& self) override {
    Expr value = mutate(node.value);
    Stmt body = in_scope_of(node.name, [&] { return mutate(node.body); });
    if (value.same_as(node.value) && body.same_as(node.body)) return self;
    return let_stmt(node.name, std::move(value), std::move(body));
  }

 private:
  // Mutates a binder's body: the binder shadows a substitution of its own name.
  template <typename Fn>
  std::invoke_result_t<Fn> in_scope_of(const std::string& name, Fn&& mutate_body) {
    KILN_CHECK(!captured_.contains(name),
               "substitution under the binder of '{}' would capture a free '{}'", name, name);
    const bool inserted = shadowed_.insert(name).second;
    auto body = mutate_body();
    if (inserted) shadowed_.erase(name);
    return body;
  }

  const Substitution& replacements_;
  std::set<std::string, std::less<>> captured_;  // free in some replacement
  std::set<std::string, std::less<>> shadowed_;
};

// Collects free variables (`bound_` tracks the enclosing binders), and optionally whether a
// buffer is used.
class UseCollector : public IRVisitor {
 public:
  std::set<std::string, std::less<>> free;
  std::set<std::string, std::less<>> buffers;

 protected:
  void visit_variable(const Variable& node) override {
    if (!bound_.contains(node.name)) free.insert(node.name);
  }
  void visit_load(const Load& node) override {
    buffers.insert(node.buffer.name());
    IRVisitor::visit_load(node);
  }
  void visit_store(const Store& node) override {
    buffers.insert(node.buffer.name());
    IRVisitor::visit_store(node);
  }
  void visit_library_call(const LibraryCall& node) override {
    for (const MatrixRegion& operand : node.operands) buffers.insert(operand.buffer.name());
    for (const Epilogue& epilogue : node.epilogues) {
      if (epilogue.operand.defined()) buffers.insert(epilogue.operand.name());
    }
    IRVisitor::visit_library_call(node);
  }
  void visit_let(const Let& node) override {
    visit(node.value);
    bind(node.name, node.body);
  }
  void visit_reduce(const Reduce& node) override {
    visit(node.min);
    visit(node.extent);
    bind(node.var, node.body);
  }
  void visit_for(const For& node) override {
    visit(node.min);
    visit(node.extent);
    bind(node.var, node.body);
  }
  void visit_let_stmt(const LetStmt& node) override {
    visit(node.value);
    bind(node.name, node.body);
  }

 private:
  template <typename Node>
  void bind(const std::string& name, const Node& body) {
    const bool inserted = bound_.insert(name).second;
    visit(body);
    if (inserted) bound_.erase(name);
  }

  std::set<std::string, std::less<>> bound_;
};

}  // namespace

Expr substitute(const Expr& expr, const Substitution& replacements) {
  if (replacements.empty()) return expr;
  return Substituter(replacements).mutate(expr);
}

Stmt substitute(const Stmt& stmt, const Substitution& replacements) {
  if (replacements.empty()) return stmt;
  return Substituter(replacements).mutate(stmt);
}

Expr substitute(const Expr& expr, const std::string& name, const Expr& replacement) {
  return substitute(expr, Substitution{{name, replacement}});
}

Stmt substitute(const Stmt& stmt, const std::string& name, const Expr& replacement) {
  return substitute(stmt, Substitution{{name, replacement}});
}

std::set<std::string, std::less<>> free_vars(const Expr& expr) {
  UseCollector collector;
  collector.visit(expr);
  return std::move(collector.free);
}

bool uses_var(const Expr& expr, std::string_view name) { return free_vars(expr).contains(name); }

std::set<std::string, std::less<>> buffers_used(const Expr& expr) {
  UseCollector collector;
  collector.visit(expr);
  return std::move(collector.buffers);
}

bool uses_var(const Stmt& stmt, std::string_view name) {
  UseCollector collector;
  collector.visit(stmt);
  return collector.free.contains(name);
}

namespace {

class DivisionFinder : public IRVisitor {
 public:
  explicit DivisionFinder(std::string_view name) : name_(name) {}
  bool found = false;

 protected:
  void visit_binary(const Binary& node) override {
    found = found || ((node.op == BinaryOp::div || node.op == BinaryOp::mod) &&
                      (uses_var(node.a, name_) || uses_var(node.b, name_)));
    IRVisitor::visit_binary(node);
  }

 private:
  std::string_view name_;
};

}  // namespace

bool divides_var(const Expr& expr, std::string_view name) {
  DivisionFinder finder(name);
  finder.visit(expr);
  return finder.found;
}

bool divides_var(const Stmt& stmt, std::string_view name) {
  DivisionFinder finder(name);
  finder.visit(stmt);
  return finder.found;
}

bool uses_buffer(const Stmt& stmt, std::string_view name) {
  UseCollector collector;
  collector.visit(stmt);
  return collector.buffers.contains(name);
}

bool contains_gemm(const Stmt& stmt) {
  struct Finder : IRVisitor {
    bool found = false;
    void visit_library_call(const LibraryCall& call) override {
      found = found || call.op == LibraryOp::gemm;
    }
  } finder;
  finder.visit(stmt);
  return finder.found;
}

}  // namespace kiln::loop
