#include "loop/scratch.h"

#include <map>
#include <string>

#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "loop/substitute.h"
#include "loop/verifier.h"
#include "support/check.h"

namespace kiln::loop {
namespace {

// Which loops keep the allocations inside them local: parallel loops on a CPU (one copy per
// thread), and on a GPU every loop without a gemm (such a loop runs inside one launch).
enum class LocalLoops : uint8_t { parallel, gemm_free };

class ScratchPromoter : public IRMutator {
 public:
  ScratchPromoter(int64_t min_bytes, LocalLoops local_loops)
      : min_bytes_(min_bytes), local_loops_(local_loops) {}

  std::vector<Buffer> promoted;

 protected:
  Stmt visit_for(const For& node, const Stmt& self) override {
    const bool outer = in_parallel_;
    in_parallel_ = outer || (local_loops_ == LocalLoops::parallel
                                 ? node.for_kind == ForKind::parallel
                                 : !contains_gemm(node.body));
    Stmt result = IRMutator::visit_for(node, self);
    in_parallel_ = outer;
    return result;
  }

  Stmt visit_allocate(const Allocate& node, const Stmt& self) override {
    const Buffer& local = node.buffer;
    if (in_parallel_ || local.flat_size() * dtype_size_bytes(local.dtype()) < min_bytes_) {
      return IRMutator::visit_allocate(node, self);
    }
    // A split's tail copies the loops inside it, allocations included: sibling copies of one
    // allocation (never live at once) share its parameter.
    auto it = replacement_.find(local.name());
    if (it == replacement_.end()) {
      const Buffer param = Buffer::param(local.name(), local.dtype(), {local.flat_size()});
      promoted.push_back(param);
      it = replacement_.emplace(local.name(), param).first;
    } else if (it->second.dtype() != local.dtype() || it->second.shape()[0] != local.flat_size()) {
      return IRMutator::visit_allocate(node, self);
    }
    return mutate(node.body);
  }

  Expr visit_load(const Load& node, const Expr& self) override {
    Expr index = mutate(node.index);
    const Buffer* buffer = replaced(node.buffer);
    if (buffer == nullptr) return index.same_as(node.index) ? self : load(node.buffer, index);
    return load(*buffer, std::move(index));
  }

  Stmt visit_store(const Store& node, const Stmt& self) override {
    Expr index = mutate(node.index), value = mutate(node.value);
    const Buffer* buffer = replaced(node.buffer);
    if (buffer == nullptr) {
      if (index.same_as(node.index) && value.same_as(node.value)) return self;
      return store(node.buffer, std::move(index), std::move(value));
    }
    return store(*buffer, std::move(index), std::move(value));
  }

  // A gemm's regions, or a conv's operands and bias, moved to the scratch buffers.
  Stmt visit_library_call(const LibraryCall& node, const Stmt& self) override {
    const Stmt mutated = IRMutator::visit_library_call(node, self);
    const LibraryCall& call = *mutated.as<LibraryCall>();
    return call.op == LibraryOp::gemm ? moved_gemm(call, mutated) : moved_conv(call, mutated);
  }

  Stmt moved_gemm(const LibraryCall& g, const Stmt& mutated) {
    const auto region = [&](const MatrixRegion& r) {
      const Buffer* buffer = replaced(r.buffer);
      return MatrixRegion{buffer != nullptr ? *buffer : r.buffer, r.offset, r.leading_dim};
    };
    if (replaced(g.a().buffer) == nullptr && replaced(g.b().buffer) == nullptr &&
        replaced(g.c().buffer) == nullptr) {
      return mutated;
    }
    GemmArgs args = gemm_args(g);
    args.a = region(g.a());
    args.b = region(g.b());
    args.c = region(g.c());
    return gemm(std::move(args));
  }

  Stmt moved_conv(const LibraryCall& c, const Stmt& mutated) {
    if (replaced(c.x().buffer) == nullptr && replaced(c.w().buffer) == nullptr &&
        replaced(c.y().buffer) == nullptr &&
        (!c.bias().defined() || replaced(c.bias()) == nullptr)) {
      return mutated;
    }
    const auto moved = [&](const Buffer& b) {
      const Buffer* buffer = replaced(b);
      return buffer != nullptr ? *buffer : b;
    };
    ConvArgs args = conv_args(c);
    args.x = moved(c.x().buffer);
    args.w = moved(c.w().buffer);
    args.y = moved(c.y().buffer);
    if (c.bias().defined()) args.bias = moved(c.bias());
    return conv(std::move(args));
  }

 private:
  // Buffer names are unique in a kernel (the verifier forbids shadowing), so a name
  // identifies the allocation.
  const Buffer* replaced(const Buffer& buffer) const {
    if (buffer.scope() == MemoryScope::global) return nullptr;
    auto it = replacement_.find(buffer.name());
    return it == replacement_.end() ? nullptr : &it->second;
  }

  int64_t min_bytes_;
  LocalLoops local_loops_;
  bool in_parallel_ = false;
  std::map<std::string, Buffer> replacement_;
};

Kernel promote_with(ScratchPromoter promoter, const Kernel& kernel,
                    std::vector<int64_t>& scratch) {
  Kernel result{kernel.name, kernel.params, promoter.mutate(kernel.body)};
  for (const Buffer& buffer : promoter.promoted) {
    result.params.push_back(buffer);
    scratch.push_back(buffer.flat_size() * dtype_size_bytes(buffer.dtype()));
  }
  const Status verified = verify(result);
  KILN_CHECK(verified.is_ok(), "promoting scratch buffers broke the kernel: {}\n{}",
             verified.message(), print(result));
  return result;
}

}  // namespace

Kernel promote_scratch(const Kernel& kernel, std::vector<int64_t>& scratch) {
  return promote_with(ScratchPromoter(kMaxKernelLocalBytes + 1, LocalLoops::parallel), kernel,
                      scratch);
}

Kernel promote_gpu_scratch(const Kernel& kernel, std::vector<int64_t>& scratch) {
  return promote_with(ScratchPromoter(0, LocalLoops::gemm_free), kernel, scratch);
}

int64_t scratch_bytes(const Kernel& kernel) {
  // Only the sizes: the partitioner asks this of every candidate group it lowers, so the
  // promoted kernel is neither built into a Kernel nor verified.
  ScratchPromoter promoter(kMaxKernelLocalBytes + 1, LocalLoops::parallel);
  promoter.mutate(kernel.body);
  int64_t total = 0;
  for (const Buffer& buffer : promoter.promoted) {
    total += buffer.flat_size() * dtype_size_bytes(buffer.dtype());
  }
  return total;
}

}  // namespace kiln::loop
