// Optimizers as graph ops: the parameter update of SGD with momentum, Adam and
// AdamW written with the builder, so that the update is ordinary elementwise
// Kiln ops the fusion partitioner can group (one kernel per parameter, or
// horizontally across parameters).
//
// The update follows PyTorch's torch.optim definitions exactly, so a Kiln step
// and a PyTorch step agree:
//   SGD:   g = grad + weight_decay * p;  buf = momentum * buf + g;  p = p - lr
//   * buf
//          (momentum 0: no buffer, p = p - lr * g)
//   Adam:  g = grad + weight_decay * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1
//   - b2) g^2;
//          p = p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//   AdamW: as Adam without the weight decay in g; instead p = p * (1 - lr *
//   weight_decay) first.
// Hyperparameters other than the learning rate are constants of the graph. The
// learning rate `lr` is a scalar graph input, so a schedule (warm-up, decay)
// needs no recompilation; Adam's step count `t` (1 for the first step) is one
// too. Optimizer state (the momentum buffer; Adam's m and v) enters as inputs
// and leaves, updated, as outputs; it starts at zeros.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/builder.h"
#include "support/status.h"

namespace kiln {

enum class OptimizerKind { sgd, adam, adamw };

struct Optimizer {
  OptimizerKind kind = OptimizerKind::sgd;
  double momentum = 0.9;  // SGD only; 0 is plain SGD
  double beta1 = 0.9;     // Adam, AdamW
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0;  // L2 for SGD and Adam, decoupled for AdamW

  static Optimizer sgd(double momentum = 0.9, double weight_decay = 0);
  static Optimizer adam(double weight_decay = 0);
  static Optimizer adamw(double weight_decay = 0.01);

  // Hyperparameters in range (momentum, betas in [0, 1), epsilon > 0, weight
  // decay >= 0).
  Status validate() const;
  // The state each parameter carries, by suffix: {"momentum"} (none for
  // momentum 0) or
  // {"m", "v"}.
  std::vector<std::string> state_names() const;
  bool needs_step_count() const { return kind != OptimizerKind::sgd; }
};

std::string_view optimizer_name(OptimizerKind kind);  // "sgd", "adam", "adamw"

// Scalars shared by every parameter's update (graph inputs of dtype f32 or the
// parameters').
struct OptimizerScalars {
  Value *learning_rate = nullptr;
  Value *step = nullptr;  // Adam and AdamW only
};

struct ParameterUpdate {
  Value *parameter = nullptr;
  std::vector<Value *> state;  // as Optimizer::state_names()
};

// Appends the update of one parameter given its gradient and state (as
// state_names()) to the builder's graph. The scalars must have the parameter's
// dtype.
ParameterUpdate update_parameter(GraphBuilder &b, const Optimizer &optimizer,
                                 const OptimizerScalars &scalars, Value *parameter, Value *grad,
                                 std::span<Value *const> state);

}  // namespace kiln
