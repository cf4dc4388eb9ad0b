#include "loop/evaluator.h"

#include <cmath>
#include <type_traits>

#include <fmt/format.h>

#include "loop/printer.h"
#include "loop/verifier.h"

namespace kiln::loop {
namespace {

class Evaluator {
 public:
  explicit Evaluator(EvalEnvironment env) : env_(std::move(env)) {}

  Expected<Scalar> eval(const Expr& e) {
    switch (e.kind()) {
      case ExprKind::int_imm:
      case ExprKind::float_imm: return const_value(e);
      case ExprKind::variable: {
        const std::string& name = e.as<Variable>()->name;
        auto it = env_.vars.find(name);
        if (it == env_.vars.end()) return Status::errorf("variable '{}' has no value", name);
        return it->second;
      }
      case ExprKind::binary: {
        const Binary& b = *e.as<Binary>();
        KILN_ASSIGN_OR_RETURN(Scalar x, eval(b.a));
        KILN_ASSIGN_OR_RETURN(Scalar y, eval(b.b));
        return apply_binary(b.op, b.a.type(), x, y);
      }
      case ExprKind::logical_not: {
        KILN_ASSIGN_OR_RETURN(Scalar x, eval(e.as<Not>()->a));
        return apply_not(x);
      }
      case ExprKind::select: {
        const Select& s = *e.as<Select>();
        KILN_ASSIGN_OR_RETURN(Scalar c, eval(s.condition));
        KILN_ASSIGN_OR_RETURN(Scalar t, eval(s.true_value));
        KILN_ASSIGN_OR_RETURN(Scalar f, eval(s.false_value));
        return is_true(c) ? t : f;
      }
      case ExprKind::cast: {
        const Cast& c = *e.as<Cast>();
        KILN_ASSIGN_OR_RETURN(Scalar x, eval(c.value));
        return apply_cast(e.type(), c.value.type(), x);
      }
      case ExprKind::load: return eval_load(*e.as<Load>());
      case ExprKind::call: {
        const Call& c = *e.as<Call>();
        std::vector<Scalar> args;
        for (const Expr& arg : c.args) {
          KILN_ASSIGN_OR_RETURN(Scalar x, eval(arg));
          args.push_back(x);
        }
        return apply_intrinsic(c.intrinsic, e.type(), args);
      }
      case ExprKind::let: {
        const Let& l = *e.as<Let>();
        KILN_ASSIGN_OR_RETURN(Scalar value, eval(l.value));
        return with_var(l.name, value, [&] { return eval(l.body); });
      }
      case ExprKind::reduce: return eval_reduce(*e.as<Reduce>());
    }
    KILN_UNREACHABLE("bad expression kind {}", static_cast<int>(e.kind()));
  }

  Status exec(const Stmt& s) {
    switch (s.kind()) {
      case StmtKind::for_loop: return exec_for(*s.as<For>());
      case StmtKind::store: return exec_store(*s.as<Store>());
      case StmtKind::let_stmt: {
        const LetStmt& l = *s.as<LetStmt>();
        KILN_ASSIGN_OR_RETURN(Scalar value, eval(l.value));
        return with_var(l.name, value, [&] { return exec(l.body); });
      }
      case StmtKind::allocate: {
        const Allocate& a = *s.as<Allocate>();
        // Uninitialised memory reads as NaN (floats) so that a kernel that reads before it
        // writes fails its comparison instead of passing by luck.
        const double fill = is_floating(a.buffer.dtype()) ? std::nan("") : 0.0;
        std::vector<double> storage(static_cast<size_t>(a.buffer.flat_size()), fill);
        env_.buffers[a.buffer.name()] = &storage;
        Status status = exec(a.body);
        env_.buffers.erase(a.buffer.name());
        return status;
      }
      case StmtKind::if_then_else: {
        const IfThenElse& i = *s.as<IfThenElse>();
        KILN_ASSIGN_OR_RETURN(Scalar c, eval(i.condition));
        if (is_true(c)) return exec(i.then_case);
        return i.else_case.defined() ? exec(i.else_case) : Status::ok();
      }
      case StmtKind::block:
        for (const Stmt& child : s.as<Block>()->stmts) KILN_RETURN_IF_ERROR(exec(child));
        return Status::ok();
      case StmtKind::library_call:
        return exec_library_call(*s.as<LibraryCall>());
    }
    KILN_UNREACHABLE("bad statement kind {}", static_cast<int>(s.kind()));
  }

 private:
  template <typename Fn>
  std::invoke_result_t<Fn> with_var(const std::string& name, const Scalar& value, Fn&& fn) {
    std::optional<Scalar> saved;
    if (auto it = env_.vars.find(name); it != env_.vars.end()) saved = it->second;
    env_.vars[name] = value;
    auto result = fn();
    if (saved) {
      env_.vars[name] = *saved;
    } else {
      env_.vars.erase(name);
    }
    return result;
  }

  // The element an index addresses, or an error naming the access.
  Expected<double*> element(const Buffer& buffer, const Expr& index_expr, std::string_view what) {
    KILN_ASSIGN_OR_RETURN(Scalar index_value, eval(index_expr));
    auto it = env_.buffers.find(buffer.name());
    if (it == env_.buffers.end()) {
      return Status::errorf("buffer '{}' has no storage", buffer.name());
    }
    std::vector<double>& data = *it->second;
    const int64_t index = std::get<int64_t>(index_value);
    if (index < 0 || index >= static_cast<int64_t>(data.size())) {
      return Status::errorf("{} {}[{}] is out of bounds: index {}, size {}", what, buffer.name(),
                            print(index_expr), index, data.size());
    }
    return &data[static_cast<size_t>(index)];
  }

  Expected<Scalar> eval_load(const Load& l) {
    KILN_ASSIGN_OR_RETURN(double* slot, element(l.buffer, l.index, "load"));
    const double value = round_to_dtype(*slot, l.type);
    return is_floating(l.type) ? Scalar(value) : Scalar(static_cast<int64_t>(value));
  }

  Expected<Scalar> eval_reduce(const Reduce& r) {
    KILN_ASSIGN_OR_RETURN(Scalar min_value, eval(r.min));
    KILN_ASSIGN_OR_RETURN(Scalar extent_value, eval(r.extent));
    const int64_t min = std::get<int64_t>(min_value), extent = std::get<int64_t>(extent_value);
    if (extent <= 0) return reduce_identity(r.op, r.type);
    std::optional<Scalar> acc;
    for (int64_t k = min; k < min + extent; ++k) {
      KILN_ASSIGN_OR_RETURN(Scalar x, with_var(r.var, k, [&] { return eval(r.body); }));
      acc = acc ? apply_binary(reduce_combiner(r.op), r.type, *acc, x) : x;
    }
    return *acc;
  }

  Status exec_for(const For& f) {
    KILN_ASSIGN_OR_RETURN(Scalar min_value, eval(f.min));
    KILN_ASSIGN_OR_RETURN(Scalar extent_value, eval(f.extent));
    const int64_t min = std::get<int64_t>(min_value), extent = std::get<int64_t>(extent_value);
    for (int64_t i = min; i < min + extent; ++i) {
      KILN_RETURN_IF_ERROR(with_var(f.var, i, [&] { return exec(f.body); }));
    }
    return Status::ok();
  }

  Status exec_store(const Store& s) {
    KILN_ASSIGN_OR_RETURN(Scalar value, eval(s.value));
    KILN_ASSIGN_OR_RETURN(double* slot, element(s.buffer, s.index, "store to"));
    *slot = is_floating(s.value.type()) ? std::get<double>(value)
                                        : static_cast<double>(std::get<int64_t>(value));
    return Status::ok();
  }

  // A gemm operand's storage and base offset, evaluated once.
  struct Region {
    std::vector<double>* data;
    int64_t offset;
    int64_t ld;
    const Buffer* buffer;
  };

  Expected<Region> region(const MatrixRegion& r) {
    KILN_ASSIGN_OR_RETURN(Scalar offset, eval(r.offset));
    auto it = env_.buffers.find(r.buffer.name());
    if (it == env_.buffers.end()) {
      return Status::errorf("buffer '{}' has no storage", r.buffer.name());
    }
    return Region{it->second, std::get<int64_t>(offset), r.leading_dim, &r.buffer};
  }

  static Expected<double*> at(const Region& r, int64_t row, int64_t col) {
    const int64_t index = r.offset + row * r.ld + col;
    if (index < 0 || index >= static_cast<int64_t>(r.data->size())) {
      return Status::errorf("gemm element {}[{}] is out of bounds: size {}", r.buffer->name(),
                            index, r.data->size());
    }
    return &(*r.data)[static_cast<size_t>(index)];
  }

  // The plain triple loop: each C element's sum runs over p in increasing order starting from
  // the first product (0 when k <= 0), then is added to C when accumulating; every operation
  // rounds to the dtype.
  // One reference semantics per library operation (loop/stmt.h).
  Status exec_library_call(const LibraryCall& call) {
    if (call.op == LibraryOp::gemm) return exec_gemm(call);
    return exec_conv(call);
  }

  Status exec_gemm(const LibraryCall& g) {
    KILN_ASSIGN_OR_RETURN(Region a, region(g.a()));
    KILN_ASSIGN_OR_RETURN(Region b, region(g.b()));
    KILN_ASSIGN_OR_RETURN(Region c, region(g.c()));
    KILN_ASSIGN_OR_RETURN(Scalar m_value, eval(g.gemm().m));
    KILN_ASSIGN_OR_RETURN(Scalar n_value, eval(g.gemm().n));
    KILN_ASSIGN_OR_RETURN(Scalar k_value, eval(g.gemm().k));
    const int64_t m = std::get<int64_t>(m_value), n = std::get<int64_t>(n_value),
                  k = std::get<int64_t>(k_value);
    const LibraryDTypes& dtypes = g.dtypes;
    const DType dtype = dtypes.accumulate;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        Scalar acc = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          KILN_ASSIGN_OR_RETURN(double* x, g.gemm().transpose_a ? at(a, p, i) : at(a, i, p));
          KILN_ASSIGN_OR_RETURN(double* y, g.gemm().transpose_b ? at(b, j, p) : at(b, p, j));
          const Scalar product = apply_binary(BinaryOp::mul, dtype, round_to_dtype(*x, dtypes.a),
                                              round_to_dtype(*y, dtypes.b));
          acc = p == 0 ? product : apply_binary(BinaryOp::add, dtype, acc, product);
        }
        KILN_ASSIGN_OR_RETURN(double* out, at(c, i, j));
        if (g.gemm().accumulate) {
          acc = apply_binary(BinaryOp::add, dtype, round_to_dtype(*out, dtype), acc);
        }
        *out = round_to_dtype(std::get<double>(acc), dtypes.out);
      }
    }
    return Status::ok();
  }

  // The sum of loop/stmt.h's definition, over channels and then taps in increasing order, then
  // the bias and the relu, every operation rounded to the accumulation dtype (f32) and the
  // result to y's.
  Status exec_conv(const LibraryCall& c) {
    const ConvGeometry& geo = c.conv();
    KILN_ASSIGN_OR_RETURN(std::vector<double> * x, storage(c.x().buffer));
    KILN_ASSIGN_OR_RETURN(std::vector<double> * w, storage(c.w().buffer));
    KILN_ASSIGN_OR_RETURN(std::vector<double> * y, storage(c.y().buffer));
    std::vector<double>* bias = nullptr;
    if (c.bias().defined()) {
      KILN_ASSIGN_OR_RETURN(bias, storage(c.bias()));
      if (static_cast<int64_t>(bias->size()) < geo.out_channels) {
        return Status::errorf("conv's bias '{}' has fewer than {} elements", c.bias().name(),
                              geo.out_channels);
      }
    }
    KILN_ASSIGN_OR_RETURN(Scalar x_at, eval(c.x().offset));
    KILN_ASSIGN_OR_RETURN(Scalar y_at, eval(c.y().offset));
    const int64_t x_base = std::get<int64_t>(x_at), y_base = std::get<int64_t>(y_at);
    if (x_base < 0 || x_base + geo.x_elements() > static_cast<int64_t>(x->size()) || y_base < 0 ||
        y_base + geo.y_elements() > static_cast<int64_t>(y->size()) ||
        geo.w_elements() > static_cast<int64_t>(w->size())) {
      return Status::errorf("conv of '{}' into '{}' is out of bounds", c.x().buffer.name(),
                            c.y().buffer.name());
    }
    const int spatial = geo.spatial();
    const int64_t cg = geo.channels / geo.groups, og = geo.out_channels / geo.groups;
    int64_t in_positions = 1, out_positions = 1, taps = 1;
    for (int d = 0; d < spatial; ++d) {
      in_positions *= geo.in_spatial[static_cast<size_t>(d)];
      out_positions *= geo.out_spatial[static_cast<size_t>(d)];
      taps *= geo.kernel[static_cast<size_t>(d)];
    }
    const DType dtype = c.dtypes.accumulate;
    std::vector<int64_t> position(static_cast<size_t>(spatial)), tap(position.size());
    for (int64_t n = 0; n < geo.images; ++n) {
      for (int64_t p = 0; p < out_positions; ++p) {
        unravel(p, geo.out_spatial, position);
        for (int64_t o = 0; o < geo.out_channels; ++o) {
          const int64_t g = o / og;
          Scalar acc = 0.0;
          for (int64_t ch = 0; ch < cg; ++ch) {
            for (int64_t t = 0; t < taps; ++t) {
              unravel(t, geo.kernel, tap);
              int64_t x_position = 0;
              bool inside = true;
              for (int d = 0; d < spatial; ++d) {
                const auto i = static_cast<size_t>(d);
                const int64_t at =
                    position[i] * geo.strides[i] - geo.pads_begin[i] + tap[i] * geo.dilations[i];
                inside = inside && at >= 0 && at < geo.in_spatial[i];
                x_position = x_position * geo.in_spatial[i] + at;
              }
              if (!inside) continue;
              const double xv = (*x)[static_cast<size_t>(
                  x_base + (n * in_positions + x_position) * geo.channels + g * cg + ch)];
              const double wv = (*w)[static_cast<size_t>((o * cg + ch) * taps + t)];
              acc = apply_binary(BinaryOp::add, dtype, acc,
                                 apply_binary(BinaryOp::mul, dtype, round_to_dtype(xv, c.dtypes.a),
                                              round_to_dtype(wv, c.dtypes.b)));
            }
          }
          if (bias != nullptr) {
            acc = apply_binary(BinaryOp::add, dtype, acc,
                               round_to_dtype((*bias)[static_cast<size_t>(o)], dtype));
          }
          if (c.applies(EpilogueKind::relu) && !(std::get<double>(acc) > 0)) acc = 0.0;
          (*y)[static_cast<size_t>(y_base + (n * out_positions + p) * geo.out_channels + o)] =
              round_to_dtype(std::get<double>(acc), c.dtypes.out);
        }
      }
    }
    return Status::ok();
  }

  Expected<std::vector<double>*> storage(const Buffer& buffer) {
    auto it = env_.buffers.find(buffer.name());
    if (it == env_.buffers.end())
      return Status::errorf("buffer '{}' has no storage", buffer.name());
    return it->second;
  }

  // The row-major index of element `flat` of `dims`, into `index`.
  static void unravel(int64_t flat, const std::vector<int64_t>& dims, std::vector<int64_t>& index) {
    for (size_t d = dims.size(); d-- > 0;) {
      index[d] = flat % dims[d];
      flat /= dims[d];
    }
  }

  EvalEnvironment env_;
};

}  // namespace

Expected<Scalar> evaluate(const Expr& expr, const EvalEnvironment& env) {
  return Evaluator(env).eval(expr);
}

Status run_kernel(const Kernel& kernel, std::vector<std::vector<double>>& args) {
  KILN_RETURN_IF_ERROR(verify(kernel));
  if (args.size() != kernel.params.size()) {
    return Status::errorf("kernel '{}' takes {} buffers, given {}", kernel.name,
                          kernel.params.size(), args.size());
  }
  EvalEnvironment env;
  for (size_t i = 0; i < args.size(); ++i) {
    const Buffer& param = kernel.params[i];
    if (static_cast<int64_t>(args[i].size()) != param.flat_size()) {
      return Status::errorf("kernel '{}': buffer '{}' needs {} elements, given {}", kernel.name,
                            param.name(), param.flat_size(), args[i].size());
    }
    env.buffers[param.name()] = &args[i];
  }
  Status status = Evaluator(std::move(env)).exec(kernel.body);
  if (!status) return status.with_context(fmt::format("kernel '{}'", kernel.name));
  return Status::ok();
}

}  // namespace kiln::loop
