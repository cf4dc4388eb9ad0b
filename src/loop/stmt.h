// Loop IR statements and kernels: immutable trees of loops, stores, lets, allocations,
// conditionals and sequences over the expressions of loop/expr.h.
//
// Semantics (executed by loop/evaluator.h):
//  - `for (v, min, extent) body` runs body for v = min, min+1, ..., min+extent-1 (not at all
//    when extent <= 0); min and extent are i64 and evaluated once, before the first
//    iteration. The loop's kind changes how code generators run it, never what it computes:
//    `parallel` and `vectorized` promise that iterations are independent (the scheduler that
//    sets them proves it), `unrolled` asks for the body to be copied. Vectorized and unrolled
//    loops have constant extents.
//  - `store(b, i, v)` writes v (of b's element type) to element i of buffer b.
//  - `let_stmt(v, value, body)` binds v in body; `allocate(b, body)` makes a local buffer b,
//    uninitialised, that lives for body's execution (per iteration of enclosing loops).
//  - `if_then_else(c, then, else)` (else optional), `block(s...)` runs statements in order.
//    The empty block is the no-op.
// A Kernel is a name, its parameter buffers (scope global) and a body that reads and writes
// them; it is what lowering produces, scheduling transforms and code generators consume.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loop/buffer.h"
#include "loop/expr.h"

namespace kiln::loop {

enum class StmtKind : uint8_t { for_loop, store, let_stmt, allocate, if_then_else, block };
enum class ForKind : uint8_t { serial, parallel, vectorized, unrolled };

std::string_view for_kind_name(ForKind kind);

struct StmtNode {
  explicit StmtNode(StmtKind node_kind) : kind(node_kind) {}
  virtual ~StmtNode() = default;
  StmtNode(const StmtNode&) = delete;
  StmtNode& operator=(const StmtNode&) = delete;

  const StmtKind kind;
};

class Stmt {
 public:
  Stmt() = default;
  explicit Stmt(std::shared_ptr<const StmtNode> node) : node_(std::move(node)) {}

  bool defined() const { return node_ != nullptr; }
  const StmtNode* get() const { return node_.get(); }
  StmtKind kind() const { return node_->kind; }
  template <typename T>
  const T* as() const {
    return node_ && node_->kind == T::kKind ? static_cast<const T*>(node_.get()) : nullptr;
  }
  bool same_as(const Stmt& other) const { return node_ == other.node_; }

 private:
  std::shared_ptr<const StmtNode> node_;
};

struct For final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::for_loop;
  For(std::string v, Expr lo, Expr n, ForKind k, Stmt b)
      : StmtNode(kKind), var(std::move(v)), min(std::move(lo)), extent(std::move(n)),
        for_kind(k), body(std::move(b)) {}
  const std::string var;
  const Expr min, extent;
  const ForKind for_kind;
  const Stmt body;
};

struct Store final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::store;
  Store(Buffer buf, Expr i, Expr v)
      : StmtNode(kKind), buffer(std::move(buf)), index(std::move(i)), value(std::move(v)) {}
  const Buffer buffer;
  const Expr index, value;
};

struct LetStmt final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::let_stmt;
  LetStmt(std::string n, Expr v, Stmt b)
      : StmtNode(kKind), name(std::move(n)), value(std::move(v)), body(std::move(b)) {}
  const std::string name;
  const Expr value;
  const Stmt body;
};

struct Allocate final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::allocate;
  Allocate(Buffer buf, Stmt b) : StmtNode(kKind), buffer(std::move(buf)), body(std::move(b)) {}
  const Buffer buffer;  // a local buffer (scope other than global)
  const Stmt body;
};

struct IfThenElse final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::if_then_else;
  IfThenElse(Expr c, Stmt t, Stmt e)
      : StmtNode(kKind), condition(std::move(c)), then_case(std::move(t)),
        else_case(std::move(e)) {}
  const Expr condition;
  const Stmt then_case;
  const Stmt else_case;  // undefined when there is no else
};

struct Block final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::block;
  explicit Block(std::vector<Stmt> s) : StmtNode(kKind), stmts(std::move(s)) {}
  const std::vector<Stmt> stmts;
};

Stmt for_loop(std::string var, Expr min, Expr extent, ForKind kind, Stmt body);
inline Stmt for_loop(std::string var, Expr min, Expr extent, Stmt body) {
  return for_loop(std::move(var), std::move(min), std::move(extent), ForKind::serial,
                  std::move(body));
}
Stmt store(Buffer buffer, Expr index, Expr value);
// store(buffer, element_offset(buffer, indices), value).
Stmt store(const Buffer& buffer, const std::vector<Expr>& indices, Expr value);
Stmt let_stmt(std::string name, Expr value, Stmt body);
Stmt allocate(Buffer buffer, Stmt body);
Stmt if_then_else(Expr condition, Stmt then_case, Stmt else_case = Stmt());
Stmt block(std::vector<Stmt> stmts);
Stmt no_op();  // the empty block
bool is_no_op(const Stmt& stmt);

struct Kernel {
  std::string name;
  std::vector<Buffer> params;
  Stmt body;
};

}  // namespace kiln::loop
