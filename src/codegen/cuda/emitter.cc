#include "codegen/cuda/emitter.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "codegen/c_syntax.h"
#include "codegen/cuda/prelude.h"
#include "loop/gpu_mapping.h"
#include "loop/printer.h"
#include "loop/scalar.h"
#include "loop/verifier.h"
#include "support/check.h"

namespace kiln::codegen::cuda {
namespace {

using loop::Expr;
using loop::Stmt;

constexpr int64_t kGemmTile = 16;
constexpr int64_t kMaxGridX = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxGridY = 65535;

// The gemm of C's dtype (loop/stmt.h: a gemm's operands share it), as the runtime names it.
Expected<runtime::CudaGemm::Type> gemm_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return runtime::CudaGemm::Type::f32;
    case DType::f64: return runtime::CudaGemm::Type::f64;
    case DType::f16: return runtime::CudaGemm::Type::f16;
    case DType::bf16: return runtime::CudaGemm::Type::bf16;
    default:
      return Status::errorf(ErrorCode::internal,
                            "internal compiler error: a gemm of {} reached the CUDA emitter",
                            dtype_name(dtype));
  }
}

// One __global__ function's body for a gpu_block loop.
class LaunchEmitter : public ExprEmitter {
 public:
  LaunchEmitter(const loop::Kernel& kernel, std::span<const std::pair<std::string, int64_t>> host)
      : ExprEmitter("kiln_"), kernel_(kernel), host_(host) {}

  // The function with `@SYMBOL@` for its name.
  std::string emit(const loop::For& launch) {
    std::vector<std::string> params;
    for (size_t i = 0; i < kernel_.params.size(); ++i) {
      const loop::Buffer& param = kernel_.params[i];
      const std::string ident = fmt::format("b{}", i);
      params.push_back(fmt::format("{}* __restrict__ {}", storage_type(param.dtype()), ident));
      buffers_.emplace_back(param.name(), ident);
    }
    for (size_t i = 0; i < host_.size(); ++i) {
      const std::string ident = fmt::format("h{}", i);
      params.push_back(fmt::format("int64_t {}", ident));
      vars_.emplace_back(host_[i].first, ident);
    }
    out_ = fmt::format("extern \"C\" __global__ void __launch_bounds__({}) @SYMBOL@({}) {{\n",
                       loop::kGpuThreadsPerBlock, fmt::join(params, ", "));
    indent_ = 1;
    const std::string block = bind_var(launch.var);
    line(fmt::format("const int64_t {} = {} + static_cast<int64_t>(blockIdx.x);", block,
                     emit_expr(launch.min)));
    emit_stmt(launch.body);
    out_ += "}\n";
    return std::move(out_);
  }

 private:
  // A lambda, [&]() -> T { const T v = value; return body; }(): standard C++, where the CPU
  // back end uses GCC's statement expressions.
  std::string emit_let(const loop::Let& let) override {
    const std::string value = emit_expr(let.value);
    const std::string ident = bind_var(let.name);
    const std::string body = emit_expr(let.body);
    unbind_var();
    return fmt::format("[&]() -> {} {{ const {} {} = {}; return {}; }}()",
                       value_type(let.body.type()), value_type(let.value.type()), ident, value,
                       body);
  }

  // In a thread:   [&]() -> T { begin, end; if (end <= begin) return identity;
  //                             T acc = start; for (v = begin; v < end; ++v) acc = acc op body;
  //                             return acc; }()
  // By the block:  each thread folds v = begin + threadIdx.x, ... (stride blockDim.x), then
  //                kiln_block_reduce combines the threads' results; every thread calls it,
  //                the empty range included, and gets the total.
  std::string emit_reduce(const loop::Reduce& r) override {
    const bool by_block = r.vectorized && !in_thread_;
    const std::string min = emit_expr(r.min), extent = emit_expr(r.extent);
    const std::string acc = fresh_name('r');
    const std::string v = bind_var(r.var);
    const std::string body = emit_expr(r.body);
    unbind_var();
    const DType type = r.type;
    const std::string_view t = value_type(type);
    const std::string identity = scalar_constant(loop::reduce_identity(r.op, type), type);
    const std::string start = r.op == loop::ReduceOp::sum && is_floating(type)
                                  ? float_constant(-0.0, type)
                                  : identity;
    const loop::BinaryOp op = loop::reduce_combiner(r.op);
    const std::string update = binary(op, type, acc, body);
    if (!by_block) {
      return fmt::format(
          "[&]() -> {t} {{ const int64_t {v}_begin = {min}, {v}_end = {v}_begin + {extent}; "
          "if ({v}_end <= {v}_begin) return {identity}; {t} {acc} = {start}; "
          "for (int64_t {v} = {v}_begin; {v} < {v}_end; ++{v}) {acc} = {update}; "
          "return {acc}; }}()",
          fmt::arg("t", t), fmt::arg("v", v), fmt::arg("min", min), fmt::arg("extent", extent),
          fmt::arg("identity", identity), fmt::arg("acc", acc), fmt::arg("start", start),
          fmt::arg("update", update));
    }
    return fmt::format(
        "[&]() -> {t} {{ const int64_t {v}_begin = {min}, {v}_end = {v}_begin + {extent}; "
        "{t} {acc} = {start}; "
        "for (int64_t {v} = {v}_begin + threadIdx.x; {v} < {v}_end; {v} += blockDim.x) "
        "{acc} = {update}; "
        "{acc} = kiln_block_reduce({acc}, []({t} x, {t} y) {{ return {combine}; }}); "
        "return {v}_end <= {v}_begin ? {identity} : {acc}; }}()",
        fmt::arg("t", t), fmt::arg("v", v), fmt::arg("min", min), fmt::arg("extent", extent),
        fmt::arg("identity", identity), fmt::arg("acc", acc), fmt::arg("start", start),
        fmt::arg("update", update), fmt::arg("combine", binary(op, type, "x", "y")));
  }

  // --- Statements -------------------------------------------------------------------------

  void emit_stmt(const Stmt& s) override {
    if (emit_structured(s)) return;
    switch (s.kind()) {
      case loop::StmtKind::for_loop: emit_for(*s.as<loop::For>()); return;
      case loop::StmtKind::store: emit_store(*s.as<loop::Store>()); return;
      case loop::StmtKind::allocate: emit_allocate(*s.as<loop::Allocate>()); return;
      default: break;  // gemm: the verifier keeps gemms out of GPU loops
    }
    KILN_UNREACHABLE("a {} statement inside a GPU launch", static_cast<int>(s.kind()));
  }

  // In a thread, a plain store. At block level every thread computes the index and value
  // (a block reduction needs them all), thread 0 stores, and the block waits for it.
  void emit_store(const loop::Store& st) {
    if (st.atomic) {
      // f32 and f64 (the verifier's rule): atomicAdd has both. Outside a thread loop every
      // thread computes the addend (it may be a block reduction) and one adds it.
      if (in_thread_) {
        line(fmt::format("atomicAdd(&{}, {});", element(st.buffer, st.index),
                         emit_expr(loop::atomic_addend(st))));
        return;
      }
      const std::string addend = fresh_name('s');
      line("{");
      ++indent_;
      line(fmt::format("const {} {} = {};", value_type(st.buffer.dtype()), addend,
                       emit_expr(loop::atomic_addend(st))));
      line(fmt::format("if (threadIdx.x == 0) atomicAdd(&{}, {});", element(st.buffer, st.index),
                       addend));
      --indent_;
      line("}");
      line("__syncthreads();");
      return;
    }
    if (in_thread_) {
      line(fmt::format("{} = {};", element(st.buffer, st.index),
                       stored_value(st.buffer.dtype(), emit_expr(st.value))));
      return;
    }
    const std::string index = fresh_name('i'), value = fresh_name('s');
    line("{");
    ++indent_;
    line(fmt::format("const int64_t {} = {};", index, emit_expr(st.index)));
    line(fmt::format("const {} {} = {};", value_type(st.value.type()), value,
                     emit_expr(st.value)));
    line(fmt::format("if (threadIdx.x == 0) {}[{}] = {};", lookup(buffers_, st.buffer.name()),
                     index, stored_value(st.buffer.dtype(), value)));
    --indent_;
    line("}");
    line("__syncthreads();");
  }

  void emit_for(const loop::For& f) {
    const std::string min = emit_expr(f.min), extent = emit_expr(f.extent);
    const std::string bounds = fresh_name('n');
    line("{");
    ++indent_;
    line(fmt::format("const int64_t {0}_begin = {1}, {0}_end = {0}_begin + {2};", bounds, min,
                     extent));
    const std::string v = bind_var(f.var);
    const bool spread = f.for_kind == loop::ForKind::gpu_thread;
    if (spread) {
      line(fmt::format("for (int64_t {0} = {1}_begin + threadIdx.x; {0} < {1}_end; {0} += "
                       "blockDim.x) {{",
                       v, bounds));
    } else {
      line(fmt::format("for (int64_t {0} = {1}_begin; {0} < {1}_end; ++{0}) {{", v, bounds));
    }
    const bool outer = in_thread_;
    in_thread_ = outer || spread;
    emit_nested(f.body);
    in_thread_ = outer;
    line("}");
    unbind_var();
    --indent_;
    line("}");
    if (spread) line("__syncthreads();");
  }

  void emit_allocate(const loop::Allocate& a) {
    const loop::Buffer& buffer = a.buffer;
    const std::string ident = fresh_name('t');
    line("{");
    ++indent_;
    line(fmt::format("{}{} {}[{}];", in_thread_ ? "" : "__shared__ ",
                     storage_type(buffer.dtype()), ident, std::max<int64_t>(buffer.flat_size(), 1)));
    buffers_.emplace_back(buffer.name(), ident);
    emit_stmt(a.body);
    buffers_.pop_back();
    --indent_;
    line("}");
  }

  const loop::Kernel& kernel_;
  std::span<const std::pair<std::string, int64_t>> host_;
  bool in_thread_ = false;
};

class UnitEmitter {
 public:
  explicit UnitEmitter(const CudaEmitOptions& options) : options_(options) {}

  Status add_kernel(const loop::Kernel& kernel) {
    std::vector<runtime::CudaLaunch> launches;
    for (const Stmt& launch : loop::flatten_blocks(kernel.body)) {
      KILN_ASSIGN_OR_RETURN(runtime::CudaLaunch made, emit_launch(kernel, launch));
      if (!launches.empty() && extend_batch(launches.back(), made)) continue;
      launches.push_back(std::move(made));
    }
    unit_.launches.push_back(std::move(launches));
    return Status::ok();
  }

  CudaUnit finish() && { return std::move(unit_); }

 private:
  static Expected<int> param_index(const loop::Kernel& kernel, const loop::Buffer& buffer) {
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      if (kernel.params[i].name() == buffer.name()) return static_cast<int>(i);
    }
    return Status::errorf("a gemm on GPU reads '{}', which is not a parameter", buffer.name());
  }

  static Expected<int64_t> constant(const Expr& e, std::string_view what) {
    const std::optional<int64_t> value = loop::as_const_int(e);
    if (!value) return Status::errorf("a GPU launch's {} is not a constant", what);
    return *value;
  }

  Expected<runtime::CudaLaunch> emit_launch(const loop::Kernel& kernel, const Stmt& launch) {
    if (const auto* call = launch.as<loop::LibraryCall>()) {
      // The target has no GPU library for any other call (target/target.h: library_for).
      if (call->op != loop::LibraryOp::gemm) {
        return Status::errorf(ErrorCode::internal,
                              "internal compiler error: a {} call reached the CUDA emitter",
                              loop::library_op_name(call->op));
      }
      return emit_gemm(kernel, *call);
    }
    std::vector<std::pair<std::string, int64_t>> host;
    Stmt inner = launch;
    while (const auto* let = inner.as<loop::LetStmt>()) {
      KILN_ASSIGN_OR_RETURN(int64_t value, constant(let->value, "host value"));
      host.emplace_back(let->name, value);
      inner = let->body;
    }
    const auto* f = inner.as<loop::For>();
    if (f == nullptr || f->for_kind != loop::ForKind::gpu_block) {
      return Status::errorf("a GPU kernel's launch is not a gpu_block loop: {}", loop::print(inner));
    }
    KILN_ASSIGN_OR_RETURN(int64_t blocks, constant(f->extent, "grid"));
    if (blocks > kMaxGridX)
      return Status::errorf(ErrorCode::unsupported, "a GPU launch of {} blocks", blocks);
    const std::string text = LaunchEmitter(kernel, host).emit(*f);
    auto [it, inserted] =
        function_of_.emplace(text, fmt::format("kiln_cuda_{}", function_of_.size()));
    if (inserted) {
      std::string function = text;
      function.replace(function.find("@SYMBOL@"), 8, it->second);
      unit_.source += '\n';
      unit_.source += function;
    }
    runtime::CudaLaunch made{.function = it->second,
                             .grid = {std::max<int64_t>(blocks, 1), 1, 1},
                             .block = {loop::kGpuThreadsPerBlock, 1, 1},
                             .args = {},
                             .gemm = std::nullopt};
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      made.args.push_back({.kind = runtime::CudaLaunchArg::Kind::buffer,
                           .param = static_cast<int>(i), .byte_offset = 0, .value = 0});
    }
    for (const auto& [name, value] : host) {
      made.args.push_back({.kind = runtime::CudaLaunchArg::Kind::i64, .param = 0,
                           .byte_offset = 0, .value = value});
    }
    // A launch with no blocks does nothing; CUDA refuses a grid of 0, so run one block of a
    // loop that is empty.
    if (blocks <= 0) {
      made.function = empty_function();
      made.args.clear();
    }
    return made;
  }

  std::string empty_function() {
    if (!has_empty_) {
      unit_.source += "\nextern \"C\" __global__ void kiln_cuda_empty() {}\n";
      has_empty_ = true;
    }
    return "kiln_cuda_empty";
  }

  // Whether `next`, a gemm, joined `batch`, the launch before it, as its next product: the
  // host loop around a batched matmul unrolls into one gemm per matrix, of the same sizes on
  // the same buffers, each operand a constant stride after the previous one's, which are one
  // strided-batch launch instead of one launch each. Only when C is apart from A and B (a
  // product then never reads another's result) and the results do not overlap.
  static bool extend_batch(runtime::CudaLaunch& batch, const runtime::CudaLaunch& next) {
    if (!batch.gemm || !next.gemm || batch.function != next.function) return false;
    runtime::CudaGemm& g = *batch.gemm;
    const runtime::CudaGemm& h = *next.gemm;
    const bool same_product = g.type == h.type && g.m == h.m && g.n == h.n && g.k == h.k &&
                              g.lda == h.lda && g.ldb == h.ldb && g.ldc == h.ldc &&
                              g.transpose_a == h.transpose_a && g.transpose_b == h.transpose_b &&
                              g.accumulate == h.accumulate && h.batch == 1;
    const int c_param = batch.args[2].param;
    if (!same_product || batch.args[0].param != next.args[0].param ||
        batch.args[1].param != next.args[1].param || c_param != next.args[2].param ||
        batch.args[0].param == c_param || batch.args[1].param == c_param ||
        g.batch >= kMaxGridY) {
      return false;
    }
    // The next product's operands must be the batch's strides after its last one's (the
    // second product sets the strides).
    const int64_t element = runtime::gemm_element_bytes(g.type);
    const int64_t known[3] = {g.stride_a, g.stride_b, g.stride_c};
    int64_t strides[3];
    for (int operand = 0; operand < 3; ++operand) {
      const int64_t from_first =
          next.args[operand].byte_offset - batch.args[operand].byte_offset;
      if (from_first < 0 || from_first % (element * g.batch) != 0) return false;
      strides[operand] = from_first / (element * g.batch);
      if (g.batch > 1 && strides[operand] != known[operand]) return false;
    }
    if (strides[2] < (g.m - 1) * g.ldc + g.n) return false;  // results would overlap
    g.batch += 1;
    g.stride_a = strides[0];
    g.stride_b = strides[1];
    g.stride_c = strides[2];
    batch.grid[2] = g.batch;
    const size_t first_stride_arg = batch.args.size() - 3;
    batch.args[first_stride_arg].value = g.stride_a;
    batch.args[first_stride_arg + 1].value = g.stride_b;
    batch.args[first_stride_arg + 2].value = g.stride_c;
    return true;
  }

  Expected<runtime::CudaLaunch> emit_gemm(const loop::Kernel& kernel, const loop::LibraryCall& g) {
    const DType dtype = g.c().buffer.dtype();
    KILN_ASSIGN_OR_RETURN(int64_t m, constant(g.gemm().m, "gemm rows"));
    KILN_ASSIGN_OR_RETURN(int64_t n, constant(g.gemm().n, "gemm columns"));
    KILN_ASSIGN_OR_RETURN(int64_t k, constant(g.gemm().k, "gemm depth"));
    KILN_ASSIGN_OR_RETURN(const runtime::CudaGemm::Type type, gemm_type(dtype));
    const std::string function = fmt::format("kiln_gemm_{}", runtime::gemm_type_name(type));
    runtime::CudaLaunch made{.function = function,
                             .grid = {(std::max<int64_t>(n, 1) + kGemmTile - 1) / kGemmTile,
                                      (std::max<int64_t>(m, 1) + kGemmTile - 1) / kGemmTile, 1},
                             .block = {kGemmTile, kGemmTile, 1},
                             .args = {},
                             .gemm = std::nullopt};
    if (made.grid[0] > kMaxGridX || made.grid[1] > kMaxGridY) {
      return Status::errorf(ErrorCode::unsupported,
                            "a gemm of {} x {} is beyond the GPU template's grid", m, n);
    }
    for (const loop::MatrixRegion* region : {&g.a(), &g.b(), &g.c()}) {
      KILN_ASSIGN_OR_RETURN(int param, param_index(kernel, region->buffer));
      KILN_ASSIGN_OR_RETURN(int64_t offset, constant(region->offset, "gemm offset"));
      made.args.push_back({.kind = runtime::CudaLaunchArg::Kind::buffer, .param = param,
                           .byte_offset = offset * dtype_size_bytes(dtype), .value = 0});
    }
    for (const int64_t value : {m, n, k, g.a().leading_dim, g.b().leading_dim, g.c().leading_dim,
                                int64_t{g.gemm().transpose_a}, int64_t{g.gemm().transpose_b},
                                int64_t{g.gemm().accumulate}, int64_t{0}, int64_t{0}, int64_t{0}}) {
      made.args.push_back({.kind = runtime::CudaLaunchArg::Kind::i64, .param = 0,
                           .byte_offset = 0, .value = value});
    }
    if (m <= 0 || n <= 0) {
      made.function = empty_function();
      made.args.clear();
      return made;
    }
    made.gemm = runtime::CudaGemm{
        .type = type,
        .m = m,
        .n = n,
        .k = k,
        .lda = g.a().leading_dim,
        .ldb = g.b().leading_dim,
        .ldc = g.c().leading_dim,
        .transpose_a = g.gemm().transpose_a,
        .transpose_b = g.gemm().transpose_b,
        .accumulate = g.gemm().accumulate,
        .tf32 = options_.tf32 && type == runtime::CudaGemm::Type::f32};
    return made;
  }

  CudaEmitOptions options_;
  CudaUnit unit_{std::string(cuda_prelude()), {}};
  std::map<std::string, std::string> function_of_;  // function text -> its symbol
  bool has_empty_ = false;
};

}  // namespace

Expected<CudaUnit> emit_cuda_unit(std::span<const loop::Kernel> kernels,
                                  const CudaEmitOptions& options) {
  UnitEmitter emitter(options);
  for (size_t i = 0; i < kernels.size(); ++i) {
    Status verified = loop::verify(kernels[i]);
    if (!verified) return verified.with_context(fmt::format("kernel {} of the unit", i));
    Status emitted = emitter.add_kernel(kernels[i]);
    if (!emitted) return emitted.with_context(fmt::format("kernel {} of the unit", i));
  }
  return std::move(emitter).finish();
}

}  // namespace kiln::codegen::cuda
