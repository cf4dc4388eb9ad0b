#include "loop/schedule_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "loop/default_schedule.h"
#include "loop/schedule_analysis.h"
#include "loop/tuning.h"

namespace kiln::loop {
namespace {

constexpr double kCacheLineBytes = 64;
// The ridge's weight: with few measurements the fit stays near the plain model.
constexpr double kRidge = 1.0;

// Where a statement or expression runs: how often, in how many lanes, on how many cores, and
// the innermost loop or reduction variable around it (what "contiguous" is measured along).
struct Context {
  double count = 1;
  double lanes = 1;
  double cores = 1;
  std::string inner;
};

double extent_of(const Expr& extent) {
  const std::optional<int64_t> value = as_const_int(extent);
  return value ? static_cast<double>(std::max<int64_t>(*value, 0)) : 1.0;
}

// The cost of one top-level statement, and the totals the features are made of.
class NestCost {
 public:
  explicit NestCost(const CostMachine& machine) : machine_(machine) {}

  double compute_seconds = 0, memory_seconds = 0, parallel_starts = 0;
  double ops = 0, vector_ops = 0, math_ops = 0, bytes = 0, strided_bytes = 0;

  void stmt(const Stmt& s, const Context& c) {
    switch (s.kind()) {
      case StmtKind::for_loop:
        loop(*s.as<For>(), c);
        return;
      case StmtKind::store: {
        const auto* node = s.as<Store>();
        operations(1, c);
        expr(node->index, c);
        expr(node->value, c);
        access(node->buffer, node->index, c);
        return;
      }
      case StmtKind::let_stmt:
        expr(s.as<LetStmt>()->value, c);
        stmt(s.as<LetStmt>()->body, c);
        return;
      case StmtKind::allocate:
        stmt(s.as<Allocate>()->body, c);
        return;
      case StmtKind::if_then_else: {
        const auto* node = s.as<IfThenElse>();
        expr(node->condition, c);
        stmt(node->then_case, c);
        if (node->else_case.defined()) stmt(node->else_case, c);
        return;
      }
      case StmtKind::block:
        for (const Stmt& child : s.as<Block>()->stmts) stmt(child, c);
        return;
      case StmtKind::library_call:
        return;  // the same library call in every candidate: it does not rank them
    }
  }

 private:
  void loop(const For& node, const Context& outer) {
    const double extent = extent_of(node.extent);
    Context c = outer;
    c.count *= extent;
    c.inner = node.var;
    if (node.for_kind == ForKind::parallel && outer.cores == 1) {
      const double rounds = std::ceil(extent / machine_.cores);
      c.cores = rounds > 0 ? extent / rounds : 1;
      parallel_starts += outer.count;
    }
    if (node.for_kind == ForKind::vectorized) {
      c.lanes = static_cast<double>(
          std::max<int64_t>(1, lanes_of_widest(node.body, machine_.vector_bytes)));
    }
    if (node.for_kind != ForKind::unrolled) operations(1, c);  // the loop's own counting
    stmt(node.body, c);
  }

  void expr(const Expr& e, const Context& c) {
    switch (e.kind()) {
      case ExprKind::int_imm:
      case ExprKind::float_imm:
      case ExprKind::variable:
        return;
      case ExprKind::binary:
        operations(1, c);
        expr(e.as<Binary>()->a, c);
        expr(e.as<Binary>()->b, c);
        return;
      case ExprKind::logical_not:
        operations(1, c);
        expr(e.as<Not>()->a, c);
        return;
      case ExprKind::select:
        operations(1, c);
        expr(e.as<Select>()->condition, c);
        expr(e.as<Select>()->true_value, c);
        expr(e.as<Select>()->false_value, c);
        return;
      case ExprKind::cast:
        operations(1, c);
        expr(e.as<Cast>()->value, c);
        return;
      case ExprKind::load: {
        const auto* node = e.as<Load>();
        const bool gathered = c.lanes > 1 && !contiguous(node->index, c.inner);
        Context scalar = c;
        if (gathered) scalar.lanes = 1;
        operations(1, scalar);
        expr(node->index, c);
        access(node->buffer, node->index, c);
        return;
      }
      case ExprKind::call: {
        const auto* node = e.as<Call>();
        if (is_math_call(node->intrinsic)) {
          const bool vector_body = machine_.vector_math && node->intrinsic != Intrinsic::pow;
          Context where = c;
          if (!vector_body) where.lanes = 1;
          operations(static_cast<double>(kMathCallWork), where);
          math_ops += static_cast<double>(kMathCallWork) * c.count;
        } else {
          operations(1, c);
        }
        for (const Expr& arg : node->args) expr(arg, c);
        return;
      }
      case ExprKind::let:
        expr(e.as<Let>()->value, c);
        expr(e.as<Let>()->body, c);
        return;
      case ExprKind::reduce: {
        const auto* node = e.as<Reduce>();
        Context terms = c;
        terms.count *= extent_of(node->extent);
        terms.inner = node->var;
        if (node->vectorized) terms.lanes = static_cast<double>(machine_.vector_bytes) / 4;
        operations(1, terms);  // combining each term
        expr(node->body, terms);
        return;
      }
    }
  }

  static bool contiguous(const Expr& index, const std::string& inner) {
    const std::optional<int64_t> stride = stride_of(index, inner);
    return stride && (*stride == 0 || *stride == 1 || *stride == -1);
  }

  void operations(double n, const Context& c) {
    const double total = n * c.count;
    ops += total;
    if (c.lanes > 1) vector_ops += total;
    compute_seconds += total / (c.lanes * c.cores * machine_.ops_per_second);
  }

  void access(const Buffer& buffer, const Expr& index, const Context& c) {
    const std::optional<int64_t> stride = stride_of(index, c.inner);
    if (stride == 0) return;  // invariant along the innermost loop: held in a register
    const double element = static_cast<double>(dtype_size_bytes(buffer.dtype()));
    const bool strided = !stride || std::abs(*stride) != 1;
    const double moved =
        (strided ? std::min(kCacheLineBytes, element * std::abs(static_cast<double>(
                                                            stride.value_or(64))))
                 : element) *
        c.count;
    bytes += moved;
    if (strided) strided_bytes += moved;
    const bool global = buffer.scope() == MemoryScope::global;
    const double footprint = static_cast<double>(buffer.flat_size()) * element;
    double bandwidth = machine_.cache_bandwidth * c.cores;
    if (global && footprint > static_cast<double>(machine_.l2_bytes)) {
      const double share =
          machine_.cores <= 1 ? 1.0 : 0.5 + 0.5 * (c.cores - 1) / (machine_.cores - 1);
      bandwidth = machine_.memory_bandwidth * std::min(1.0, share);
    }
    memory_seconds += moved / bandwidth;
  }

  const CostMachine& machine_;
};

// The top-level statements of a kernel's body: through its blocks, allocations and lets.
void top_level(const Stmt& s, std::vector<Stmt>& out) {
  if (const auto* seq = s.as<Block>()) {
    for (const Stmt& child : seq->stmts) top_level(child, out);
  } else if (const auto* alloc = s.as<Allocate>()) {
    top_level(alloc->body, out);
  } else if (const auto* let = s.as<LetStmt>()) {
    top_level(let->body, out);
  } else {
    out.push_back(s);
  }
}

double safe_ratio(double a, double b) { return b > 0 ? a / b : 0; }

}  // namespace

CostEstimate estimate_cost(const Kernel& scheduled, const CostMachine& machine) {
  std::vector<Stmt> nests;
  top_level(scheduled.body, nests);
  CostEstimate estimate;
  NestCost total(machine);
  for (const Stmt& nest : nests) {
    NestCost cost(machine);
    cost.stmt(nest, {});
    estimate.seconds += std::max(cost.compute_seconds, cost.memory_seconds) +
                        cost.parallel_starts * machine.parallel_start;
    total.compute_seconds += cost.compute_seconds;
    total.memory_seconds += cost.memory_seconds;
    total.parallel_starts += cost.parallel_starts;
    total.ops += cost.ops;
    total.vector_ops += cost.vector_ops;
    total.math_ops += cost.math_ops;
    total.bytes += cost.bytes;
    total.strided_bytes += cost.strided_bytes;
  }
  // A kernel that does nothing still costs a call.
  estimate.seconds = std::max(estimate.seconds, 1e-8);
  estimate.features = {1.0,
                       safe_ratio(total.memory_seconds,
                                  total.compute_seconds + total.memory_seconds),
                       safe_ratio(total.vector_ops, total.ops),
                       safe_ratio(total.strided_bytes, total.bytes),
                       total.parallel_starts > 0 ? 1.0 : 0.0,
                       safe_ratio(total.math_ops, total.ops)};
  return estimate;
}

double CostFit::corrected(const CostEstimate& estimate) const {
  double correction = 0;
  for (size_t i = 0; i < kCostFeatures; ++i) correction += weights_[i] * estimate.features[i];
  return estimate.seconds * std::exp(correction);
}

void CostFit::add(const CostEstimate& estimate, double measured_seconds) {
  if (!(measured_seconds > 0) || !(estimate.seconds > 0)) return;
  const double residual = std::log(measured_seconds / estimate.seconds);
  for (size_t i = 0; i < kCostFeatures; ++i) {
    for (size_t j = 0; j < kCostFeatures; ++j) {
      gram_[i][j] += estimate.features[i] * estimate.features[j];
    }
    moment_[i] += estimate.features[i] * residual;
  }
  ++measurements_;
  solve();
}

void CostFit::solve() {
  // Solve (gram + ridge I) w = moment by Gaussian elimination with partial pivoting; the
  // ridge makes the matrix positive definite, so it never is singular.
  std::array<std::array<double, kCostFeatures + 1>, kCostFeatures> m = {};
  for (size_t i = 0; i < kCostFeatures; ++i) {
    for (size_t j = 0; j < kCostFeatures; ++j) m[i][j] = gram_[i][j] + (i == j ? kRidge : 0);
    m[i][kCostFeatures] = moment_[i];
  }
  for (size_t col = 0; col < kCostFeatures; ++col) {
    size_t pivot = col;
    for (size_t row = col + 1; row < kCostFeatures; ++row) {
      if (std::abs(m[row][col]) > std::abs(m[pivot][col])) pivot = row;
    }
    std::swap(m[col], m[pivot]);
    for (size_t row = 0; row < kCostFeatures; ++row) {
      if (row == col) continue;
      const double factor = m[row][col] / m[col][col];
      for (size_t k = col; k <= kCostFeatures; ++k) m[row][k] -= factor * m[col][k];
    }
  }
  for (size_t i = 0; i < kCostFeatures; ++i) weights_[i] = m[i][kCostFeatures] / m[i][i];
}

std::string CostFit::to_text() const {
  std::string text = fmt::format("kiln-cost-fit 1\n{}\n", measurements_);
  for (const auto& row : gram_) text += fmt::format("{}\n", fmt::join(row, " "));
  text += fmt::format("{}\n", fmt::join(moment_, " "));
  return text;
}

Expected<CostFit> CostFit::from_text(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string tag;
  int version = 0, measurements = 0;
  if (!(in >> tag >> version >> measurements) || tag != "kiln-cost-fit" || version != 1) {
    return Status::error("not a cost fit (kiln-cost-fit 1)");
  }
  std::array<std::array<double, kCostFeatures>, kCostFeatures> gram = {};
  CostFeatures moment = {};
  for (auto& row : gram) {
    for (double& value : row) {
      if (!(in >> value)) return Status::error("a cost fit's sums end early");
    }
  }
  for (double& value : moment) {
    if (!(in >> value)) return Status::error("a cost fit's sums end early");
  }
  CostFit fit;
  fit.gram_ = gram;
  fit.moment_ = moment;
  fit.measurements_ = measurements;
  fit.solve();
  return fit;
}

}  // namespace kiln::loop
