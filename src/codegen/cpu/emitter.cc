#include "codegen/cpu/emitter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "codegen/c_syntax.h"
#include "codegen/cpu/prelude.h"
#include "loop/ir_visitor.h"
#include "loop/scalar.h"
#include "loop/schedule.h"
#include "loop/schedule_analysis.h"
#include "loop/substitute.h"
#include "loop/verifier.h"
#include "support/check.h"

namespace kiln::codegen::cpu {
namespace {

using loop::Expr;
using loop::Stmt;

// The loads a vectorized loop's body makes on every iteration at the same element: their
// index uses only variables bound outside the loop, and the loop neither stores into nor
// allocates their buffer. Only loads the body always evaluates count (a select evaluates both
// branches, as the IR defines it; a reduction's body, an inner loop's and an if's branches may
// not run), so reading one once before the loop, which runs at least once (its extent is a
// positive constant), reads nothing the loop would not.
//
// Why the emitter reads them before the loop: inside an OpenMP parallel region the buffer
// pointers are the outlined function's captures, no longer __restrict, so GCC must assume
// that the loop's stores may change such an element, reloads it every iteration and refuses
// to vectorize ("latch block not empty"). BERT's attention softmax, whose scaling factor is
// a one-element buffer, ran its exp scalar: 6.8 ms against 2.5 ms on one core.
class InvariantLoads : public loop::IRVisitor {
 public:
  InvariantLoads(std::set<std::string, std::less<>> outer_vars,
                 std::set<std::string, std::less<>> changing)
      : outer_vars_(std::move(outer_vars)), changing_(std::move(changing)) {}

  std::vector<const loop::Load*> loads;

 protected:
  void visit_load(const loop::Load& node) override {
    const auto vars = loop::free_vars(node.index);
    const bool invariant = std::all_of(vars.begin(), vars.end(), [&](const std::string& v) {
      return outer_vars_.contains(v);
    });
    if (invariant && !changing_.contains(node.buffer.name())) loads.push_back(&node);
    IRVisitor::visit_load(node);
  }
  void visit_reduce(const loop::Reduce&) override {}
  void visit_for(const loop::For& node) override {
    visit(node.min);
    visit(node.extent);
  }
  void visit_if_then_else(const loop::IfThenElse& node) override { visit(node.condition); }

 private:
  std::set<std::string, std::less<>> outer_vars_;
  std::set<std::string, std::less<>> changing_;  // written or allocated by the loop
};

// Emits one kernel function. Scopes map loop-IR names (never emitted) to fresh identifiers.
class KernelEmitter : public ExprEmitter {
 public:
  KernelEmitter() : ExprEmitter("std::") {}

  std::string emit(const loop::Kernel& kernel, std::string_view symbol) {
    out_ += fmt::format("extern \"C\" void {}(void* const* buffers) {{\n", symbol);
    indent_ = 1;
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      const loop::Buffer& param = kernel.params[i];
      const std::string ident = fmt::format("b{}", i);
      line(fmt::format("// parameter {}: {}[{}]", i, dtype_name(param.dtype()),
                       fmt::join(param.shape(), ", ")));
      line(fmt::format("{0}* __restrict const {1} = static_cast<{0}*>(buffers[{2}]);",
                       storage_type(param.dtype()), ident, i));
      buffers_.emplace_back(param.name(), ident);
    }
    emit_stmt(kernel.body);
    out_ += "}\n";
    return std::move(out_);
  }

 private:
  // A GNU statement expression, ({ const T v = value; body; }): unlike a lambda it captures
  // nothing, so a let inside a vectorized loop reads the loop's variables and buffers
  // directly (through a lambda's captures GCC reloads them per lane and vectorizes a
  // contiguous load as a gather).
  std::string emit_let(const loop::Let& let) override {
    const std::string value = emit_expr(let.value);
    const std::string ident = bind_var(let.name);
    const std::string body = emit_expr(let.body);
    unbind_var();
    return fmt::format("({{ const {} {} = {}; {}; }})", value_type(let.value.type()), ident, value,
                       body);
  }

  // [&]() -> T { const int64_t v_begin = min, v_end = v_begin + extent;
  //              if (v_end <= v_begin) return identity;
  //              T acc = start; for (v = v_begin; v < v_end; ++v) acc = acc op body;
  //              return acc; }()
  std::string emit_reduce(const loop::Reduce& r) override {
    if (r.vectorized) return emit_vectorized_reduce(r);
    const std::string min = emit_expr(r.min), extent = emit_expr(r.extent);
    const std::string acc = fresh_name('r');
    const std::string v = bind_var(r.var);
    const std::string body = emit_expr(r.body);
    unbind_var();
    const DType type = r.type;
    const std::string identity = scalar_constant(loop::reduce_identity(r.op, type), type);
    // -0.0 + x is x for every x (0.0 + -0.0 is not), so a floating sum started there equals
    // one started from the first term, as the IR defines it.
    const std::string start = r.op == loop::ReduceOp::sum && is_floating(type)
                                  ? float_constant(-0.0, type)
                                  : identity;
    const std::string combined = emit_binary(loop::reduce_combiner(r.op), type, acc, body);
    return fmt::format(
        "[&]() -> {0} {{ const int64_t {1}_begin = {2}, {1}_end = {1}_begin + {3}; "
        "if ({1}_end <= {1}_begin) return {4}; {0} {5} = {6}; "
        "for (int64_t {1} = {1}_begin; {1} < {1}_end; ++{1}) {5} = {7}; return {5}; }}()",
        value_type(type), v, min, extent, identity, acc, start, combined);
  }

  // A vectorized reduction keeps N = loop::reduction_lanes partial results, one per lane,
  // each combining every N-th term; an OpenMP simd loop updates all lanes at once. The last
  // extent % N terms and then the lanes are combined in a scalar accumulator:
  //
  //   [&]() -> T { <local copies>; const int64_t v_begin = min, v_end = v_begin + extent;
  //                if (v_end <= v_begin) return identity;
  //                T lanes[16]; for (l) lanes[l] = start;
  //                int64_t v0 = v_begin;
  //                for (; v0 + 16 <= v_end; v0 += 16) {
  //                  _Pragma("omp simd") for (l, 0, 16) { const int64_t v = v0 + l;
  //                                                       lanes[l] = lanes[l] op body; } }
  //                T acc = start; for (v = v0; v < v_end; ++v) acc = acc op body;
  //                for (l) acc = acc op lanes[l]; return acc; }()
  //
  // The body reads every buffer pointer and outer variable through a copy made inside the
  // lambda: read through the lambda's captures, GCC reloads them for every lane and turns a
  // contiguous load into a gather.
  std::string emit_vectorized_reduce(const loop::Reduce& r) {
    const int64_t lanes_count = loop::reduction_lanes(r);
    const std::string min = emit_expr(r.min), extent = emit_expr(r.extent);
    std::string copies;
    size_t vars_bound = 0, buffers_bound = 0;
    for (const std::string& name : loop::free_vars(r.body)) {
      if (name == r.var) continue;
      const std::string ident = fresh_name('c');
      copies += fmt::format("const auto {} = {}; ", ident, lookup(vars_, name));
      vars_.emplace_back(name, ident);
      ++vars_bound;
    }
    for (const std::string& name : loop::buffers_used(r.body)) {
      const std::string ident = fresh_name('c');
      // A reduction's body only loads, so its copies may be restrict whatever they point to.
      copies += fmt::format("auto* __restrict const {} = {}; ", ident, lookup(buffers_, name));
      buffers_.emplace_back(name, ident);
      ++buffers_bound;
    }
    const std::string lanes = fresh_name('l'), lane = fresh_name('l'), first = fresh_name('k');
    const std::string acc = fresh_name('r');
    const std::string v = bind_var(r.var);
    // The body runs in the lanes' vector loop (and, for the tail, in a scalar one).
    ++vector_depth_;
    const std::string body = emit_expr(r.body);
    --vector_depth_;
    unbind_var();
    vars_.resize(vars_.size() - vars_bound);
    buffers_.resize(buffers_.size() - buffers_bound);
    const DType type = r.type;
    const std::string_view t = value_type(type);
    const std::string identity = scalar_constant(loop::reduce_identity(r.op, type), type);
    const std::string start = r.op == loop::ReduceOp::sum && is_floating(type)
                                  ? float_constant(-0.0, type)
                                  : identity;
    const loop::BinaryOp op = loop::reduce_combiner(r.op);
    return fmt::format(
        "[&]() -> {t} {{ {copies}const int64_t {v}_begin = {min}, {v}_end = {v}_begin + {extent}; "
        "if ({v}_end <= {v}_begin) return {identity}; "
        "{t} {lanes}[{n}]; for (int {lane} = 0; {lane} < {n}; ++{lane}) {lanes}[{lane}] = {start}; "
        "int64_t {first} = {v}_begin; "
        "for (; {first} + {n} <= {v}_end; {first} += {n}) {{ _Pragma(\"omp simd\") "
        "for (int64_t {lane} = 0; {lane} < {n}; ++{lane}) {{ const int64_t {v} = {first} + {lane}; "
        "{lanes}[{lane}] = {lane_update}; }} }} "
        "{t} {acc} = {start}; "
        "for (int64_t {v} = {first}; {v} < {v}_end; ++{v}) {acc} = {tail_update}; "
        "for (int {lane} = 0; {lane} < {n}; ++{lane}) {acc} = {combine}; return {acc}; }}()",
        fmt::arg("t", t), fmt::arg("copies", copies), fmt::arg("v", v), fmt::arg("min", min),
        fmt::arg("extent", extent), fmt::arg("identity", identity), fmt::arg("lanes", lanes),
        fmt::arg("lane", lane), fmt::arg("n", lanes_count), fmt::arg("start", start),
        fmt::arg("first", first), fmt::arg("acc", acc),
        fmt::arg("lane_update", binary(op, type, fmt::format("{}[{}]", lanes, lane), body)),
        fmt::arg("tail_update", emit_binary(op, type, acc, body)),
        fmt::arg("combine", emit_binary(op, type, acc, fmt::format("{}[{}]", lanes, lane))));
  }

  // --- Statements -------------------------------------------------------------------------

  void emit_stmt(const Stmt& s) override {
    if (emit_structured(s)) return;
    switch (s.kind()) {
      case loop::StmtKind::for_loop: emit_for(*s.as<loop::For>()); return;
      case loop::StmtKind::store: {
        const auto* st = s.as<loop::Store>();
        line(fmt::format("{} = {};", element(st->buffer, st->index),
                         stored_value(st->buffer.dtype(), emit_expr(st->value))));
        return;
      }
      case loop::StmtKind::allocate: emit_allocate(*s.as<loop::Allocate>()); return;
      case loop::StmtKind::library_call:
        emit_library_call(*s.as<loop::LibraryCall>());
        return;
      default: break;
    }
    KILN_UNREACHABLE("bad statement kind {}", static_cast<int>(s.kind()));
  }

  void emit_for(const loop::For& f) {
    const std::optional<int64_t> const_min = loop::as_const_int(f.min);
    const std::optional<int64_t> const_extent = loop::as_const_int(f.extent);
    const bool constant_bounds = const_min && const_extent;
    std::string begin, end;
    if (constant_bounds) {
      begin = int_constant(*const_min, DType::i64);
      end = int_constant(*const_min + *const_extent, DType::i64);
    } else {
      // Bounds are evaluated once, before the loop (and outside an OpenMP region's loop
      // header, which needs invariant bounds).
      const std::string min = emit_expr(f.min), extent = emit_expr(f.extent);
      const std::string bounds = fresh_name('n');
      begin = bounds + "_begin";
      end = bounds + "_end";
      line("{");
      ++indent_;
      line(fmt::format("const int64_t {} = {};", begin, min));
      line(fmt::format("const int64_t {} = {} + {};", end, begin, extent));
    }
    const bool opens_parallel_region = f.for_kind == loop::ForKind::parallel && !in_parallel_;
    // Heap allocations at the top of a parallel loop's body (a parallel batch's gemm blocks,
    // loop/lowering/gemm.h) are made once per thread, in the region around the loop, not on
    // every iteration, which faulted their pages in each time: an allocation starts
    // uninitialised, so an iteration cannot tell its block from the last one's.
    std::vector<const loop::Buffer*> per_thread;
    const loop::Stmt* body = &f.body;
    while (opens_parallel_region && body->as<loop::Allocate>() != nullptr &&
           on_heap(body->as<loop::Allocate>()->buffer)) {
      per_thread.push_back(&body->as<loop::Allocate>()->buffer);
      body = &body->as<loop::Allocate>()->body;
    }
    if (!per_thread.empty()) {
      line("#pragma omp parallel");
      line("{");
      ++indent_;
      for (const loop::Buffer* buffer : per_thread) declare_local(*buffer);
      line("#pragma omp for");
    } else if (opens_parallel_region) {
      line("#pragma omp parallel for");
    }
    if (f.for_kind == loop::ForKind::vectorized) {
      read_invariant_loads(f);
      line("#pragma omp simd");
    }
    if (f.for_kind == loop::ForKind::unrolled) {
      // GCC accepts unroll factors up to 65534; the verifier makes the extent a constant.
      line(fmt::format("#pragma GCC unroll {}", std::min<int64_t>(*const_extent, 65534)));
    }
    const std::string v = bind_var(f.var);
    line(fmt::format("for (int64_t {0} = {1}; {0} < {2}; ++{0}) {{", v, begin, end));
    in_parallel_ = in_parallel_ || opens_parallel_region;
    const bool vectorized = f.for_kind == loop::ForKind::vectorized;
    vector_depth_ += vectorized ? 1 : 0;
    emit_nested(*body);
    vector_depth_ -= vectorized ? 1 : 0;
    if (opens_parallel_region) in_parallel_ = false;
    hoisted_loads_.clear();
    line("}");
    unbind_var();
    if (!per_thread.empty()) {
      buffers_.resize(buffers_.size() - per_thread.size());
      --indent_;
      line("}");
    }
    if (!constant_bounds) {
      --indent_;
      line("}");
    }
  }

  // Reads each of a vectorized loop's invariant loads (see InvariantLoads) into a constant
  // before it; the loop's body then names the constant.
  void read_invariant_loads(const loop::For& f) {
    std::set<std::string, std::less<>> outer_vars;
    for (const auto& [name, ident] : vars_) outer_vars.insert(name);
    // Buffers the loop writes or allocates (a vector loop holds no gemm) are not invariant.
    loop::Accesses accesses = loop::collect_accesses(f.body, {});
    std::set<std::string, std::less<>> changing = std::move(accesses.allocated);
    for (const loop::Access& access : accesses.list) {
      if (access.is_store) changing.insert(access.buffer.name());
    }
    InvariantLoads invariant(std::move(outer_vars), std::move(changing));
    invariant.visit(f.body);
    for (const loop::Load* load : invariant.loads) {
      std::string read = element(load->buffer, load->index);
      if (hoisted_loads_.contains(read)) continue;
      const std::string ident = fresh_name('h');
      line(fmt::format("const {} {} = {};", value_type(load->type), ident,
                       load_value(load->type, read)));
      hoisted_loads_.emplace(std::move(read), ident);
    }
  }

  // min and max outside vector code as the prelude's branch-free scalar forms.
  std::string emit_binary(loop::BinaryOp op, DType type, const std::string& a,
                          const std::string& b) override {
    const bool min_max = op == loop::BinaryOp::min || op == loop::BinaryOp::max;
    if (!min_max || vector_depth_ > 0) return binary(op, type, a, b);
    return fmt::format("kiln_{}_scalar<{}>({}, {})", op == loop::BinaryOp::min ? "min" : "max",
                       value_type(type), a, b);
  }

  // f32 exp in vector code as the prelude's kiln_exp_vector, which keeps every lane in
  // libmvec's vector path.
  std::string emit_call(const loop::Call& call, const std::vector<std::string>& args) override {
    if (call.intrinsic != loop::Intrinsic::exp || vector_depth_ == 0 ||
        value_type(call.type) != "float") {
      return ExprEmitter::emit_call(call, args);
    }
    return round_to(call.type, fmt::format("kiln_exp_vector({})", args[0]));
  }

  std::string emit_load(const loop::Load& load) override {
    if (hoisted_loads_.empty()) return ExprEmitter::emit_load(load);
    const auto hoisted = hoisted_loads_.find(element(load.buffer, load.index));
    if (hoisted != hoisted_loads_.end()) return hoisted->second;
    return ExprEmitter::emit_load(load);
  }

  // A library call as the prelude's call of its library (codegen/cpu/prelude.h).
  void emit_library_call(const loop::LibraryCall& call) {
    if (call.op == loop::LibraryOp::gemm) return emit_gemm(call);
    emit_conv(call);
  }

  // kiln_gemm(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate): the
  // prelude's wrapper of its libraries' gemm for f32 and f64; kiln_gemm_bf16 and
  // kiln_gemm_f16 for mixed precision's (their operands' bits), and kiln_gemm_bf16_f32 and
  // kiln_gemm_f16_f32 for those into an f32 C.
  void emit_gemm(const loop::LibraryCall& g) {
    const auto region = [&](const loop::MatrixRegion& r) {
      return fmt::format("{} + {}, {}", lookup(buffers_, r.buffer.name()), emit_expr(r.offset),
                         int_constant(r.leading_dim, DType::i64));
    };
    const std::string operands = fmt::format(
        "{}, {}, {}, {}, {}, {}, {}, {}", g.gemm().transpose_a ? "true" : "false",
        g.gemm().transpose_b ? "true" : "false", emit_expr(g.gemm().m), emit_expr(g.gemm().n),
        emit_expr(g.gemm().k), region(g.a()), region(g.b()), region(g.c()));
    const DType dtype = g.dtypes.a;
    std::string function = "kiln_gemm";
    if (is_low_precision(dtype)) function += fmt::format("_{}", dtype_name(dtype));
    if (g.dtypes.out != dtype) function += fmt::format("_{}", dtype_name(g.dtypes.out));
    const std::string call = fmt::format("{}({}, {});", function, operands,
                                         g.gemm().accumulate ? "true" : "false");
    if (!g.hints.packed.defined()) {
      line(call);
      return;
    }
    // The verifier allows a packed B only where nothing accumulates (loop/verifier.h).
    line(fmt::format("if (!kiln_gemm_dnnl({}, false, {}, {})) {}", operands,
                     lookup(buffers_, g.hints.packed.name()),
                     g.hints.packed.flat_size() * dtype_size_bytes(g.hints.packed.dtype()), call));
  }

  // kiln_conv_dnnl(spatial, images, C, O, groups, geometry, x, w, bias, relu, y, state,
  // state bytes, winograd), and kiln_conv_direct where oneDNN declines; kiln_conv_bf16 and
  // kiln_conv_f16 (the same arguments) for mixed precision's. The geometry is a constant array
  // per call.
  void emit_conv(const loop::LibraryCall& c) {
    const loop::ConvGeometry& g = c.conv();
    std::vector<int64_t> geometry;
    for (size_t d = 0; d < g.in_spatial.size(); ++d) {
      geometry.insert(geometry.end(), {g.in_spatial[d], g.out_spatial[d], g.kernel[d], g.strides[d],
                                       g.pads_begin[d], g.dilations[d]});
    }
    const std::string array = fresh_name('g');
    const std::string x =
        fmt::format("{} + {}", lookup(buffers_, c.x().buffer.name()), emit_expr(c.x().offset));
    const std::string y =
        fmt::format("{} + {}", lookup(buffers_, c.y().buffer.name()), emit_expr(c.y().offset));
    const std::string bias = c.bias().defined() ? lookup(buffers_, c.bias().name()) : "nullptr";
    const std::string operands =
        fmt::format("{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}", g.spatial(),
                    int_constant(g.images, DType::i64), int_constant(g.channels, DType::i64),
                    int_constant(g.out_channels, DType::i64), int_constant(g.groups, DType::i64),
                    array, x, lookup(buffers_, c.w().buffer.name()), bias,
                    c.applies(loop::EpilogueKind::relu) ? "true" : "false", y);
    line("{");
    ++indent_;
    line(fmt::format("static constexpr int64_t {}[] = {{{}}};", array, fmt::join(geometry, ", ")));
    const std::string state =
        c.hints.packed.defined()
            ? fmt::format("{}, {}", lookup(buffers_, c.hints.packed.name()),
                          c.hints.packed.flat_size() * dtype_size_bytes(c.hints.packed.dtype()))
            : std::string("nullptr, 0");
    const std::string_view winograd = c.hints.winograd ? "true" : "false";
    const DType dtype = c.dtypes.out;
    if (is_low_precision(dtype)) {
      line(fmt::format("kiln_conv_{}({}, {}, {});", dtype_name(dtype), operands, state, winograd));
    } else {
      line(fmt::format("if (!kiln_conv_dnnl({}, {}, {})) kiln_conv_direct({});", operands, state,
                       winograd, operands));
    }
    --indent_;
    line("}");
  }

  // Whether `buffer` is too large for the stack: it is then allocated on the heap.
  static bool on_heap(const loop::Buffer& buffer) {
    return buffer.flat_size() * dtype_size_bytes(buffer.dtype()) > kMaxStackAllocationBytes;
  }

  // Declares `buffer`'s storage in the current scope and binds its name (the caller pops it
  // from buffers_ when the scope ends).
  void declare_local(const loop::Buffer& buffer) {
    const std::string ident = fresh_name('t');
    const std::string_view type = storage_type(buffer.dtype());
    const int64_t size = buffer.flat_size();
    if (!on_heap(buffer)) {
      // Reached through a pointer, as parameters are: a reduction's lambda captures an array
      // by reference, and GCC then finds no vector type for its loads (a max-pool row loop
      // stayed scalar, 2.5x slower).
      line(fmt::format("alignas(64) {} {}_storage[{}];", type, ident, size));
    } else {
      line(fmt::format("const std::unique_ptr<{0}[]> {1}_storage(new {0}[{2}]);", type, ident,
                       size));
    }
    line(fmt::format("{0}* __restrict const {1} = {1}_storage{2};", type, ident,
                     on_heap(buffer) ? ".get()" : ""));
    buffers_.emplace_back(buffer.name(), ident);
  }

  void emit_allocate(const loop::Allocate& a) {
    line("{");
    ++indent_;
    declare_local(a.buffer);
    emit_stmt(a.body);
    buffers_.pop_back();
    --indent_;
    line("}");
  }

  bool in_parallel_ = false;
  int vector_depth_ = 0;  // vectorized loops and reduction lanes around the code emitted
  // Inside a vectorized loop: the element each invariant load reads, as emitted, and the
  // constant it was read into before the loop.
  std::map<std::string, std::string> hoisted_loads_;
};

}  // namespace

std::string kernel_symbol(size_t index) { return fmt::format("kiln_kernel_{}", index); }

Expected<std::string> emit_translation_unit(std::span<const loop::Kernel> kernels) {
  std::string source(cpu_prelude());
  for (size_t i = 0; i < kernels.size(); ++i) {
    Status verified = loop::verify(kernels[i]);
    if (!verified) return verified.with_context(fmt::format("kernel {} of the unit", i));
    source += '\n';
    source += KernelEmitter().emit(kernels[i], kernel_symbol(i));
  }
  return source;
}

}  // namespace kiln::codegen::cpu
