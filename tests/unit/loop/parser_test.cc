// The loop-IR parser (loop/parser.h): every expression and statement kind read back from its
// printed text, what the text leaves out recovered (types, let scopes, casts of constants),
// kernels.loop files, errors with positions, and malformed input (every prefix of a kernel,
// bytes replaced, deep nesting) refused without a crash.
#include "loop/parser.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/builder.h"
#include "loop/default_schedule.h"
#include "loop/printer.h"
#include "unit/loop/round_trip_check.h"
#include "unit/test_util.h"

namespace kiln::loop {
namespace {

using ::kiln::testing::is_error_with;
using testing::round_trips;

// A parameter of every dtype (one with strides), every loop kind, memory scope, statement,
// intrinsic and reduction; constants of every dtype and their non-finite values; casts that
// print like constants; operators that need parentheses; sibling lets of one name.
constexpr std::string_view kEveryKind =
    R"(kernel every_kind(x: f32[4, 8], xt: f32[8, 4] strides [1, 8], d: f64[16], h: f16[4], bh: bf16[4], n: i32[4], l: i64[4], m: bool[4], out: f32[4, 8], od: f64[16], c: f32[4, 4]) {
  parallel for (i, 0, 4) {
    vectorized for (j, 0, 8) {
      out[i*8 + j] = x[i*8 + j]*0.5f + f32(d[i + j]) - -1.0f
    }
  }
  for (i, 0, 4) {
    let s = sum(k, 0, 8, x[i*8 + k])
    let flag = s > 0.0f && !m[i] || l[i] == 3
    let q = n[i] % i32(3)
    let hh = h[i]*f16(0.5)
    let bb = bh[i] + bf16(1.00025555e+30)
    if (flag) {
      od[i] = f64(q) + f64(hh) + f64(bb)
    } else {
      od[i] = pow(d[i], 2.0)
    }
    if (q < i32(0)) {
      od[i + 4] = select(flag, inf, -inf)
    }
    if (i == 0) {
      od[i + 8] = nan
    } else {
    }
    od[i + 12] = (let e = exp(d[i]) in e*e) + f64(prod(k, 1, 3, l[k]))
    out[i + 24] = abs(s) + log(s) + sqrt(s) + rsqrt(s) + tanh(s) + erf(s) + sigmoid(s) + sin(s) + cos(s) + floor(s) + ceil(s)
  }
  allocate t: f32[8] in local {
    unrolled for (j, 0, 8) {
      t[j] = maximum(k, 0, 4, x[k*8 + j])
    }
    allocate r: f64[4] in registers {
      for (j, 0, 4) {
        r[j] = minimum(k, 0, 8, f64(t[k])) - f64(abs(n[j]))
      }
      for (j, 0, 4) {
        od[j] = r[j] + f64(dropout_bits(l[j], 7, j) % 5)
      }
    }
  }
  gemm(4, 4, 8) c[0, ld 4] = x[0, ld 8] * xt[0, ld 8]^T
  for (i, 0, 2) {
    gemm(2, 4, 8) c[i*8, ld 4] += x[i*16, ld 8] * xt[0, ld 8]^T
  }
  gemm(4, 8, 4) out[0, ld 8] = c[0, ld 4]^T * x[0, ld 8]
  gpu_block for (b, 0, 2) {
    allocate sh: f32[4] in gpu_shared {
      gpu_thread for (j, 0, 4) {
        sh[j] = x[b*8 + j]
      }
      gpu_thread for (j, 0, 4) {
        out[b*8 + j] = vectorized sum(k, 0, 4, sh[k]) + sh[j]
      }
    }
  }
  let z = 1
  out[0] = f32(z)
  let z = 2
  out[1] = f32(z)
  atomic out[2] = out[2] + x[2]*2.0f
  out[3] = x[3]*1e-45f + -0.0f
  out[5] = select(x[5] > 0.0f, f32(nan), f32(-inf))
  out[6] = x[6]*f32(0.5) - -1.0f
  out[7] = (x[0] + x[1])*x[2] - (x[3] - x[4])
  od[5] = f64(max(l[0], -9223372036854775808))
  od[6] = d[6]*-0.0 + 1e+20
  od[7] = f64(n[0] + i32(3))
  od[8] = f64(h[0] + f16(0.1))
  od[9] = f64((l[0] % 2)/3 + l[1] - (l[2] - l[3])*-2)
  m[0] = (l[0] < l[1]) == (l[2] >= l[3]) || l[0] != 0 && !(l[1] <= 2)
  out[8] = min(x[0], max(x[1], f32(i32(7))))
}
)";

TEST(LoopParser, ReadsEveryKindBackAsItPrints) {
  Expected<Kernel> kernel = parse_kernel(kEveryKind, "every.loop");
  ASSERT_TRUE(kernel.has_value()) << kernel.status().message();
  EXPECT_EQ(print(*kernel), kEveryKind);
  EXPECT_TRUE(round_trips(*kernel));
}

TEST(LoopParser, ReadsAKernelWithNoParametersOrStatements) {
  Expected<Kernel> kernel = parse_kernel("kernel empty() {\n}\n");
  ASSERT_TRUE(kernel.has_value()) << kernel.status().message();
  EXPECT_TRUE(kernel->params.empty());
  EXPECT_TRUE(is_no_op(kernel->body));
}

// The statements of `text`'s kernel, nested blocks opened.
std::vector<Stmt> statements_of(std::string_view text) {
  Expected<Kernel> kernel = parse_kernel(text);
  EXPECT_TRUE(kernel.has_value()) << kernel.status().message();
  return kernel ? flatten_blocks(kernel->body) : std::vector<Stmt>{};
}

TEST(LoopParser, ACastOfAConstantIsTheConstantWhenItPrintsSo) {
  // f16 holds 0.1 as the constant that prints f16(0.099975586).
  const std::string f16_tenth = print(make_float(0.1, DType::f16));
  const std::vector<Stmt> stores = statements_of(fmt::format(R"(kernel k(o: f64[4]) {{
  o[0] = f64(i32(3) + i32(-3))
  o[1] = f64(f32(0.5))
  o[2] = f64(f32(-inf)) + f64(f16(0.1)) + f64({})
  o[3] = f64(i64(3))
}}
)",
                                                             f16_tenth));
  ASSERT_EQ(stores.size(), 4u);
  const auto value = [&](size_t s) { return stores[s].as<Store>()->value.as<Cast>()->value; };
  EXPECT_EQ(value(0).as<Binary>()->a.kind(), ExprKind::int_imm);  // i32(3): an i32 constant
  EXPECT_EQ(value(0).as<Binary>()->b.type(), DType::i32);
  EXPECT_EQ(value(1).kind(), ExprKind::cast);  // an f32 0.5 prints 0.5f: a cast of f64 0.5
  const Binary& sum = *stores[2].as<Store>()->value.as<Binary>();
  EXPECT_EQ(sum.a.as<Binary>()->a.as<Cast>()->value.kind(), ExprKind::float_imm);  // f32(-inf)
  // f16(0.1) casts the f64 0.1; the f16 constant prints otherwise.
  EXPECT_EQ(sum.a.as<Binary>()->b.as<Cast>()->value.kind(), ExprKind::cast);
  EXPECT_EQ(sum.b.as<Cast>()->value.kind(), ExprKind::float_imm);
  EXPECT_EQ(value(3).kind(), ExprKind::cast);  // an i64 3 prints 3
}

TEST(LoopParser, VariablesTakeTheirBindersTypes) {
  const std::vector<Stmt> stmts = statements_of(R"(kernel k(o: f64[4], n: i32[4]) {
  for (i, 0, 4) {
    let q = n[i]
    let b = q < i32(0)
    o[i] = select(b, f64(q), f64(sum(k, 0, i, k)))
  }
}
)");
  ASSERT_EQ(stmts.size(), 1u);
  const LetStmt& q = *stmts[0].as<For>()->body.as<LetStmt>();
  EXPECT_EQ(q.value.type(), DType::i32);
  const Select& select = *q.body.as<LetStmt>()->body.as<Store>()->value.as<Select>();
  EXPECT_EQ(select.condition.type(), DType::boolean);
  EXPECT_EQ(select.true_value.as<Cast>()->value.type(), DType::i32);
}

TEST(LoopParser, ALetScopesOverItsBlockUntilItsNameIsBoundAgain) {
  // The first let holds both stores after it; the second ends before the loop that binds w
  // again; the third before the sibling let of the same name.
  const std::vector<Stmt> stmts = statements_of(R"(kernel k(o: f32[4]) {
  let a = 1
  o[0] = f32(a)
  o[1] = 2.0f
}
)");
  ASSERT_EQ(stmts.size(), 1u);
  EXPECT_EQ(flatten_blocks(stmts[0].as<LetStmt>()->body).size(), 2u);
  const std::vector<Stmt> siblings = statements_of(R"(kernel k(o: f32[4]) {
  let w = 1
  o[0] = f32(w)
  for (w, 0, 2) {
    o[w] = 1.0f
  }
  let z = 1
  o[2] = f32(z)
  let z = 2
  o[3] = f32(sum(w, 0, z, w))
}
)");
  ASSERT_EQ(siblings.size(), 4u);
  EXPECT_EQ(siblings[0].kind(), StmtKind::let_stmt);
  EXPECT_EQ(siblings[1].kind(), StmtKind::for_loop);
  EXPECT_EQ(siblings[2].as<LetStmt>()->body.kind(), StmtKind::store);
  EXPECT_EQ(siblings[3].kind(), StmtKind::let_stmt);
}

// Two kernels as `kiln compile -o DIR` writes kernels.loop (tools/kiln/main.cc: each kernel
// after a comment line and the schedule that made it, or "(none)").
TEST(LoopParser, ReadsTheKernelsOfAKernelsLoopFile) {
  const Kernel exp_kernel = testing::lower([](GraphBuilder& b) {
    return b.exp(b.input("x", DType::f32, {64, 48}));
  });
  const Kernel sum_kernel = testing::lower([](GraphBuilder& b) {
    return b.sum(b.input("x", DType::f64, {3, 5}), {1});
  });
  const Schedule schedule = default_schedule(exp_kernel, testing::kNarrowTarget);
  ASSERT_FALSE(schedule.directives.empty());
  Expected<Kernel> scheduled = apply_schedule(exp_kernel, schedule);
  ASSERT_TRUE(scheduled.has_value()) << scheduled.status().message();
  // As kiln compile writes it (compiler/stage_text.h): each kernel after comments that say
  // how it was scheduled.
  std::string directives;
  for (const Directive& directive : schedule.directives) {
    directives += "//   " + print(directive) + "\n";
  }
  const std::string text =
      fmt::format("// kernel 0, scheduled by:\n{}{}\n// kernel 1, scheduled by:\n//   (none)\n{}\n",
                  directives, print(*scheduled), print(sum_kernel));
  Expected<std::vector<Kernel>> kernels = parse_kernels(text, "kernels.loop");
  ASSERT_TRUE(kernels.has_value()) << kernels.status().message();
  ASSERT_EQ(kernels->size(), 2u);
  EXPECT_EQ(print((*kernels)[0]), print(*scheduled));
  EXPECT_EQ(print((*kernels)[1]), print(sum_kernel));
  EXPECT_TRUE(
      is_error_with(parse_kernels("vectorise i0\n" + print(sum_kernel), "kernels.loop").status(),
                    {"kernels.loop:1:1: expected a kernel, found 'vectorise'"}));
  EXPECT_TRUE(is_error_with(parse_kernel(text, "kernels.loop").status(),
                            {"kernels.loop: expected one kernel, found 2"}));
}

// `body` as the body of a kernel k(x: f32[4], y: f32[4], n: i64[4]) in file t.loop, whose
// first line is line 1: the body's first line is line 2.
Status parse_error(std::string_view body) {
  const std::string text = fmt::format("kernel k(x: f32[4], y: f32[4], n: i64[4]) {{\n{}", body);
  return parse_kernel(text, "t.loop").status();
}

TEST(LoopParser, ErrorsNameTheFileLineAndColumn) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"  x[0] = q\n}\n", "t.loop:2:10: unknown variable 'q'"},
      {"  z[0] = 1.0f\n}\n", "t.loop:2:3: 'z' is neither a parameter nor an enclosing allocation"},
      {"  x[0] = x\n}\n", "t.loop:2:10: 'x' is a buffer: load it as x[index]"},
      {"  x[0] = 1.0f + 2\n}\n", "t.loop:2:15: operands of '+' have different types f32 and i64"},
      {"  x[0] = 1\n}\n", "t.loop:2:3: a store of i64 to 'x', which holds f32"},
      {"  x[1.0f] = 1.0f\n}\n", "t.loop:2:3: a store index is f32, not i64"},
      {"  x[0] = y[n[0] < 2]\n}\n", "t.loop:2:10: a load index is bool, not i64"},
      {"  for (i, 0, 4.0f) {\n  }\n}\n", "t.loop:2:3: loop bounds must be i64"},
      {"  vectorized for (i, 0, n[0]) {\n  }\n}\n",
       "t.loop:2:3: a vectorized loop needs a constant positive extent"},
      {"  if (n[0]) {\n  }\n}\n", "t.loop:2:3: an if condition is i64, not bool"},
      {"  x[0] = exp(n[0])\n}\n", "t.loop:2:10: exp of i64"},
      {"  x[0] = pow(x[0])\n}\n", "t.loop:2:10: pow takes 2 argument(s), not 1"},
      {"  x[0] = select(true, 1.0f)\n}\n", "t.loop:2:10: select takes 3 argument(s), not 2"},
      {"  x[0] = foo(1.0f)\n}\n", "t.loop:2:10: unknown function 'foo'"},
      {"  x[0] = -x[0]\n}\n", "t.loop:2:10: expected a number directly after '-'"},
      {"  x[0] = 1.0f $\n}\n", "t.loop:2:15: unexpected character '$'"},
      {"  x[0] = 99999999999999999999\n}\n", "t.loop:2:10: 99999999999999999999 does not fit i64"},
      {"  x[0] = 1e+39f\n}\n", "t.loop:2:10: 1e+39f is out of the range of f32"},
      {"  x[0] = 1.5e\n}\n", "t.loop:2:10: malformed number"},
      {"  x[0] =", "t.loop:2:9: expected an expression, found the end of the input"},
      {"  x[0] = 1.0f\n", "t.loop:3:1: expected '}', found the end of the input"},
      {"  x[0] = 1.0f\n  y[0]\n}\n", "t.loop:4:1: expected '=', found '}'"},
      {"  allocate t: f32[2, 2] in local {\n  }\n}\n", "t.loop:2:12: allocation 't' is not flat"},
      {"  allocate t: f32[4] {\n  }\n}\n", "t.loop:2:3: an allocation is global"},
      {"  gemm(1, 1, 1) x[0, ld 1]^T = y[0, ld 1] * x[0, ld 1]\n}\n",
       "t.loop:2:3: a gemm's result is not transposed"},
      {"  gemm(1, 1, 1) x[0, ld 1] = y[0, ld 1] * x[0, ld 1]\n}\n",
       "t.loop:2:3: gemm writes 'x', which it also reads"},
      {"  for (i, 0, 4) {\n    for (i, 0, 4) {\n    }\n  }\n}\n",
       "t.loop:1:1: kernel 'k': 'i' is bound again inside its own scope"},
      {"  atomic x[0] = y[0] + x[0]\n}\n",
       "t.loop:2:10: an atomic store's value is its own element plus an addend"},
      {"  atomic x[0] = x[1] + y[0]\n}\n",
       "t.loop:2:10: an atomic store's value is its own element plus an addend"},
  };
  for (const auto& [body, message] : cases) {
    EXPECT_TRUE(is_error_with(parse_error(body), {message})) << body;
  }
}

TEST(LoopParser, DeclarationErrorsNameTheBuffer) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"x: f32[4] in local", "t.loop:1:10: parameter 'x' is in scope local; parameters are global"},
      {"x: f32[4, 2] strides [1]", "t.loop:1:10: 'x' has 2 extents but 1 strides"},
      {"x: f32[4294967296, 4294967296]", "t.loop:1:10: buffer 'x' is too large"},
      {"x: f31[4]", "t.loop:1:13: expected a dtype"},
      {"x: f32[4], x: f32[4]", "t.loop:1:1: kernel 'k': two parameters are named 'x'"},
  };
  for (const auto& [params, message] : cases) {
    const std::string text = fmt::format("kernel k({}) {{\n}}\n", params);
    EXPECT_TRUE(is_error_with(parse_kernel(text, "t.loop").status(), {message})) << params;
  }
}

TEST(LoopParser, NestingBeyondTheLimitIsAnErrorNotAStackOverflow) {
  const int depth = 5 * kMaxLoopIRNesting;
  const std::string deep_expr = std::string(depth, '(') + "1.0f" + std::string(depth, ')');
  EXPECT_TRUE(is_error_with(parse_error("  x[0] = " + deep_expr + "\n}\n"), {"nested more than"}));
  EXPECT_TRUE(is_error_with(parse_error("  x[0] = " + std::string(depth, '!') + "true\n}\n"),
                            {"nested more than"}));
  std::string chain = "  n[0] = 1";
  for (int i = 0; i < depth; ++i) chain += " + 1";
  EXPECT_TRUE(is_error_with(parse_error(chain + "\n}\n"), {"nested more than"}));
  std::string loops;
  for (int i = 0; i < depth; ++i) loops += "if (true) {\n";
  EXPECT_TRUE(is_error_with(parse_error(loops), {"nested more than"}));
  // Within the limit, deep nesting reads back.
  const std::string fine = std::string(100, '(') + "1.0f" + std::string(100, ')');
  EXPECT_TRUE(parse_error("  x[0] = " + fine + "\n}\n").is_ok());
}

// Every prefix of a kernel's text, and the text with each byte replaced by characters that
// matter to the grammar, either reads back or is an error located in the file.
TEST(LoopParser, MalformedTextIsAnErrorNeverACrash) {
  const std::string text(kEveryKind);
  const auto parses_or_fails_in_file = [](const std::string& input) {
    Expected<std::vector<Kernel>> kernels = parse_kernels(input, "f.loop");
    return kernels.has_value() || kernels.status().message().starts_with("f.loop:");
  };
  for (size_t length = 0; length < text.size(); ++length) {
    const std::string prefix = text.substr(0, length);
    EXPECT_TRUE(parses_or_fails_in_file(prefix)) << prefix;
  }
  for (size_t at = 0; at < text.size(); at += 3) {
    for (char c : {'(', ')', '}', '[', 'x', '9', '-', '\n', '.', '\0'}) {
      std::string mutated = text;
      mutated[at] = c;
      EXPECT_TRUE(parses_or_fails_in_file(mutated)) << mutated;
    }
  }
}

}  // namespace
}  // namespace kiln::loop
