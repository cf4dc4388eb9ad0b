#include "loop/stmt.h"

#include <algorithm>

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

std::string_view library_op_name(LibraryOp op) {
  switch (op) {
    case LibraryOp::gemm:
      return "gemm";
    case LibraryOp::conv:
      return "conv";
  }
  return "?";
}

Buffer LibraryCall::bias() const {
  for (const Epilogue& epilogue : epilogues) {
    if (epilogue.kind == EpilogueKind::bias) return epilogue.operand;
  }
  return Buffer();
}

bool LibraryCall::applies(EpilogueKind epilogue_kind) const {
  return std::ranges::any_of(epilogues, [&](const Epilogue& e) { return e.kind == epilogue_kind; });
}

Stmt gemm(GemmArgs args) {
  for (const MatrixRegion* region : {&args.a, &args.b, &args.c}) {
    KILN_CHECK(region->buffer.defined() && region->offset.defined(),
               "gemm with an undefined operand");
  }
  KILN_CHECK(args.m.defined() && args.n.defined() && args.k.defined(),
             "gemm with an undefined extent");
  const LibraryDTypes dtypes{.a = args.a.buffer.dtype(),
                             .b = args.b.buffer.dtype(),
                             .accumulate = accumulation_dtype(args.c.buffer.dtype()),
                             .out = args.c.buffer.dtype()};
  return Stmt(std::make_shared<const LibraryCall>(
      LibraryOp::gemm, std::vector<MatrixRegion>{args.a, args.b, args.c},
      GemmShape{.transpose_a = args.transpose_a,
                .transpose_b = args.transpose_b,
                .m = std::move(args.m),
                .n = std::move(args.n),
                .k = std::move(args.k),
                .accumulate = args.accumulate},
      dtypes, std::vector<Epilogue>{}, LibraryHints{.packed = std::move(args.packed_b)}));
}

GemmArgs gemm_args(const LibraryCall& call) {
  const GemmShape& shape = call.gemm();
  return {.a = call.a(),
          .b = call.b(),
          .c = call.c(),
          .transpose_a = shape.transpose_a,
          .transpose_b = shape.transpose_b,
          .m = shape.m,
          .n = shape.n,
          .k = shape.k,
          .accumulate = shape.accumulate,
          .packed_b = call.hints.packed};
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
  KILN_CHECK(args.x.defined() && args.x_offset.defined() && args.w.defined() && args.y.defined() &&
                 args.y_offset.defined(),
             "conv with an undefined operand");
  std::vector<Epilogue> epilogues;
  if (args.bias.defined()) epilogues.push_back({EpilogueKind::bias, std::move(args.bias)});
  if (args.relu) epilogues.push_back({EpilogueKind::relu, Buffer()});
  const LibraryDTypes dtypes{.a = args.x.dtype(),
                             .b = args.w.dtype(),
                             .accumulate = accumulation_dtype(args.y.dtype()),
                             .out = args.y.dtype()};
  return Stmt(std::make_shared<const LibraryCall>(
      LibraryOp::conv,
      std::vector<MatrixRegion>{{args.x, std::move(args.x_offset), 0},
                                {args.w, make_int(0), 0},
                                {args.y, std::move(args.y_offset), 0}},
      std::move(args.geometry), dtypes, std::move(epilogues),
      LibraryHints{.packed = std::move(args.packed_w), .winograd = args.winograd}));
}

ConvArgs conv_args(const LibraryCall& call) {
  return {.x = call.x().buffer,
          .x_offset = call.x().offset,
          .w = call.w().buffer,
          .bias = call.bias(),
          .y = call.y().buffer,
          .y_offset = call.y().offset,
          .geometry = call.conv(),
          .relu = call.applies(EpilogueKind::relu),
          .winograd = call.hints.winograd,
          .packed_w = call.hints.packed};
}

Stmt no_op() { return block({}); }

bool is_no_op(const Stmt& stmt) {
  const Block* b = stmt.as<Block>();
  return b != nullptr && b->stmts.empty();
}

}  // namespace kiln::loop
