#include "loop/schedule_analysis.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "loop/simplify.h"
#include "loop/substitute.h"

namespace kiln::loop {
namespace {

// Adds scale * e to `form`; false when a coefficient overflows.
bool add_linear(const Expr& e, int64_t scale, LinearForm& form) {
  if (e.type() == DType::i64) {
    if (const auto value = as_const_int(e)) {
      int64_t product = 0;
      return !__builtin_mul_overflow(*value, scale, &product) &&
             !__builtin_add_overflow(form.constant, product, &form.constant);
    }
    if (const auto* node = e.as<Binary>()) {
      switch (node->op) {
        case BinaryOp::add:
          return add_linear(node->a, scale, form) && add_linear(node->b, scale, form);
        case BinaryOp::sub:
          return scale != INT64_MIN && add_linear(node->a, scale, form) &&
                 add_linear(node->b, -scale, form);
        case BinaryOp::mul: {
          const std::optional<int64_t> ca = as_const_int(node->a), cb = as_const_int(node->b);
          int64_t product = 0;
          if (cb && !__builtin_mul_overflow(*cb, scale, &product)) {
            return add_linear(node->a, product, form);
          }
          if (ca && !__builtin_mul_overflow(*ca, scale, &product)) {
            return add_linear(node->b, product, form);
          }
          break;
        }
        default:
          break;
      }
    }
  }
  auto [it, inserted] = form.terms.try_emplace(print(e), LinearForm::Term{e, 0});
  if (__builtin_add_overflow(it->second.coefficient, scale, &it->second.coefficient)) return false;
  if (it->second.coefficient == 0) form.terms.erase(it);
  return true;
}

// Whether `e` loads any of `buffers`.
bool reads_any(const Expr& e, const std::set<std::string, std::less<>>& buffers) {
  for (const std::string& name : buffers_used(e)) {
    if (buffers.count(name) != 0) return true;
  }
  return false;
}

bool uses_any(const Expr& e, const std::set<std::string, std::less<>>& names) {
  for (const std::string& name : free_vars(e)) {
    if (names.count(name) != 0) return true;
  }
  return false;
}

class AccessCollector : public IRVisitor {
 public:
  explicit AccessCollector(const BoundsScope& scope) : scope_(scope) {}
  Accesses result;

 protected:
  void visit_for(const For& node) override {
    visit(node.min);
    visit(node.extent);
    bind(node.var, loop_interval(node, scope_));
    visit(node.body);
    scope_.erase(node.var);
  }
  void visit_reduce(const Reduce& node) override {
    visit(node.min);
    visit(node.extent);
    bind(node.var, loop_var_bounds(bounds_of(node.min, scope_), bounds_of(node.extent, scope_)));
    visit(node.body);
    scope_.erase(node.var);
  }
  void visit_let(const Let& node) override {
    visit(node.value);
    bind(node.name, value_interval(node.value));
    visit(node.body);
    scope_.erase(node.name);
  }
  void visit_let_stmt(const LetStmt& node) override {
    visit(node.value);
    bind(node.name, value_interval(node.value));
    visit(node.body);
    scope_.erase(node.name);
  }
  void visit_allocate(const Allocate& node) override {
    result.allocated.insert(node.buffer.name());
    visit(node.body);
  }
  void visit_store(const Store& node) override {
    result.list.push_back({node.buffer, node.index, true, nullptr, scope_});
    IRVisitor::visit_store(node);
  }
  void visit_load(const Load& node) override {
    result.list.push_back({node.buffer, node.index, false, &node, scope_});
    IRVisitor::visit_load(node);
  }

 private:
  Interval value_interval(const Expr& value) const {
    return is_floating(value.type()) ? Interval::everything() : bounds_of(value, scope_);
  }
  void bind(const std::string& name, Interval interval) {
    result.bound_names.insert(name);
    scope_[name] = interval;
  }

  BoundsScope scope_;
};

// A term that uses v as the digit (v / divisor) % modulus of v's mixed-radix expansion.
struct Digit {
  int64_t divisor = 1;
  std::optional<int64_t> modulus = {};
};

std::optional<Digit> as_digit(const Expr& e, std::string_view v) {
  auto is_v = [&](const Expr& x) {
    const auto* variable = x.as<Variable>();
    return variable != nullptr && variable->name == v;
  };
  auto positive_constant = [](const Expr& x) -> std::optional<int64_t> {
    const std::optional<int64_t> value = as_const_int(x);
    return value && *value > 0 ? value : std::nullopt;
  };
  if (is_v(e)) return Digit{};
  const auto* node = e.as<Binary>();
  if (node == nullptr) return std::nullopt;
  if (node->op == BinaryOp::div) {
    const std::optional<int64_t> d = positive_constant(node->b);
    if (d && is_v(node->a)) return Digit{*d};
    return std::nullopt;
  }
  if (node->op != BinaryOp::mod) return std::nullopt;
  const std::optional<int64_t> m = positive_constant(node->b);
  if (!m) return std::nullopt;
  if (is_v(node->a)) return Digit{1, *m};
  const auto* inner = node->a.as<Binary>();
  if (inner == nullptr || inner->op != BinaryOp::div) return std::nullopt;
  const std::optional<int64_t> d = positive_constant(inner->b);
  if (d && is_v(inner->a)) return Digit{*d, *m};
  return std::nullopt;
}

// An access split into the digits of v, the terms fixed for the whole loop, and the interval
// of the rest.
struct SplitAccess {
  std::map<std::string, std::pair<Digit, int64_t>, std::less<>> digits;  // key -> coefficient
  std::map<std::string, int64_t, std::less<>> outer;
  Interval rest;
};

// A term that loads only buffers the loop does not write, and uses no name bound inside it,
// is fixed for the whole loop like a term of outer variables (a scatter's row, loaded from its
// indices).
Expected<SplitAccess> split_access(const Access& access, const std::string& v,
                                   const std::set<std::string, std::less<>>& inner_names,
                                   const std::set<std::string, std::less<>>& written) {
  const std::string where = fmt::format("{}[{}]", access.buffer.name(), print(access.index));
  // Simplified first, so that fused and split variables read as digits ((0 + f/4)/3 is f/12).
  const std::optional<LinearForm> form = linearize(simplify(access.index, access.scope));
  if (!form) return Status::errorf("the index of {} overflows", where);
  SplitAccess result{{}, {}, Interval::point(form->constant)};
  for (const auto& [key, term] : form->terms) {
    if (uses_var(term.expr, v)) {
      const std::optional<Digit> digit = as_digit(term.expr, v);
      if (!digit) {
        return Status::errorf("{} uses {} other than as {}, {} / c or {} % c", where, v, v, v, v);
      }
      result.digits.emplace(key, std::make_pair(*digit, term.coefficient));
    } else if (uses_any(term.expr, inner_names) || reads_any(term.expr, written)) {
      result.rest = result.rest + bounds_of(term.expr, access.scope) * term.coefficient;
    } else {
      result.outer.emplace(key, term.coefficient);
    }
  }
  if (result.digits.empty()) {
    return Status::errorf("every iteration of {} accesses {}", v, where);
  }
  return result;
}

bool same_digits(const SplitAccess& a, const SplitAccess& b) {
  if (a.digits.size() != b.digits.size()) return false;
  for (const auto& [key, digit] : a.digits) {
    const auto it = b.digits.find(key);
    if (it == b.digits.end() || it->second.second != digit.second) return false;
  }
  return true;
}

// The second proof for one written buffer: every access has the same linear index, whose terms
// in v and in loop variables inside are plain variables over intervals, with strides that form
// a mixed radix (each larger than what all the smaller ones can add up to). The index is then
// one-to-one in those variables, so different iterations of v touch different elements: a
// transpose, whose inner loop has the larger stride (b[j*8 + v] for j inside v), passes where
// the first proof sees the span of j*8 exceed v's stride. The other terms must be fixed for
// the loop (outer variables, or loads of buffers it does not write).
bool one_to_one_index(const std::string& v, const std::vector<const Access*>& accesses,
                      const std::set<std::string, std::less<>>& inner_names,
                      const std::set<std::string, std::less<>>& written) {
  std::optional<LinearForm> first;
  std::vector<std::pair<int64_t, int64_t>> strides;  // |coefficient|, the variable's width
  bool uses_v = false;
  for (const Access* access : accesses) {
    const std::optional<LinearForm> form = linearize(simplify(access->index, access->scope));
    if (!form) return false;
    if (first) {
      if (form->constant != first->constant || form->terms.size() != first->terms.size()) {
        return false;
      }
      for (const auto& [key, term] : form->terms) {
        const auto it = first->terms.find(key);
        if (it == first->terms.end() || it->second.coefficient != term.coefficient) return false;
      }
      continue;
    }
    first = form;
    for (const auto& [key, term] : form->terms) {
      const auto* variable = term.expr.as<Variable>();
      const bool varies = uses_var(term.expr, v) || uses_any(term.expr, inner_names);
      if (!varies) {
        if (reads_any(term.expr, written)) return false;
        continue;
      }
      if (variable == nullptr) return false;
      uses_v = uses_v || variable->name == v;
      const auto bounds = access->scope.find(variable->name);
      if (bounds == access->scope.end() || !bounds->second.is_bounded()) return false;
      int64_t width = 0;
      if (term.coefficient == INT64_MIN ||
          __builtin_sub_overflow(*bounds->second.max, *bounds->second.min, &width)) {
        return false;
      }
      strides.emplace_back(std::abs(term.coefficient), width);
    }
  }
  if (!uses_v) return false;  // every iteration touches the same elements
  std::sort(strides.begin(), strides.end());
  int64_t reach = 0;  // the most the smaller strides add up to
  for (const auto& [stride, width] : strides) {
    if (stride <= reach) return false;
    int64_t add = 0;
    if (__builtin_mul_overflow(stride, width, &add) || __builtin_add_overflow(reach, add, &reach)) {
      return false;
    }
  }
  return true;
}

// The third proof for one written buffer: v is a plain term of stride s, the same in every
// index, and the rest splits into *row* terms, whose coefficients are multiples of a row
// length m, and *column* terms of coefficient at most s (with each index's constant, less a
// multiple of m, in its column), spanning c < s. With s * (v's extent - 1) + c < m, two
// iterations land in different columns of any one row, or in different rows. This is an
// im2col over a batch whose images' columns lie side by side,
// col[(ch*9 + ky*3 + kx) * 392 + n*49 + oy*7 + ox], n of stride 49 in rows of 392 = 8 * 49,
// where the first proof counts ch*3528 in the span. The row length tried is v's extent times
// s (the tightest the columns allow), then the gcd of the row terms' coefficients.
bool disjoint_within_rows(const std::string& v, const Interval& v_range,
                          const std::vector<const Access*>& accesses,
                          const std::set<std::string, std::less<>>& inner_names,
                          const std::set<std::string, std::less<>>& written) {
  if (!v_range.is_bounded()) return false;
  std::vector<std::pair<const Access*, LinearForm>> forms;
  for (const Access* access : accesses) {
    std::optional<LinearForm> form = linearize(simplify(access->index, access->scope));
    if (!form) return false;
    forms.emplace_back(access, std::move(*form));
  }
  const auto varies = [&](const Expr& term) {
    return uses_any(term, inner_names) || reads_any(term, written);
  };
  // v's signed stride, the same in every index; the terms fixed for the loop, the same too.
  int64_t signed_stride = 0;
  const LinearForm& first = forms.front().second;
  for (const auto& [access, form] : forms) {
    int64_t coefficient = 0;
    for (const auto& [key, term] : form.terms) {
      if (uses_var(term.expr, v)) {
        const auto* variable = term.expr.as<Variable>();
        if (variable == nullptr || variable->name != v) return false;
        coefficient = term.coefficient;
      } else if (!varies(term.expr)) {
        const auto it = first.terms.find(key);
        if (it == first.terms.end() || it->second.coefficient != term.coefficient) return false;
      }
    }
    if (coefficient == 0 || coefficient == INT64_MIN ||
        (signed_stride != 0 && coefficient != signed_stride)) {
      return false;
    }
    signed_stride = coefficient;
  }
  const int64_t stride = std::abs(signed_stride);
  int64_t row_terms = 0;  // the gcd of the row terms' coefficients
  for (const auto& [access, form] : forms) {
    for (const auto& [key, term] : form.terms) {
      if (uses_var(term.expr, v) || !varies(term.expr)) continue;
      if (term.coefficient == INT64_MIN) return false;
      if (std::abs(term.coefficient) > stride) {
        row_terms = std::gcd(row_terms, std::abs(term.coefficient));
      }
    }
  }
  int64_t reach = 0;  // what v's term spans
  if (__builtin_mul_overflow(stride, *v_range.max - *v_range.min, &reach)) return false;
  const auto proves = [&](int64_t row) {
    if (row <= 0 || (row_terms % row) != 0) return false;
    Interval columns;
    for (size_t a = 0; a < forms.size(); ++a) {
      const auto& [access, form] = forms[a];
      int64_t difference = 0;
      if (__builtin_sub_overflow(form.constant, first.constant, &difference)) return false;
      Interval column = Interval::point(((difference % row) + row) % row);
      for (const auto& [key, term] : form.terms) {
        if (uses_var(term.expr, v) || !varies(term.expr) || std::abs(term.coefficient) > stride) {
          continue;
        }
        column = column + bounds_of(term.expr, access->scope) * term.coefficient;
      }
      columns = a == 0 ? column : Interval::make_union(columns, column);
    }
    int64_t span = 0, total = 0;
    return columns.is_bounded() && !__builtin_sub_overflow(*columns.max, *columns.min, &span) &&
           span < stride && !__builtin_add_overflow(reach, span, &total) && total < row;
  };
  int64_t tightest = 0;
  if (__builtin_add_overflow(reach, stride, &tightest)) return false;
  return proves(tightest) || proves(row_terms);
}

// The proof for one written buffer, given all of its accesses inside the loop.
Status check_disjoint(const std::string& v, const Interval& v_range,
                      const std::vector<const Access*>& accesses,
                      const std::set<std::string, std::less<>>& inner_names,
                      const std::set<std::string, std::less<>>& written) {
  std::optional<SplitAccess> first;
  Interval rest;
  for (const Access* access : accesses) {
    Expected<SplitAccess> split = split_access(*access, v, inner_names, written);
    if (!split) return split.status();
    if (!first) {
      first = *split;
      rest = split->rest;
    } else if (!same_digits(*first, *split) || first->outer != split->outer) {
      return Status::errorf(
          "{}[{}] and {}[{}] may touch the same element in different "
          "iterations of {}",
          access->buffer.name(), print(accesses[0]->index), access->buffer.name(),
          print(access->index), v);
    } else {
      rest = Interval::make_union(rest, split->rest);
    }
  }
  const std::string name = accesses[0]->buffer.name();
  if (!rest.is_bounded()) {
    return Status::errorf("cannot bound the part of the indices of {} that does not depend on {}",
                          name, v);
  }
  std::vector<std::pair<Digit, int64_t>> digits;
  for (const auto& [key, digit] : first->digits) digits.push_back(digit);
  std::sort(digits.begin(), digits.end(),
            [](const auto& a, const auto& b) { return a.first.divisor < b.first.divisor; });
  int64_t span = 0;
  if (__builtin_sub_overflow(*rest.max, *rest.min, &span)) {
    return Status::errorf("the indices of {} span more than int64", name);
  }
  int64_t expected_divisor = 1;
  for (size_t j = 0; j < digits.size(); ++j) {
    const auto& [digit, coefficient] = digits[j];
    if (digit.divisor != expected_divisor) {
      return Status::errorf(
          "the indices of {} do not determine {}: iterations that differ "
          "only below {} / {} touch the same element",
          name, v, v, digit.divisor);
    }
    if (coefficient == INT64_MIN) return Status::errorf("the indices of {} overflow", name);
    const int64_t magnitude = std::abs(coefficient);
    if (magnitude <= span) {
      return Status::errorf(
          "iterations of {} may touch the same element of {}: its stride {} "
          "does not exceed the span {} of the rest of the index",
          v, name, coefficient, span);
    }
    const bool last = j + 1 == digits.size();
    if (!digit.modulus) {
      if (!last) {
        return Status::errorf("the indices of {} use {} / {} below a higher digit", name, v,
                              digit.divisor);
      }
      continue;
    }
    int64_t digit_span = 0;
    if (__builtin_mul_overflow(digit.divisor, *digit.modulus, &expected_divisor) ||
        __builtin_mul_overflow(magnitude, *digit.modulus - 1, &digit_span) ||
        __builtin_add_overflow(span, digit_span, &span)) {
      return Status::errorf("the indices of {} overflow", name);
    }
    if (last && !(v_range.is_bounded() && *v_range.min >= 0 && *v_range.max < expected_divisor)) {
      return Status::errorf("the indices of {} repeat when {} passes a multiple of {}", name, v,
                            expected_divisor);
    }
  }
  return Status::ok();
}

}  // namespace

std::optional<LinearForm> linearize(const Expr& index) {
  LinearForm form;
  if (!add_linear(index, 1, form)) return std::nullopt;
  return form;
}

Expr to_expr(const LinearForm& form) {
  Expr result;
  for (const auto& [key, term] : form.terms) {
    const Expr scaled = term.coefficient == 1 ? term.expr : term.expr * term.coefficient;
    result = result.defined() ? result + scaled : scaled;
  }
  if (!result.defined()) return Expr(form.constant);
  return form.constant == 0 ? result : result + form.constant;
}

std::optional<int64_t> stride_of(const Expr& index, std::string_view var) {
  const std::optional<LinearForm> form = linearize(simplify(index));
  if (!form) return std::nullopt;
  int64_t stride = 0;
  for (const auto& [key, term] : form->terms) {
    if (!uses_var(term.expr, var)) continue;
    const auto* variable = term.expr.as<Variable>();
    if (variable == nullptr) return std::nullopt;
    stride = term.coefficient;
  }
  return stride;
}

const For* find_loop(const Stmt& stmt, std::string_view var) {
  class Finder : public IRVisitor {
   public:
    explicit Finder(std::string_view name) : name_(name) {}
    const For* found = nullptr;

   protected:
    void visit_for(const For& node) override {
      if (found != nullptr) return;
      if (node.var == name_) {
        found = &node;
        return;
      }
      IRVisitor::visit_for(node);
    }

   private:
    std::string_view name_;
  } finder(var);
  finder.visit(stmt);
  return finder.found;
}

namespace {

class ReduceFinder : public IRVisitor {
 public:
  bool found = false;

 protected:
  void visit_reduce(const Reduce&) override { found = true; }
};

}  // namespace

bool contains_reduce(const Expr& e) {
  ReduceFinder finder;
  finder.visit(e);
  return finder.found;
}

bool contains_reduce(const Stmt& stmt) {
  ReduceFinder finder;
  finder.visit(stmt);
  return finder.found;
}

bool contains_loop(const Stmt& stmt) {
  class Finder : public IRVisitor {
   public:
    bool found = false;

   protected:
    void visit_for(const For&) override { found = true; }
  } finder;
  finder.visit(stmt);
  return finder.found;
}

bool all_statements_known(const Stmt& stmt) {
  switch (stmt.kind()) {
    case StmtKind::store:
      return true;
    case StmtKind::for_loop:
      return all_statements_known(stmt.as<For>()->body);
    case StmtKind::let_stmt:
      return all_statements_known(stmt.as<LetStmt>()->body);
    case StmtKind::allocate:
      return all_statements_known(stmt.as<Allocate>()->body);
    case StmtKind::if_then_else: {
      const auto* node = stmt.as<IfThenElse>();
      return all_statements_known(node->then_case) &&
             (!node->else_case.defined() || all_statements_known(node->else_case));
    }
    case StmtKind::block:
      return std::all_of(stmt.as<Block>()->stmts.begin(), stmt.as<Block>()->stmts.end(),
                         [](const Stmt& s) { return all_statements_known(s); });
    default:
      return false;  // a kind added after this analysis: opaque
  }
}

namespace {

using NameSet = std::set<std::string, std::less<>>;

// Buffers a statement reads and writes; nullopt when it holds a statement the analysis does
// not know (a gemm), whose accesses are not listed.
struct BufferUse {
  NameSet reads, writes;
};

std::optional<BufferUse> buffer_use(const Stmt& stmt) {
  if (!all_statements_known(stmt)) return std::nullopt;
  BufferUse use;
  for (const Access& access : collect_accesses(stmt, {}).list) {
    (access.is_store ? use.writes : use.reads).insert(access.buffer.name());
  }
  return use;
}

}  // namespace

bool statements_commute(const Stmt& a, const Stmt& b) {
  const std::optional<BufferUse> x = buffer_use(a), y = buffer_use(b);
  if (!x || !y) return false;
  const auto meets = [](const NameSet& p, const NameSet& q) {
    return std::any_of(p.begin(), p.end(), [&](const std::string& n) { return q.count(n) != 0; });
  };
  return !meets(x->writes, y->reads) && !meets(x->writes, y->writes) && !meets(y->writes, x->reads);
}

Accesses collect_accesses(const Stmt& stmt, const BoundsScope& scope) {
  AccessCollector collector(scope);
  collector.visit(stmt);
  return std::move(collector.result);
}

Interval loop_interval(const For& loop, const BoundsScope& scope) {
  return loop_var_bounds(bounds_of(loop.min, scope), bounds_of(loop.extent, scope));
}

Status check_independent(const For& loop, const BoundsScope& scope) {
  if (!all_statements_known(loop.body)) {
    return Status::errorf("loop {} holds a statement the scheduler cannot analyse", loop.var);
  }
  const Interval v_range = loop_interval(loop, scope);
  BoundsScope inside = scope;
  inside[loop.var] = v_range;
  const Accesses accesses = collect_accesses(loop.body, inside);
  std::map<std::string, std::vector<const Access*>, std::less<>> by_buffer;
  std::set<std::string, std::less<>> written_buffers;
  for (const Access& access : accesses.list) {
    by_buffer[access.buffer.name()].push_back(&access);
    if (access.is_store) written_buffers.insert(access.buffer.name());
  }
  for (const auto& [name, list] : by_buffer) {
    if (written_buffers.count(name) == 0 || accesses.allocated.count(name) != 0) continue;
    const Status disjoint =
        check_disjoint(loop.var, v_range, list, accesses.bound_names, written_buffers);
    if (!disjoint && !one_to_one_index(loop.var, list, accesses.bound_names, written_buffers) &&
        !disjoint_within_rows(loop.var, v_range, list, accesses.bound_names, written_buffers)) {
      return disjoint;
    }
  }
  return Status::ok();
}

}  // namespace kiln::loop
