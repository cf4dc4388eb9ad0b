#include "loop/stmt.h"

#include "support/check.h"

namespace kiln::loop {

std::string_view for_kind_name(ForKind kind) {
  switch (kind) {
    case ForKind::serial: return "serial";
    case ForKind::parallel: return "parallel";
    case ForKind::vectorized: return "vectorized";
    case ForKind::unrolled: return "unrolled";
    case ForKind::gpu_block: return "gpu_block";
    case ForKind::gpu_thread: return "gpu_thread";
  }
  KILN_UNREACHABLE("bad loop kind {}", static_cast<int>(kind));
}

Stmt for_loop(std::string var, Expr min, Expr extent, ForKind kind, Stmt body) {
  KILN_CHECK(min.defined() && extent.defined() && body.defined(),
             "loop over '{}' with an undefined part", var);
  return Stmt(std::make_shared<const For>(std::move(var), std::move(min), std::move(extent), kind,
                                          std::move(body)));
}

Stmt store(Buffer buffer, Expr index, Expr value) {
  KILN_CHECK(buffer.defined() && index.defined() && value.defined(),
             "store with an undefined part");
  return Stmt(std::make_shared<const Store>(std::move(buffer), std::move(index), std::move(value)));
}

Stmt atomic_add(Buffer buffer, Expr index, Expr addend) {
  KILN_CHECK(buffer.defined() && index.defined() && addend.defined(),
             "atomic add with an undefined part");
  Expr value = load(buffer, index) + std::move(addend);
  return Stmt(std::make_shared<const Store>(std::move(buffer), std::move(index), std::move(value),
                                            /*is_atomic=*/true));
}

const Expr* addend_to_own_element(const Store& store) {
  const Binary* sum = store.value.as<Binary>();
  if (sum == nullptr || sum->op != BinaryOp::add) return nullptr;
  const Load* element = sum->a.as<Load>();
  if (element == nullptr || element->buffer.name() != store.buffer.name() ||
      !equal(element->index, store.index)) {
    return nullptr;
  }
  return &sum->b;
}

const Expr& atomic_addend(const Store& store) {
  const Expr* addend = addend_to_own_element(store);
  KILN_CHECK(store.atomic && addend != nullptr,
             "atomic_addend of a store that is not an atomic add");
  return *addend;
}

Stmt store(const Buffer& buffer, const std::vector<Expr>& indices, Expr value) {
  return store(buffer, element_offset(buffer, indices), std::move(value));
}

Stmt let_stmt(std::string name, Expr value, Stmt body) {
  KILN_CHECK(value.defined() && body.defined(), "let '{}' with an undefined part", name);
  return Stmt(std::make_shared<const LetStmt>(std::move(name), std::move(value), std::move(body)));
}

Stmt allocate(Buffer buffer, Stmt body) {
  KILN_CHECK(buffer.defined() && body.defined(), "allocation with an undefined part");
  return Stmt(std::make_shared<const Allocate>(std::move(buffer), std::move(body)));
}

Stmt if_then_else(Expr condition, Stmt then_case, Stmt else_case) {
  KILN_CHECK(condition.defined() && then_case.defined(), "if with an undefined part");
  return Stmt(std::make_shared<const IfThenElse>(std::move(condition), std::move(then_case),
                                                 std::move(else_case)));
}

Stmt block(std::vector<Stmt> stmts) {
  for (const Stmt& s : stmts) KILN_CHECK(s.defined(), "block with an undefined statement");
  return Stmt(std::make_shared<const Block>(std::move(stmts)));
}

std::vector<Stmt> flatten_blocks(const Stmt& stmt) {
  const auto* seq = stmt.as<Block>();
  if (seq == nullptr) return {stmt};
  std::vector<Stmt> flat;
  for (const Stmt& child : seq->stmts) {
    std::vector<Stmt> inner = flatten_blocks(child);
    flat.insert(flat.end(), inner.begin(), inner.end());
  }
  return flat;
}

Stmt gemm(GemmArgs args) {
  for (const MatrixRegion* region : {&args.a, &args.b, &args.c}) {
    KILN_CHECK(region->buffer.defined() && region->offset.defined(),
               "gemm with an undefined operand");
  }
  KILN_CHECK(args.m.defined() && args.n.defined() && args.k.defined(),
             "gemm with an undefined extent");
  return Stmt(std::make_shared<const Gemm>(std::move(args.a), std::move(args.b),
                                           std::move(args.c), args.transpose_a, args.transpose_b,
                                           std::move(args.m), std::move(args.n),
                                           std::move(args.k), args.accumulate,
                                           std::move(args.packed_b)));
}

GemmArgs gemm_args(const Gemm& g) {
  return {.a = g.a,
          .b = g.b,
          .c = g.c,
          .transpose_a = g.transpose_a,
          .transpose_b = g.transpose_b,
          .m = g.m,
          .n = g.n,
          .k = g.k,
          .accumulate = g.accumulate,
          .packed_b = g.packed_b};
}

namespace {
int64_t product(const std::vector<int64_t>& dims) {
  int64_t result = 1;
  for (int64_t d : dims) result *= d;
  return result;
}
}  // namespace

int64_t ConvGeometry::x_elements() const { return images * product(in_spatial) * channels; }
int64_t ConvGeometry::y_elements() const { return images * product(out_spatial) * out_channels; }
int64_t ConvGeometry::w_elements() const {
  return out_channels * (groups > 0 ? channels / groups : 0) * product(kernel);
}

std::vector<int64_t> ConvGeometry::pads_end() const {
  std::vector<int64_t> ends;
  for (size_t d = 0; d < in_spatial.size(); ++d) {
    const int64_t last_read =
        (out_spatial[d] - 1) * strides[d] - pads_begin[d] + (kernel[d] - 1) * dilations[d];
    ends.push_back(last_read + 1 - in_spatial[d]);
  }
  return ends;
}

Stmt conv(ConvArgs args) {
  KILN_CHECK(args.x.defined() && args.w.defined() && args.y.defined() && args.x_offset.defined() &&
                 args.y_offset.defined(),
             "conv with an undefined operand");
  return Stmt(std::make_shared<const Conv>(
      std::move(args.x), std::move(args.x_offset), std::move(args.w), std::move(args.bias),
      std::move(args.y), std::move(args.y_offset), std::move(args.geometry), args.relu,
      args.winograd, std::move(args.packed_w)));
}

ConvArgs conv_args(const Conv& c) {
  return {.x = c.x,
          .x_offset = c.x_offset,
          .w = c.w,
          .bias = c.bias,
          .y = c.y,
          .y_offset = c.y_offset,
          .geometry = c.geometry,
          .relu = c.relu,
          .winograd = c.winograd,
          .packed_w = c.packed_w};
}

Stmt no_op() { return block({}); }

bool is_no_op(const Stmt& stmt) {
  const Block* b = stmt.as<Block>();
  return b != nullptr && b->stmts.empty();
}

}  // namespace kiln::loop
