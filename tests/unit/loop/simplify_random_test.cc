// The simplifier keeps meaning: random expressions evaluate to the same value before and
// after simplification, on random variable values, with and without variable bounds.
//
// The seed is printed with every failure; set KILN_LOOP_SEED to replay another one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "loop/bounds.h"
#include "loop/evaluator.h"
#include "loop/printer.h"
#include "loop/simplify.h"
#include "loop/verifier.h"

namespace kiln::loop {
namespace {

uint64_t test_seed() {
  const char* text = std::getenv("KILN_LOOP_SEED");
  return text != nullptr ? std::strtoull(text, nullptr, 10) : 20240605;
}

// Random well-typed expressions over i64 variables x, y, z, an f32 variable f and a small
// i64 buffer `table`, with lets and reductions binding fresh names. Products have a leaf
// operand and reductions at most 3 terms, so values stay far from overflow (which the
// simplifier may assume away).
class ExprGenerator {
 public:
  explicit ExprGenerator(uint64_t seed) : rng_(seed) {}

  static Buffer table() { return Buffer::param("table", DType::i64, {5}); }

  Expr int_expr(int depth) {
    if (depth == 0 || chance(0.2)) return int_leaf();
    switch (pick(12)) {
      case 0: return int_expr(depth - 1) + int_expr(depth - 1);
      case 1: return int_expr(depth - 1) - int_expr(depth - 1);
      case 2: return int_expr(depth - 1) * int_leaf();
      case 3: return int_expr(depth - 1) / divisor(depth);
      case 4: return int_expr(depth - 1) % divisor(depth);
      case 5: return min(int_expr(depth - 1), int_expr(depth - 1));
      case 6: return max(int_expr(depth - 1), int_expr(depth - 1));
      case 7: return select(bool_expr(depth - 1), int_expr(depth - 1), int_expr(depth - 1));
      case 8: return cast(DType::i64, bool_expr(depth - 1));
      case 9: return load(table(), int_expr(depth - 1) % 5);
      case 10: return bind_let(depth, [&] { return int_expr(depth - 1); });
      default: return bind_reduce(depth, [&] { return int_expr(depth - 1); });
    }
  }

  Expr bool_expr(int depth) {
    if (depth == 0 || chance(0.1)) return make_bool(chance(0.5));
    static constexpr BinaryOp kComparisons[] = {BinaryOp::eq, BinaryOp::ne, BinaryOp::lt,
                                                BinaryOp::le, BinaryOp::gt, BinaryOp::ge};
    switch (pick(6)) {
      case 0: return bool_expr(depth - 1) && bool_expr(depth - 1);
      case 1: return bool_expr(depth - 1) || bool_expr(depth - 1);
      case 2: return !bool_expr(depth - 1);
      case 3: return binary(kComparisons[pick(6)], float_expr(depth - 1), float_expr(depth - 1));
      default: return binary(kComparisons[pick(6)], int_expr(depth - 1), int_expr(depth - 1));
    }
  }

  Expr float_expr(int depth) {
    if (depth == 0 || chance(0.2)) {
      return chance(0.5) ? var("f", DType::f32) : make_float(pick_float(), DType::f32);
    }
    static constexpr Intrinsic kCalls[] = {Intrinsic::exp, Intrinsic::sqrt, Intrinsic::floor,
                                           Intrinsic::abs, Intrinsic::tanh};
    switch (pick(9)) {
      case 0: return float_expr(depth - 1) + float_expr(depth - 1);
      case 1: return float_expr(depth - 1) - float_expr(depth - 1);
      case 2: return float_expr(depth - 1) * float_expr(depth - 1);
      case 3: return float_expr(depth - 1) / float_expr(depth - 1);
      case 4: return min(float_expr(depth - 1), float_expr(depth - 1));
      case 5: return cast(DType::f32, int_expr(depth - 1));
      case 6: return call(kCalls[pick(5)], {float_expr(depth - 1)});
      case 7: return select(bool_expr(depth - 1), float_expr(depth - 1), float_expr(depth - 1));
      default: return bind_reduce(depth, [&] { return float_expr(depth - 1); });
    }
  }

  int64_t pick_int(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }

 private:
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int pick(int n) { return static_cast<int>(pick_int(0, n - 1)); }
  double pick_float() {
    static constexpr double kValues[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.25, -7.5};
    return kValues[pick(8)];
  }

  Expr int_leaf() {
    if (chance(0.4)) return make_int(pick_int(-8, 8));
    return var(scope_[static_cast<size_t>(pick(static_cast<int>(scope_.size())))]);
  }

  // Usually a small constant (zero and negatives included), sometimes an expression.
  Expr divisor(int depth) { return chance(0.8) ? make_int(pick_int(-5, 5)) : int_expr(depth - 1); }

  template <typename Body>
  Expr bind_let(int depth, Body&& body) {
    Expr value = int_expr(depth - 1);
    const std::string name = fresh("t");
    scope_.push_back(name);
    Expr result = let(name, value, body());
    scope_.pop_back();
    return result;
  }

  template <typename Body>
  Expr bind_reduce(int depth, Body&& body) {
    static constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::min, ReduceOp::max};
    const ReduceOp op = kOps[pick(3)];
    Expr min = chance(0.7) ? make_int(pick_int(-2, 2)) : int_expr(depth - 1);
    // Empty integer min/max reductions are the type's extremes, which would overflow.
    Expr extent = make_int(pick_int(op == ReduceOp::sum ? -1 : 1, 3));
    const std::string name = fresh("r");
    scope_.push_back(name);
    Expr result = reduce(op, name, min, extent, body());
    scope_.pop_back();
    return result;
  }

  std::string fresh(const std::string& prefix) { return prefix + std::to_string(next_name_++); }

  std::mt19937_64 rng_;
  std::vector<std::string> scope_ = {"x", "y", "z"};
  int next_name_ = 0;
};

bool same_value(const Scalar& a, const Scalar& b) {
  if (a.index() != b.index()) return false;
  if (const double* x = std::get_if<double>(&a)) {
    const double y = std::get<double>(b);
    return (std::isnan(*x) && std::isnan(y)) || (*x == y && std::signbit(*x) == std::signbit(y));
  }
  return a == b;
}

std::string describe(const Scalar& value) {
  if (const double* x = std::get_if<double>(&value)) return std::to_string(*x);
  return std::to_string(std::get<int64_t>(value));
}

// Simplifies `count` random expressions (under `scope`) and compares evaluations on values
// drawn inside the scope's intervals.
void check_random_expressions(uint64_t seed, int count, const BoundsScope& scope) {
  ExprGenerator gen(seed);
  std::vector<double> table = {-3, 0, 2, 7, 11};
  const std::map<std::string, DType, std::less<>> types = {
      {"x", DType::i64}, {"y", DType::i64}, {"z", DType::i64}, {"f", DType::f32}};
  auto interval = [&](const std::string& name) {
    auto it = scope.find(name);
    return it == scope.end() ? Interval{-20, 20} : it->second;
  };
  for (int n = 0; n < count; ++n) {
    const Expr e = n % 3 == 0 ? gen.bool_expr(4) : n % 3 == 1 ? gen.int_expr(4) : gen.float_expr(4);
    const Expr s = simplify(e, scope);
    const std::string context = "seed " + std::to_string(seed) + ", case " + std::to_string(n) +
                                "\n  expression: " + print(e) + "\n  simplified: " + print(s);
    Status verified = verify(s, types, {ExprGenerator::table()});
    ASSERT_TRUE(verified.is_ok()) << context << "\n  " << verified.message();
    ASSERT_EQ(s.type(), e.type()) << context;
    ASSERT_EQ(print(simplify(s, scope)), print(s)) << "not idempotent: " << context;
    for (int trial = 0; trial < 8; ++trial) {
      EvalEnvironment env;
      env.buffers["table"] = &table;
      for (const char* name : {"x", "y", "z"}) {
        env.vars[name] = gen.pick_int(*interval(name).min, *interval(name).max);
      }
      env.vars["f"] = static_cast<double>(static_cast<float>(gen.pick_int(-40, 40)) / 8.0f);
      Expected<Scalar> before = evaluate(e, env), after = evaluate(s, env);
      ASSERT_TRUE(before.has_value()) << context << "\n  " << before.status().message();
      ASSERT_TRUE(after.has_value()) << context << "\n  " << after.status().message();
      ASSERT_TRUE(same_value(*before, *after))
          << context << "\n  x=" << describe(env.vars["x"]) << " y=" << describe(env.vars["y"])
          << " z=" << describe(env.vars["z"]) << " f=" << describe(env.vars["f"])
          << "\n  before: " << describe(*before) << ", after: " << describe(*after);
    }
  }
}

// Every value a random integer expression takes on values drawn inside the scope lies in
// the interval bounds_of computes: the soundness the simplifier's bounds rules rest on.
TEST(LoopBoundsRandom, ContainEveryValue) {
  const uint64_t seed = test_seed() + 2;
  ExprGenerator gen(seed);
  std::vector<double> table = {-3, 0, 2, 7, 11};
  const BoundsScope scope = {{"x", {0, 7}}, {"y", {-3, 3}}, {"z", {-20, 20}}};
  for (int n = 0; n < 3000; ++n) {
    const Expr e = gen.int_expr(3);
    const Interval bounds = bounds_of(e, scope);
    for (int trial = 0; trial < 8; ++trial) {
      EvalEnvironment env;
      env.buffers["table"] = &table;
      for (const auto& [name, interval] : scope) {
        env.vars[name] = gen.pick_int(*interval.min, *interval.max);
      }
      env.vars["f"] = 0.5;
      Expected<Scalar> value = evaluate(e, env);
      ASSERT_TRUE(value.has_value()) << value.status().message();
      const int64_t v = std::get<int64_t>(*value);
      ASSERT_TRUE((!bounds.min || *bounds.min <= v) && (!bounds.max || v <= *bounds.max))
          << "seed " << seed << ", case " << n << ": " << print(e) << " = " << v
          << " with x=" << describe(env.vars["x"]) << " y=" << describe(env.vars["y"])
          << " z=" << describe(env.vars["z"]) << ", outside [" << bounds.min.value_or(-999) << ", "
          << bounds.max.value_or(999) << "]";
    }
  }
}

TEST(LoopSimplifyRandom, KeepsTheValueOfUnboundedExpressions) {
  check_random_expressions(test_seed(), 3000, {});
}

TEST(LoopSimplifyRandom, KeepsTheValueUnderVariableBounds) {
  check_random_expressions(test_seed() + 1, 3000, {{"x", {0, 7}}, {"y", {-3, 3}}, {"z", {4, 4}}});
}

}  // namespace
}  // namespace kiln::loop
