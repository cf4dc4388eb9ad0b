// Loop IR statements and kernels: immutable trees of loops, stores, lets, allocations,
// conditionals and sequences over the expressions of loop/expr.h.
//
// Semantics (executed by loop/evaluator.h):
//  - `for (v, min, extent) body` runs body for v = min, min+1, ..., min+extent-1 (not at all
//    when extent <= 0); min and extent are i64 and evaluated once, before the first
//    iteration. The loop's kind changes how code generators run it, never what it computes:
//    `parallel` and `vectorized` promise that iterations are independent (the scheduler that
//    sets them proves it), `unrolled` asks for the body to be copied. Vectorized and unrolled
//    loops have constant extents. `gpu_block` and `gpu_thread` are the GPU mapping
//    (loop/gpu_mapping.h): a gpu_block loop is one kernel launch whose iterations are
//    thread blocks; a gpu_thread loop inside it spreads its iterations over the block's
//    threads, and statements of the block's body outside thread loops run once per block, in
//    order, with a barrier after each. Both promise independent iterations, as `parallel`
//    does; run serially (as the evaluator and the CPU back end run them), they compute the same.
//  - `store(b, i, v)` writes v (of b's element type) to element i of buffer b. An *atomic*
//    store (`atomic_add(b, i, d)`, whose value is b[i] + d) adds d to b[i] as one indivisible
//    step: the GPU mapping (loop/gpu_mapping.h) runs the iterations of a loop that only adds
//    into a buffer in parallel with atomic stores, so they may add in any order, and floating
//    sums then differ by rounding from run to run. Run serially it is an ordinary store.
//  - `let_stmt(v, value, body)` binds v in body; `allocate(b, body)` makes a local buffer b,
//    uninitialised, that lives for body's execution (per iteration of enclosing loops).
//  - `if_then_else(c, then, else)` (else optional), `block(s...)` runs statements in order.
//    The empty block is the no-op.
//  - `library call`: an operation a library computes (BLAS, oneDNN, cuBLASLt), one statement
//    with its operation, its operands (regions of buffers), the dtypes it reads, accumulates
//    in and writes {a, b, accumulate, out}, the epilogues it applies to each result element
//    in order (bias, relu), and hints for how to run it that never change what it computes
//    (a buffer where a constant operand is kept packed; Winograd's algorithm). The evaluator
//    gives each operation one reference semantics; each target maps it onto a library
//    (target/target.h), and a combination a library does not run is not lowered to a call.
//    The operations:
//  - gemm, a matrix product over regions of three buffers of one floating dtype (f32 or f64,
//    accumulating in it; f16 or bf16, accumulating in f32 and rounding once), or of f16 or bf16
//    A and B into an f32 C (the f32 sum unrounded, for a sum that goes on past the gemm):
//    for i in [0, m), j in [0, n)
//        C(i, j) = (accumulate ? C(i, j) : 0) + sum(p, 0, k, op(A)(i, p) * op(B)(p, j))
//    where a region's element (r, c) is buffer[offset + r * leading_dim + c] (row-major with a
//    row stride, as BLAS's row-major layout), op(A)(i, p) is A(i, p), or A(p, i) when A is
//    transposed, and likewise for B. Nothing is done when m or n <= 0; k <= 0 gives sums of
//    0. C must be a buffer other than A and B. The sum's order is unspecified: the evaluator
//    adds in order of increasing p and then adds the sum to C, a library (BLAS) blocks and
//    vectorises it, so floating results agree to rounding, not bit for bit. It is a statement
//    of its own, not a pattern of loops, so that code generators call a library for the inner
//    block of a contraction (codegen/cpu: cblas_sgemm / cblas_dgemm) while lowering keeps the
//    loops around it (batch, row blocks) and the epilogues that run on each block.
//    A gemm may name a packed buffer, an i64 parameter where the code generator keeps B
//    repacked into its library's layout from the first run on: it promises that B's region
//    holds the same values at every run of the kernel with that buffer (a weight compiled in
//    as a constant), so the copy made once stays valid. It changes how B is read, never what
//    the gemm computes, and the evaluator ignores it.
//  - conv, a convolution of channels-last images run by a library (oneDNN on a CPU), for f32,
//    and for bf16 and f16 (x, w, bias and y of the one dtype, summed in f32 and rounded once
//    to y's dtype after the relu): x holds `images` images [D..., C] from x's offset on, y
//    their outputs [Y..., O] from y's offset on, and w the weights [O, C/groups, K...]
//    (ONNX's layout) from element 0:
//        y[n, p..., o] = sum over c < C/groups and taps t of
//                        x[n, p * stride - pad_begin + t * dilation..., g * C/groups + c]
//                        * w[o, c, t...]        (g = o / (O/groups); x outside D is 0)
//    with 1 to 3 spatial dims, then its epilogues: plus bias[o] (a bias buffer of O
//    elements), then (v > 0 ? v : 0) for a relu, as the relu op (so NaN gives 0). It
//    overwrites y. As with gemm, the sum's order is the library's, so results agree with the
//    evaluator's to rounding. It may name a packed buffer, an i64 parameter where the code
//    generator keeps w reordered into the library's layout from the first run on: it promises
//    that w holds the same values at every run (a constant weight), and the evaluator ignores
//    it. A conv hinted `winograd` asks the library for Winograd's minimal filtering (the same
//    sum with fewer multiplications, rounded differently), and gets the direct sum where the
//    library has no such kernel for its shape; the evaluator computes the sum as for any conv.
// A Kernel is a name, its parameter buffers (scope global) and a body that reads and writes
// them; it is what lowering produces, scheduling transforms and code generators consume.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "loop/buffer.h"
#include "loop/expr.h"

namespace kiln::loop {

enum class StmtKind : uint8_t {
  for_loop,
  store,
  let_stmt,
  allocate,
  if_then_else,
  block,
  library_call
};
enum class ForKind : uint8_t { serial, parallel, vectorized, unrolled, gpu_block, gpu_thread };

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
  Store(Buffer buf, Expr i, Expr v, bool is_atomic = false)
      : StmtNode(kKind), buffer(std::move(buf)), index(std::move(i)), value(std::move(v)),
        atomic(is_atomic) {}
  const Buffer buffer;
  const Expr index, value;
  const bool atomic;  // value is buffer[index] + an addend, added atomically
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

// One matrix operand of a gemm: element (r, c) is buffer[offset + r * leading_dim + c].
// The offset is an i64 expression (it may depend on enclosing loops: a batch index, a row
// block); the leading dimension is a constant because buffers have static shapes, which
// lets the verifier check it against the matrix's width and the region against the buffer.
struct MatrixRegion {
  Buffer buffer = {};
  Expr offset = {};
  int64_t leading_dim = 0;
};

// The operation a library call computes (above). Batched gemms, the backward passes of
// convolutions, attention and sparse products are to join them.
enum class LibraryOp : uint8_t { gemm, conv };
std::string_view library_op_name(LibraryOp op);  // "gemm", "conv"

// The dtypes a library call reads (a, b: gemm's A and B, conv's x and w), accumulates in and
// writes.
struct LibraryDTypes {
  DType a = DType::f32, b = DType::f32, accumulate = DType::f32, out = DType::f32;
  bool operator==(const LibraryDTypes&) const = default;
};

// What a library call applies to each result element before storing it, in order.
enum class EpilogueKind : uint8_t {
  bias,  // plus operand[o], o the element's output channel (conv)
  relu,  // v > 0 ? v : 0
};
struct Epilogue {
  EpilogueKind kind = EpilogueKind::relu;
  Buffer operand = {};  // bias's values
  bool operator==(const Epilogue&) const = default;
};

// How a library runs a call, never what it computes (above).
struct LibraryHints {
  Buffer packed = {};     // where the constant operand (gemm's B, conv's w) is kept packed
  bool winograd = false;  // conv: Winograd's minimal filtering where the library has it
};

// A gemm's shape: C is m x n, the sum runs over k (i64 expressions).
struct GemmShape {
  bool transpose_a = false, transpose_b = false;
  Expr m = {}, n = {}, k = {};
  bool accumulate = false;  // C += (BLAS's beta 1) instead of C = (beta 0)
};

// The sizes of a conv (above); spatial vectors have one entry per spatial dim.
struct ConvGeometry {
  int64_t images = 0;
  int64_t channels = 0, out_channels = 0, groups = 1;    // C, O
  std::vector<int64_t> in_spatial, out_spatial, kernel;  // D, Y, K
  std::vector<int64_t> strides, pads_begin, dilations;

  int spatial() const { return static_cast<int>(in_spatial.size()); }
  int64_t x_elements() const;  // images * product(D) * C
  int64_t y_elements() const;  // images * product(Y) * O
  int64_t w_elements() const;  // O * C/groups * product(K)
  // The padding after each spatial dim that makes Y the output size (negative when the
  // window stops short of the input's end).
  std::vector<int64_t> pads_end() const;
  bool operator==(const ConvGeometry&) const = default;
};

struct LibraryCall final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::library_call;
  LibraryCall(LibraryOp op_, std::vector<MatrixRegion> operands_,
              std::variant<GemmShape, ConvGeometry> shape_, LibraryDTypes dtypes_,
              std::vector<Epilogue> epilogues_, LibraryHints hints_)
      : StmtNode(kKind),
        op(op_),
        operands(std::move(operands_)),
        shape(std::move(shape_)),
        dtypes(dtypes_),
        epilogues(std::move(epilogues_)),
        hints(std::move(hints_)) {}
  const LibraryOp op;
  // In the operation's order: gemm's A, B, C; conv's x, w, y (a conv operand's leading_dim is
  // 0: its images, or its weights, lie from the offset on).
  const std::vector<MatrixRegion> operands;
  const std::variant<GemmShape, ConvGeometry> shape;
  const LibraryDTypes dtypes;
  const std::vector<Epilogue> epilogues;
  const LibraryHints hints;

  // Named operands and shapes: gemm's a, b, c; conv's x, w, y.
  const MatrixRegion& a() const { return operands[0]; }
  const MatrixRegion& b() const { return operands[1]; }
  const MatrixRegion& c() const { return operands[2]; }
  const MatrixRegion& x() const { return operands[0]; }
  const MatrixRegion& w() const { return operands[1]; }
  const MatrixRegion& y() const { return operands[2]; }
  const GemmShape& gemm() const { return std::get<GemmShape>(shape); }
  const ConvGeometry& conv() const { return std::get<ConvGeometry>(shape); }
  // The bias epilogue's buffer, or an undefined one.
  Buffer bias() const;
  bool applies(EpilogueKind epilogue_kind) const;
};

// The arguments of a gemm call, named so that call sites read (designated initializers). Its
// dtypes are its operands', accumulating in C's accumulation dtype (f32 for f16 and bf16).
struct GemmArgs {
  MatrixRegion a = {}, b = {}, c = {};
  bool transpose_a = false, transpose_b = false;
  Expr m = {}, n = {}, k = {};
  bool accumulate = false;
  Buffer packed_b = {};
};

// The arguments of a conv call, named so that call sites read.
struct ConvArgs {
  Buffer x = {};
  Expr x_offset = {};
  Buffer w = {};
  Buffer bias = {};
  Buffer y = {};
  Expr y_offset = {};
  ConvGeometry geometry = {};
  bool relu = false;
  bool winograd = false;
  Buffer packed_w = {};
};

Stmt for_loop(std::string var, Expr min, Expr extent, ForKind kind, Stmt body);
inline Stmt for_loop(std::string var, Expr min, Expr extent, Stmt body) {
  return for_loop(std::move(var), std::move(min), std::move(extent), ForKind::serial,
                  std::move(body));
}
Stmt store(Buffer buffer, Expr index, Expr value);
// The atomic store of buffer[index] + addend (see above).
Stmt atomic_add(Buffer buffer, Expr index, Expr addend);
// v when `store`'s value is its own element plus v (buffer[index] + v, the form of an atomic
// store), else null.
const Expr* addend_to_own_element(const Store& store);
// The addend of an atomic store's value, buffer[index] + addend.
const Expr& atomic_addend(const Store& store);
// store(buffer, element_offset(buffer, indices), value).
Stmt store(const Buffer& buffer, const std::vector<Expr>& indices, Expr value);
Stmt let_stmt(std::string name, Expr value, Stmt body);
Stmt allocate(Buffer buffer, Stmt body);
Stmt if_then_else(Expr condition, Stmt then_case, Stmt else_case = Stmt());
Stmt block(std::vector<Stmt> stmts);
// Library calls of each operation, and the arguments that make one again, for a copy with
// some of them changed.
Stmt gemm(GemmArgs args);
GemmArgs gemm_args(const LibraryCall& call);
Stmt conv(ConvArgs args);
ConvArgs conv_args(const LibraryCall& call);
Stmt no_op();  // the empty block
bool is_no_op(const Stmt& stmt);
// The statements of `stmt` in order, nested blocks opened: {a, {b, c}} -> a, b, c.
std::vector<Stmt> flatten_blocks(const Stmt& stmt);

struct Kernel {
  std::string name;
  std::vector<Buffer> params;
  Stmt body;
};

}  // namespace kiln::loop
