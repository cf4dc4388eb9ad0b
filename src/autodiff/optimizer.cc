#include "autodiff/optimizer.h"

namespace kiln {

Optimizer Optimizer::sgd(double momentum, double weight_decay) {
  return {.kind = OptimizerKind::sgd, .momentum = momentum, .weight_decay = weight_decay};
}

Optimizer Optimizer::adam(double weight_decay) {
  return {.kind = OptimizerKind::adam, .weight_decay = weight_decay};
}

Optimizer Optimizer::adamw(double weight_decay) {
  return {.kind = OptimizerKind::adamw, .weight_decay = weight_decay};
}

std::string_view optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::sgd:
      return "sgd";
    case OptimizerKind::adam:
      return "adam";
    case OptimizerKind::adamw:
      return "adamw";
  }
  return "?";
}

Status Optimizer::validate() const {
  const auto in_unit_interval = [](double x) { return x >= 0 && x < 1; };
  if (kind == OptimizerKind::sgd && !in_unit_interval(momentum)) {
    return Status::errorf("{}: momentum must be in [0, 1), got {}", optimizer_name(kind), momentum);
  }
  if (kind != OptimizerKind::sgd) {
    if (!in_unit_interval(beta1) || !in_unit_interval(beta2)) {
      return Status::errorf("{}: betas must be in [0, 1), got {} and {}", optimizer_name(kind),
                            beta1, beta2);
    }
    if (!(epsilon > 0)) {
      return Status::errorf("{}: epsilon must be positive, got {}", optimizer_name(kind), epsilon);
    }
  }
  if (!(weight_decay >= 0)) {
    return Status::errorf("{}: weight decay must be >= 0, got {}", optimizer_name(kind),
                          weight_decay);
  }
  return Status::ok();
}

std::vector<std::string> Optimizer::state_names() const {
  if (kind == OptimizerKind::sgd) {
    return momentum == 0 ? std::vector<std::string>{} : std::vector<std::string>{"momentum"};
  }
  return {"m", "v"};
}

namespace {

ParameterUpdate sgd_update(GraphBuilder &b, const Optimizer &opt, const OptimizerScalars &scalars,
                           Value *p, Value *g, std::span<Value *const> state) {
  if (opt.weight_decay != 0) g = b.add(g, b.mul_scalar(p, opt.weight_decay));
  if (opt.momentum == 0) return {b.sub(p, b.mul(scalars.learning_rate, g)), {}};
  Value *buffer = b.add(b.mul_scalar(state[0], opt.momentum), g);
  return {b.sub(p, b.mul(scalars.learning_rate, buffer)), {buffer}};
}

ParameterUpdate adam_update(GraphBuilder &b, const Optimizer &opt, const OptimizerScalars &scalars,
                            Value *p, Value *g, std::span<Value *const> state) {
  const DType dtype = p->dtype();
  if (opt.kind == OptimizerKind::adamw && opt.weight_decay != 0) {
    // p * (1 - lr * wd), as p - (lr * wd) * p.
    p = b.sub(p, b.mul(b.mul_scalar(scalars.learning_rate, opt.weight_decay), p));
  } else if (opt.weight_decay != 0) {
    g = b.add(g, b.mul_scalar(p, opt.weight_decay));
  }
  Value *m = b.add(b.mul_scalar(state[0], opt.beta1), b.mul_scalar(g, 1 - opt.beta1));
  Value *v = b.add(b.mul_scalar(state[1], opt.beta2), b.mul_scalar(b.mul(g, g), 1 - opt.beta2));
  // Bias corrections 1 - beta^t, computed once per step on scalars.
  Value *correction1 = b.sub(b.scalar(1, dtype), b.pow(b.scalar(opt.beta1, dtype), scalars.step));
  Value *correction2 = b.sub(b.scalar(1, dtype), b.pow(b.scalar(opt.beta2, dtype), scalars.step));
  Value *m_hat = b.div(m, correction1);
  Value *v_hat = b.div(v, correction2);
  Value *direction = b.div(m_hat, b.add_scalar(b.sqrt(v_hat), opt.epsilon));
  return {b.sub(p, b.mul(scalars.learning_rate, direction)), {m, v}};
}

}  // namespace

ParameterUpdate update_parameter(GraphBuilder &b, const Optimizer &optimizer,
                                 const OptimizerScalars &scalars, Value *parameter, Value *grad,
                                 std::span<Value *const> state) {
  if (optimizer.kind == OptimizerKind::sgd) {
    return sgd_update(b, optimizer, scalars, parameter, grad, state);
  }
  return adam_update(b, optimizer, scalars, parameter, grad, state);
}

}  // namespace kiln
