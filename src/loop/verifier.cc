#include "loop/verifier.h"

#include <cmath>
#include <limits>

#include "loop/printer.h"
#include "loop/scalar.h"

namespace kiln::loop {
namespace {

std::string first_line(const Stmt& stmt) {
  std::string text = print(stmt);
  const size_t end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

bool is_numeric(DType type) { return is_integer(type) || is_floating(type); }

// BLAS takes extents and leading dimensions as int (OpenBLAS's default 32-bit interface).
constexpr int64_t kMaxGemmExtent = std::numeric_limits<int32_t>::max();

Status fail(const std::string& problem, const std::string& node) {
  return Status::errorf("{} in: {}", problem, node);
}

Status expect_type(const Expr& operand, DType type, std::string_view what, const Expr& node) {
  if (operand.type() == type) return Status::ok();
  return fail(fmt::format("{} is {}, not {}", what, dtype_name(operand.type()), dtype_name(type)),
              print(node));
}

// --- The rules of one node, given its children's types (check_node) -----------------------

Status check_int_imm(const Expr& e) {
  const int64_t value = e.as<IntImm>()->value;
  if (!is_integer(e.type()) && e.type() != DType::boolean) {
    return fail(fmt::format("an integer constant has type {}", dtype_name(e.type())), print(e));
  }
  if (wrap_to_type(value, e.type()) != value) {
    return fail(fmt::format("{} does not fit {}", value, dtype_name(e.type())), print(e));
  }
  return Status::ok();
}

Status check_float_imm(const Expr& e) {
  const double value = e.as<FloatImm>()->value;
  if (!is_floating(e.type())) {
    return fail(fmt::format("a floating constant has type {}", dtype_name(e.type())), print(e));
  }
  if (!std::isnan(value) && round_to_dtype(value, e.type()) != value) {
    return fail(fmt::format("{} is not representable in {}", value, dtype_name(e.type())),
                print(e));
  }
  return Status::ok();
}

Status check_binary(const Expr& e) {
  const Binary& b = *e.as<Binary>();
  const std::string_view symbol = binary_op_symbol(b.op);
  if (b.a.type() != b.b.type()) {
    return fail(fmt::format("operands of '{}' have different types {} and {}", symbol,
                            dtype_name(b.a.type()), dtype_name(b.b.type())),
                print(e));
  }
  const DType operand = b.a.type();
  const bool equality = b.op == BinaryOp::eq || b.op == BinaryOp::ne;
  if (is_logical(b.op) && operand != DType::boolean) {
    return fail(fmt::format("'{}' takes bool operands, not {}", symbol, dtype_name(operand)),
                print(e));
  }
  if (!is_logical(b.op) && !equality && !is_numeric(operand)) {
    return fail(fmt::format("'{}' takes numeric operands, not {}", symbol, dtype_name(operand)),
                print(e));
  }
  const DType expected = is_comparison(b.op) || is_logical(b.op) ? DType::boolean : operand;
  if (e.type() != expected) {
    return fail(fmt::format("'{}' has type {}, not {}", symbol, dtype_name(e.type()),
                            dtype_name(expected)),
                print(e));
  }
  return Status::ok();
}

Status check_select(const Expr& e) {
  const Select& s = *e.as<Select>();
  KILN_RETURN_IF_ERROR(expect_type(s.condition, DType::boolean, "a select condition", e));
  if (s.true_value.type() != s.false_value.type() || s.true_value.type() != e.type()) {
    return fail(fmt::format("select branches have types {} and {}",
                            dtype_name(s.true_value.type()), dtype_name(s.false_value.type())),
                print(e));
  }
  return Status::ok();
}

Status check_call(const Expr& e) {
  const Call& c = *e.as<Call>();
  const std::string_view name = intrinsic_name(c.intrinsic);
  if (static_cast<int>(c.args.size()) != intrinsic_arity(c.intrinsic)) {
    return fail(fmt::format("{} takes {} argument(s), not {}", name, intrinsic_arity(c.intrinsic),
                            c.args.size()),
                print(e));
  }
  for (const Expr& arg : c.args) {
    KILN_RETURN_IF_ERROR(expect_type(arg, e.type(), fmt::format("an argument of {}", name), e));
  }
  const bool ok = c.intrinsic == Intrinsic::abs            ? is_numeric(e.type())
                  : c.intrinsic == Intrinsic::dropout_bits ? e.type() == DType::i64
                                                           : is_floating(e.type());
  if (!ok) return fail(fmt::format("{} of {}", name, dtype_name(e.type())), print(e));
  return Status::ok();
}

Status check_reduce(const Expr& e) {
  const Reduce& r = *e.as<Reduce>();
  KILN_RETURN_IF_ERROR(expect_type(r.min, DType::i64, "a reduction minimum", e));
  KILN_RETURN_IF_ERROR(expect_type(r.extent, DType::i64, "a reduction extent", e));
  if (!is_numeric(r.body.type()) || e.type() != r.body.type()) {
    return fail(
        fmt::format("a {} reduces a {} body", reduce_op_name(r.op), dtype_name(r.body.type())),
        print(e));
  }
  return Status::ok();
}

Status check_expr_node(const Expr& e) {
  switch (e.kind()) {
    case ExprKind::int_imm: return check_int_imm(e);
    case ExprKind::float_imm: return check_float_imm(e);
    case ExprKind::binary: return check_binary(e);
    case ExprKind::logical_not:
      return expect_type(e.as<Not>()->a, DType::boolean, "the operand of '!'", e);
    case ExprKind::select: return check_select(e);
    case ExprKind::load: return expect_type(e.as<Load>()->index, DType::i64, "a load index", e);
    case ExprKind::call: return check_call(e);
    case ExprKind::reduce: return check_reduce(e);
    case ExprKind::variable:
    case ExprKind::cast:
    case ExprKind::let: return Status::ok();
  }
  KILN_UNREACHABLE("bad expression kind {}", static_cast<int>(e.kind()));
}

Status check_for_header(const Stmt& s) {
  const For& f = *s.as<For>();
  if (f.min.type() != DType::i64 || f.extent.type() != DType::i64) {
    return fail("loop bounds must be i64", first_line(s));
  }
  const bool needs_constant = f.for_kind == ForKind::vectorized || f.for_kind == ForKind::unrolled;
  const std::optional<int64_t> extent = as_const_int(f.extent);
  if (needs_constant && (!extent || *extent <= 0)) {
    return fail(
        fmt::format("a {} loop needs a constant positive extent", for_kind_name(f.for_kind)),
        first_line(s));
  }
  return Status::ok();
}

Status check_store_types(const Stmt& s) {
  const Store& st = *s.as<Store>();
  if (st.index.type() != DType::i64) {
    return fail(fmt::format("a store index is {}, not i64", dtype_name(st.index.type())),
                first_line(s));
  }
  if (st.value.type() != st.buffer.dtype()) {
    return fail(fmt::format("a store of {} to '{}', which holds {}", dtype_name(st.value.type()),
                            st.buffer.name(), dtype_name(st.buffer.dtype())),
                first_line(s));
  }
  if (st.atomic) {
    // The form atomic_add makes, of a type a GPU adds atomically.
    if (addend_to_own_element(st) == nullptr) {
      return fail("an atomic store's value is not its element plus an addend", first_line(s));
    }
    if (st.buffer.dtype() != DType::f32 && st.buffer.dtype() != DType::f64) {
      return fail(fmt::format("an atomic add of {}, not f32 or f64", dtype_name(st.buffer.dtype())),
                  first_line(s));
    }
  }
  return Status::ok();
}

// A gemm operand of `rows` x `cols`: its leading dimension covers a row, and where the
// offset and extents are constant the region lies inside its buffer.
Status check_region(const MatrixRegion& region, const Expr& rows, const Expr& cols,
                    std::string_view operand, const std::string& line) {
  const int64_t ld = region.leading_dim;
  if (ld < 1 || ld > kMaxGemmExtent) {
    return fail(fmt::format("gemm {} has leading dimension {}", operand, ld), line);
  }
  const std::optional<int64_t> r = as_const_int(rows), c = as_const_int(cols);
  if (c && ld < *c) {
    return fail(fmt::format("gemm {} has leading dimension {} < its {} columns", operand, ld, *c),
                line);
  }
  const std::optional<int64_t> offset = as_const_int(region.offset);
  if (offset && *offset < 0) {
    return fail(fmt::format("gemm {} starts at offset {}", operand, *offset), line);
  }
  if (offset && r && c && *r > 0 && *c > 0) {
    const int64_t last = *offset + (*r - 1) * ld + *c - 1;
    if (last >= region.buffer.flat_size()) {
      return fail(fmt::format("gemm {} reads {}[{}], past its {} elements", operand,
                              region.buffer.name(), last, region.buffer.flat_size()),
                  line);
    }
  }
  return Status::ok();
}

// B kept packed (loop/stmt.h): one fixed f32 region, overwritten (not accumulated into),
// packed into an i64 parameter of its own.
Status check_packed_b(const LibraryCall& g, const std::string& line) {
  const Buffer& packed = g.hints.packed;
  if (packed.scope() != MemoryScope::global || packed.dtype() != DType::i64) {
    return fail(fmt::format("gemm packs B into '{}', which is not an i64 parameter", packed.name()),
                line);
  }
  for (const MatrixRegion* region : {&g.a(), &g.b(), &g.c()}) {
    if (region->buffer.name() == packed.name()) {
      return fail(fmt::format("gemm packs B into '{}', one of its operands", packed.name()),
                  line);
    }
  }
  if (g.c().buffer.dtype() != DType::f32) return fail("gemm packs B of a non-f32 product", line);
  if (g.gemm().accumulate) return fail("gemm packs B and accumulates", line);
  for (const Expr* fixed : {&g.gemm().m, &g.gemm().n, &g.gemm().k, &g.b().offset}) {
    if (!as_const_int(*fixed)) return fail("gemm packs B of a shape or place not constant", line);
  }
  return Status::ok();
}

Status check_gemm_operands(const LibraryCall& g, const std::string& line) {
  const DType dtype = g.c().buffer.dtype();
  // A and B hold C's dtype, or f16 or bf16 (both the same) into an f32 C: their sum, unrounded.
  const DType a = g.a().buffer.dtype();
  const DType operands = dtype == DType::f32 && is_low_precision(a) ? a : dtype;
  for (const MatrixRegion* region : {&g.a(), &g.b(), &g.c()}) {
    if (region->offset.type() != DType::i64) return fail("a gemm offset is not i64", line);
    const DType held = region->buffer.dtype(), want = region == &g.c() ? dtype : operands;
    if (held != want) {
      return fail(fmt::format("gemm operands hold {} and {}", dtype_name(held), dtype_name(want)),
                  line);
    }
  }
  if (!is_floating(dtype)) {
    return fail(fmt::format("a gemm of {}; it takes f32, f64, f16 or bf16", dtype_name(dtype)),
                line);
  }
  if (g.c().buffer.name() == g.a().buffer.name() || g.c().buffer.name() == g.b().buffer.name()) {
    return fail(fmt::format("gemm writes '{}', which it also reads", g.c().buffer.name()), line);
  }
  return g.hints.packed.defined() ? check_packed_b(g, line) : Status::ok();
}

Status check_gemm(const Stmt& s) {
  const LibraryCall& g = *s.as<LibraryCall>();
  const std::string line = first_line(s);
  KILN_RETURN_IF_ERROR(check_gemm_operands(g, line));
  for (const Expr* extent : {&g.gemm().m, &g.gemm().n, &g.gemm().k}) {
    if (extent->type() != DType::i64) return fail("a gemm extent is not i64", line);
    const std::optional<int64_t> value = as_const_int(*extent);
    if (value && *value > kMaxGemmExtent) {
      return fail(fmt::format("gemm extent {} exceeds BLAS's int", *value), line);
    }
  }
  // Stored shapes: A is m x k (k x m transposed), B is k x n (n x k), C is m x n.
  KILN_RETURN_IF_ERROR(check_region(g.a(), g.gemm().transpose_a ? g.gemm().k : g.gemm().m,
                                    g.gemm().transpose_a ? g.gemm().m : g.gemm().k, "A", line));
  KILN_RETURN_IF_ERROR(check_region(g.b(), g.gemm().transpose_b ? g.gemm().n : g.gemm().k,
                                    g.gemm().transpose_b ? g.gemm().k : g.gemm().n, "B", line));
  return check_region(g.c(), g.gemm().m, g.gemm().n, "C", line);
}

// A conv's geometry describes a convolution (positive sizes, channels divisible by groups,
// the output size the window gives), its operands and bias are buffers of one dtype (f32, bf16
// or f16) other than y, and where its offsets are constant its regions lie inside them.
Status check_conv(const Stmt& s) {
  const LibraryCall& c = *s.as<LibraryCall>();
  const ConvGeometry& g = c.conv();
  const std::string line = first_line(s);
  const int spatial = g.spatial();
  const auto size = static_cast<size_t>(spatial);
  if (spatial < 1 || spatial > 3 || g.out_spatial.size() != size || g.kernel.size() != size ||
      g.strides.size() != size || g.pads_begin.size() != size || g.dilations.size() != size) {
    return fail("a conv's geometry has lists of other lengths than its 1 to 3 spatial dims", line);
  }
  if (g.images < 1 || g.channels < 1 || g.out_channels < 1 || g.groups < 1 ||
      g.channels % g.groups != 0 || g.out_channels % g.groups != 0) {
    return fail("a conv's images, channels or groups are not positive and divisible", line);
  }
  for (size_t d = 0; d < size; ++d) {
    if (g.in_spatial[d] < 1 || g.kernel[d] < 1 || g.strides[d] < 1 || g.dilations[d] < 1 ||
        g.pads_begin[d] < 0 || g.out_spatial[d] < 1) {
      return fail("a conv's spatial sizes are not positive", line);
    }
    // Y is the most whole windows that fit, as ONNX's floor gives it: the next window would
    // reach past the input and its end padding (pads_end above the stride's slack).
    if (g.pads_end()[d] <= -g.strides[d]) {
      return fail("a conv's output size is not its window's", line);
    }
  }
  const DType dtype = c.y().buffer.dtype();
  if (dtype != DType::f32 && !is_low_precision(dtype)) {
    return fail(fmt::format("a conv of {}; it takes f32, bf16 or f16", dtype_name(dtype)), line);
  }
  if (c.bias().defined() &&
      (c.bias().dtype() != dtype || c.bias().flat_size() < g.out_channels)) {
    return fail(fmt::format("conv's bias '{}' is not {} {} elements", c.bias().name(),
                            g.out_channels, dtype_name(dtype)),
                line);
  }
  for (const Buffer* operand : {&c.x().buffer, &c.w().buffer}) {
    if (operand->dtype() != dtype) {
      return fail(fmt::format("conv operands hold {} and {}", dtype_name(operand->dtype()),
                              dtype_name(dtype)),
                  line);
    }
  }
  if (c.y().buffer.name() == c.x().buffer.name() || c.y().buffer.name() == c.w().buffer.name() ||
      (c.bias().defined() && c.y().buffer.name() == c.bias().name())) {
    return fail(fmt::format("conv writes '{}', which it also reads", c.y().buffer.name()), line);
  }
  const std::pair<const Expr*, std::pair<const Buffer*, int64_t>> regions[] = {
      {&c.x().offset, {&c.x().buffer, g.x_elements()}},
      {&c.y().offset, {&c.y().buffer, g.y_elements()}}};
  for (const auto& [offset, operand] : regions) {
    if (offset->type() != DType::i64) return fail("a conv offset is not i64", line);
    const std::optional<int64_t> at = as_const_int(*offset);
    if (at && (*at < 0 || *at + operand.second > operand.first->flat_size())) {
      return fail(fmt::format("conv reaches past the {} elements of '{}'",
                              operand.first->flat_size(), operand.first->name()),
                  line);
    }
  }
  if (g.w_elements() > c.w().buffer.flat_size()) {
    return fail(fmt::format("conv reads {} weights of '{}', which has {}", g.w_elements(),
                            c.w().buffer.name(), c.w().buffer.flat_size()),
                line);
  }
  if (c.hints.packed.defined()) {
    const Buffer& packed = c.hints.packed;
    if (packed.scope() != MemoryScope::global || packed.dtype() != DType::i64) {
      return fail(fmt::format("conv keeps w in '{}', which is not an i64 parameter", packed.name()),
                  line);
    }
  }
  return Status::ok();
}

// A library call's dtypes are its operands' (accumulating in its output's accumulation
// dtype: f32 for f16 and bf16), and its epilogues are its operation's: none for a gemm, a bias
// then a relu, each at most once, for a conv; then the operation's own checks.
Status check_library_call(const Stmt& s) {
  const LibraryCall& call = *s.as<LibraryCall>();
  const std::string line = first_line(s);
  if (call.operands.size() != 3) {
    return fail(fmt::format("a {} call has {} operands, not 3", library_op_name(call.op),
                            call.operands.size()),
                line);
  }
  const LibraryDTypes operands{.a = call.operands[0].buffer.dtype(),
                               .b = call.operands[1].buffer.dtype(),
                               .accumulate = accumulation_dtype(call.operands[2].buffer.dtype()),
                               .out = call.operands[2].buffer.dtype()};
  if (call.dtypes != operands) {
    return fail(
        fmt::format("a {} call computes ({}, {}, {}, {}) on operands of ({}, {}, {})",
                    library_op_name(call.op), dtype_name(call.dtypes.a), dtype_name(call.dtypes.b),
                    dtype_name(call.dtypes.accumulate), dtype_name(call.dtypes.out),
                    dtype_name(operands.a), dtype_name(operands.b), dtype_name(operands.out)),
        line);
  }
  if (call.op == LibraryOp::gemm) {
    if (!std::holds_alternative<GemmShape>(call.shape))
      return fail("a gemm without its shape", line);
    if (!call.epilogues.empty() || call.hints.winograd) {
      return fail("a gemm call takes no epilogue and no winograd hint", line);
    }
    return check_gemm(s);
  }
  if (!std::holds_alternative<ConvGeometry>(call.shape))
    return fail("a conv without its geometry", line);
  const std::vector<Epilogue>& epilogues = call.epilogues;
  const size_t biases = epilogues.empty() || epilogues[0].kind != EpilogueKind::bias ? 0 : 1;
  for (size_t i = 0; i < epilogues.size(); ++i) {
    const bool in_order = i < biases ? epilogues[i].kind == EpilogueKind::bias
                                     : i == biases && epilogues[i].kind == EpilogueKind::relu;
    if (!in_order || epilogues[i].operand.defined() != (epilogues[i].kind == EpilogueKind::bias)) {
      return fail("a conv's epilogues are a bias (with its buffer), then a relu", line);
    }
  }
  return check_conv(s);
}

Status check_stmt_node(const Stmt& s) {
  switch (s.kind()) {
    case StmtKind::for_loop: return check_for_header(s);
    case StmtKind::store: return check_store_types(s);
    case StmtKind::allocate: {
      const Buffer& buffer = s.as<Allocate>()->buffer;
      if (buffer.scope() == MemoryScope::global) {
        return fail("an allocation is global", first_line(s));
      }
      return buffer.flat_size() > 0 ? Status::ok() : fail("an allocation is empty", first_line(s));
    }
    case StmtKind::if_then_else: {
      const Expr& condition = s.as<IfThenElse>()->condition;
      if (condition.type() == DType::boolean) return Status::ok();
      return fail(fmt::format("an if condition is {}, not bool", dtype_name(condition.type())),
                  first_line(s));
    }
    case StmtKind::library_call:
      return check_library_call(s);
    case StmtKind::let_stmt:
    case StmtKind::block: return Status::ok();
  }
  KILN_UNREACHABLE("bad statement kind {}", static_cast<int>(s.kind()));
}

// --- Scoping and nesting, over the whole tree ---------------------------------------------

class Verifier {
 public:
  Status bind_param(const Buffer& buffer) {
    if (buffer.scope() != MemoryScope::global) {
      return Status::errorf("parameter '{}' is in scope {}; parameters are global", buffer.name(),
                            memory_scope_name(buffer.scope()));
    }
    for (size_t k = 0; k < buffer.shape().size(); ++k) {
      if (buffer.shape()[k] < 0 || buffer.strides()[k] < 0) {
        return Status::errorf("parameter {} has a negative extent or stride",
                              print_buffer_decl(buffer));
      }
    }
    if (buffers_.contains(buffer.name())) {
      return Status::errorf("two parameters are named '{}'", buffer.name());
    }
    buffers_.emplace(buffer.name(), buffer);
    return Status::ok();
  }

  void bind_free_var(const std::string& name, DType type) { vars_.emplace(name, type); }

  Status check(const Expr& e) {
    KILN_RETURN_IF_ERROR(check_children(e));
    return check_expr_node(e);
  }

  Status check(const Stmt& s) {
    switch (s.kind()) {
      case StmtKind::for_loop: return check_for(s);
      case StmtKind::store: {
        const Store& st = *s.as<Store>();
        KILN_RETURN_IF_ERROR(check_buffer_use(st.buffer, first_line(s)));
        KILN_RETURN_IF_ERROR(check(st.index));
        KILN_RETURN_IF_ERROR(check(st.value));
        return check_stmt_node(s);
      }
      case StmtKind::let_stmt: {
        const LetStmt& l = *s.as<LetStmt>();
        KILN_RETURN_IF_ERROR(check(l.value));
        return in_scope(l.name, l.value.type(), first_line(s), [&] { return check(l.body); });
      }
      case StmtKind::allocate: return check_allocate(s);
      case StmtKind::if_then_else: {
        const IfThenElse& i = *s.as<IfThenElse>();
        KILN_RETURN_IF_ERROR(check(i.condition));
        KILN_RETURN_IF_ERROR(check_stmt_node(s));
        KILN_RETURN_IF_ERROR(check(i.then_case));
        return i.else_case.defined() ? check(i.else_case) : Status::ok();
      }
      case StmtKind::block:
        for (const Stmt& child : s.as<Block>()->stmts) KILN_RETURN_IF_ERROR(check(child));
        return Status::ok();
      case StmtKind::library_call:
        return s.as<LibraryCall>()->op == LibraryOp::gemm ? check_gemm_uses(s) : check_conv_uses(s);
    }
    KILN_UNREACHABLE("bad statement kind {}", static_cast<int>(s.kind()));
  }

 private:
  Status check_children(const Expr& e) {
    switch (e.kind()) {
      case ExprKind::int_imm:
      case ExprKind::float_imm: return Status::ok();
      case ExprKind::variable: return check_variable(e);
      case ExprKind::binary:
        KILN_RETURN_IF_ERROR(check(e.as<Binary>()->a));
        return check(e.as<Binary>()->b);
      case ExprKind::logical_not: return check(e.as<Not>()->a);
      case ExprKind::select: {
        const Select& s = *e.as<Select>();
        KILN_RETURN_IF_ERROR(check(s.condition));
        KILN_RETURN_IF_ERROR(check(s.true_value));
        return check(s.false_value);
      }
      case ExprKind::cast: return check(e.as<Cast>()->value);
      case ExprKind::load:
        KILN_RETURN_IF_ERROR(check_buffer_use(e.as<Load>()->buffer, print(e)));
        return check(e.as<Load>()->index);
      case ExprKind::call:
        for (const Expr& arg : e.as<Call>()->args) KILN_RETURN_IF_ERROR(check(arg));
        return Status::ok();
      case ExprKind::let: {
        const Let& l = *e.as<Let>();
        KILN_RETURN_IF_ERROR(check(l.value));
        return in_scope(l.name, l.value.type(), print(e), [&] { return check(l.body); });
      }
      case ExprKind::reduce: return check_reduce_scope(e);
    }
    KILN_UNREACHABLE("bad expression kind {}", static_cast<int>(e.kind()));
  }

  Status check_variable(const Expr& e) {
    const Variable& v = *e.as<Variable>();
    auto it = vars_.find(v.name);
    if (it == vars_.end()) return fail(fmt::format("variable '{}' is not bound", v.name), v.name);
    if (it->second != e.type()) {
      return fail(fmt::format("variable '{}' is used as {} but bound as {}", v.name,
                              dtype_name(e.type()), dtype_name(it->second)),
                  v.name);
    }
    return Status::ok();
  }

  Status check_reduce_scope(const Expr& e) {
    const Reduce& r = *e.as<Reduce>();
    KILN_RETURN_IF_ERROR(check(r.min));
    KILN_RETURN_IF_ERROR(check(r.extent));
    if (r.vectorized && inside_vectorized_) {
      return fail("a vectorized reduction inside a vectorized loop or reduction", print(e));
    }
    const bool outer = inside_vectorized_;
    inside_vectorized_ = outer || r.vectorized;
    const Status body = in_scope(r.var, DType::i64, print(e), [&] { return check(r.body); });
    inside_vectorized_ = outer;
    return body;
  }

  Status check_for(const Stmt& s) {
    const For& f = *s.as<For>();
    const std::string header = first_line(s);
    KILN_RETURN_IF_ERROR(check(f.min));
    KILN_RETURN_IF_ERROR(check(f.extent));
    KILN_RETURN_IF_ERROR(check_stmt_node(s));
    const bool vectorized = f.for_kind == ForKind::vectorized;
    if (inside_vectorized_ && (vectorized || f.for_kind == ForKind::parallel)) {
      return fail(fmt::format("a {} loop inside a vectorized loop", for_kind_name(f.for_kind)),
                  header);
    }
    KILN_RETURN_IF_ERROR(check_gpu_nesting(f, header));
    const bool outer = inside_vectorized_;
    const GpuLevel outer_gpu = gpu_level_;
    inside_vectorized_ = outer || vectorized;
    if (f.for_kind == ForKind::gpu_block) gpu_level_ = GpuLevel::block;
    if (f.for_kind == ForKind::gpu_thread) gpu_level_ = GpuLevel::thread;
    ++loop_depth_;
    Status status = in_scope(f.var, DType::i64, header, [&] { return check(f.body); });
    --loop_depth_;
    inside_vectorized_ = outer;
    gpu_level_ = outer_gpu;
    return status;
  }

  // A gpu_block loop is a launch: not inside another GPU loop or a vectorized one. A
  // gpu_thread loop spreads over one block's threads: directly in a block's body, not in
  // another thread loop. Neither has parallel or vectorized loops around it.
  Status check_gpu_nesting(const For& f, const std::string& header) {
    if (f.for_kind == ForKind::gpu_block && (gpu_level_ != GpuLevel::none || inside_vectorized_)) {
      return fail("a gpu_block loop inside a GPU or vectorized loop", header);
    }
    if (f.for_kind == ForKind::gpu_thread && gpu_level_ != GpuLevel::block) {
      return fail("a gpu_thread loop outside a gpu_block loop, or inside another thread loop",
                  header);
    }
    if (gpu_level_ != GpuLevel::none && f.for_kind == ForKind::parallel) {
      return fail("a parallel loop inside a GPU loop", header);
    }
    return Status::ok();
  }

  Status check_gemm_uses(const Stmt& s) {
    const LibraryCall& g = *s.as<LibraryCall>();
    const std::string line = first_line(s);
    // A GPU runs a gemm as a launch of its own (codegen/cuda/gpu_mapping.h).
    if (gpu_level_ != GpuLevel::none) return fail("a gemm inside a GPU loop", line);
    for (const MatrixRegion* region : {&g.a(), &g.b(), &g.c()}) {
      KILN_RETURN_IF_ERROR(check_buffer_use(region->buffer, line));
      KILN_RETURN_IF_ERROR(check(region->offset));
    }
    for (const Expr* extent : {&g.gemm().m, &g.gemm().n, &g.gemm().k})
      KILN_RETURN_IF_ERROR(check(*extent));
    if (g.hints.packed.defined()) {
      KILN_RETURN_IF_ERROR(check_buffer_use(g.hints.packed, line));
      // Packed once per kernel run, by whichever thread gets there: not inside a loop.
      if (loop_depth_ > 0) return fail("a gemm with packed B inside a loop", line);
    }
    return check_stmt_node(s);
  }

  Status check_conv_uses(const Stmt& s) {
    const LibraryCall& c = *s.as<LibraryCall>();
    const std::string line = first_line(s);
    if (gpu_level_ != GpuLevel::none) return fail("a conv inside a GPU loop", line);
    for (const Buffer* operand : {&c.x().buffer, &c.w().buffer, &c.y().buffer}) {
      KILN_RETURN_IF_ERROR(check_buffer_use(*operand, line));
    }
    if (c.bias().defined()) KILN_RETURN_IF_ERROR(check_buffer_use(c.bias(), line));
    KILN_RETURN_IF_ERROR(check(c.x().offset));
    KILN_RETURN_IF_ERROR(check(c.y().offset));
    if (c.hints.packed.defined()) {
      KILN_RETURN_IF_ERROR(check_buffer_use(c.hints.packed, line));
      // Reordered once per kernel run, by whichever thread gets there: not inside a loop.
      if (loop_depth_ > 0) return fail("a conv with kept weights inside a loop", line);
    }
    return check_stmt_node(s);
  }

  Status check_allocate(const Stmt& s) {
    const Allocate& a = *s.as<Allocate>();
    KILN_RETURN_IF_ERROR(check_stmt_node(s));
    if (buffers_.contains(a.buffer.name())) {
      return fail(fmt::format("buffer '{}' is already declared", a.buffer.name()), first_line(s));
    }
    buffers_.emplace(a.buffer.name(), a.buffer);
    Status status = check(a.body);
    buffers_.erase(a.buffer.name());
    return status;
  }

  Status check_buffer_use(const Buffer& buffer, const std::string& node) {
    auto it = buffers_.find(buffer.name());
    if (it == buffers_.end()) {
      return fail(fmt::format("buffer '{}' is neither a parameter nor an enclosing allocation",
                              buffer.name()),
                  node);
    }
    if (!(it->second.node() == buffer.node())) {
      return fail(fmt::format("buffer {} is declared as {}", print_buffer_decl(buffer),
                              print_buffer_decl(it->second)),
                  node);
    }
    return Status::ok();
  }

  // Checks `body` with `name` bound to `type`.
  template <typename Fn>
  Status in_scope(const std::string& name, DType type, const std::string& binder, Fn&& body) {
    if (vars_.contains(name)) {
      return fail(fmt::format("'{}' is bound again inside its own scope", name), binder);
    }
    vars_.emplace(name, type);
    Status status = body();
    vars_.erase(name);
    return status;
  }

  std::map<std::string, DType, std::less<>> vars_;
  std::map<std::string, Buffer, std::less<>> buffers_;
  bool inside_vectorized_ = false;
  enum class GpuLevel : uint8_t { none, block, thread };
  GpuLevel gpu_level_ = GpuLevel::none;
  int loop_depth_ = 0;  // for loops around the statement checked
};

}  // namespace

Status verify(const Kernel& kernel) {
  Verifier verifier;
  for (const Buffer& param : kernel.params) {
    Status status = verifier.bind_param(param);
    if (!status) return status.with_context(fmt::format("kernel '{}'", kernel.name));
  }
  Status status = verifier.check(kernel.body);
  if (!status) return status.with_context(fmt::format("kernel '{}'", kernel.name));
  return Status::ok();
}

Status verify(const Expr& expr, const std::map<std::string, DType, std::less<>>& free_vars,
              const std::vector<Buffer>& buffers) {
  Verifier verifier;
  for (const Buffer& buffer : buffers) KILN_RETURN_IF_ERROR(verifier.bind_param(buffer));
  for (const auto& [name, type] : free_vars) verifier.bind_free_var(name, type);
  return verifier.check(expr);
}

Status check_node(const Expr& expr) { return check_expr_node(expr); }

Status check_node(const Stmt& stmt) { return check_stmt_node(stmt); }

}  // namespace kiln::loop
