"""Whole-step mode: forward, backward and the optimizer update compiled by Kiln as one graph.

    step = kiln.compile_train_step(model, F.cross_entropy, optimizer="adamw", lr=1e-3)
    for inputs, targets in batches:
        loss = step(inputs, targets)        # the parameters update in place

The step is traced once, from FakeTensors, as a pure function of the parameters, the
optimizer's state and the batch (torch.func.grad_and_value for the gradients, the update
written with tensor ops as torch.optim defines it), into one graph of Core ATen ops that Kiln
compiles whole, as it compiles its own zoo's training steps: the backward's last kernels and
the update can fuse. Each call runs it and puts the new parameters and state in place of the
old: written over the old tensors' memory where the compiled program allows it
(CompiledGraph.allow_in_place: each element read before it is written, as an elementwise
update does), else in new tensors that the Parameters take as .data. Nothing is copied.

What it needs: every op of the step must be one Kiln converts (else CompileError names the
ops; torch.compile(model, backend="kiln") runs such models, leaving those ops to PyTorch), and
the model must not update buffers in place (batch norm's running statistics): the step's
graph is pure.
"""

from __future__ import annotations

import math

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.overrides import TorchFunctionMode

from ._kiln import CompileError
from .backend import (PRECISIONS, KilnGraph, attention_kernels_for, conversion_error,
                      decompositions, graph_device)

aten = torch.ops.aten

OPTIMIZERS = ("sgd", "adamw")


class _DropoutAsNativeDropout(TorchFunctionMode):
    """F.dropout traced as aten.native_dropout, the op Kiln converts (as AOTAutograd leaves it):
    under torch.func it would become bernoulli_ and an in-place division."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.dropout:
            return _dropout(*args, **kwargs)
        return func(*args, **kwargs)


def _scaled_update(grads, params, state, scaler):
    """GradScaler's step on the unscaled gradients: where any is infinite or NaN, the
    parameters and state keep their values and the scale halves; after 2000 finite steps in a
    row it doubles. `params` and `state` are (old, updated) pairs. Also returns whether the
    gradients were finite (the update ran)."""
    scale, steps = scaler
    largest = None  # the largest magnitude of any gradient; NaN where one is (amax keeps NaN)
    for g in grads:
        magnitude = g.abs().amax(dim=tuple(range(g.dim())))
        largest = magnitude if largest is None else torch.maximum(largest, magnitude)
    finite = largest < float("inf")  # NaN compares false
    keep = lambda pair: [torch.where(finite, new, old) for old, new in zip(*pair)]
    zero = torch.full_like(steps, 0.0)
    counted = torch.where(finite, steps + 1, zero)
    grow = counted >= 2000
    scale = torch.where(finite, torch.where(grow, scale * 2, scale), scale * 0.5)
    return keep(params), keep(state), [scale, torch.where(grow, zero, counted)], finite


def _dropout(input, p=0.5, training=True, inplace=False):
    if not training or p == 0:
        return input
    return aten.native_dropout(input, p, True)[0]


class TrainStep:
    """A compiled training step; call it with a batch's inputs and targets for the loss."""

    def __init__(self, model, loss_fn, optimizer, lr, betas, eps, weight_decay, momentum,
                 precision="fp32"):
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer {optimizer!r}: Kiln's whole-step mode has {OPTIMIZERS}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r}: Kiln's precisions are {PRECISIONS}")
        self.precision = precision
        self.model = model
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.lr, self.betas, self.eps = lr, betas, eps
        self.weight_decay, self.momentum = weight_decay, momentum
        self.names = [name for name, p in model.named_parameters() if p.requires_grad]
        self.params = dict(model.named_parameters())
        self.buffers = dict(model.named_buffers())
        # Optimizer state per parameter: AdamW's two moments, SGD's momentum buffer.
        moments = 2 if optimizer == "adamw" else (1 if momentum else 0)
        self.state = [[torch.zeros_like(self.params[n]) for n in self.names]
                      for _ in range(moments)]
        self.steps = 0
        # fp16's dynamic loss scaling, as torch.amp.GradScaler (its defaults): the scale and the
        # finite steps since it last changed, updated by the step itself.
        device = self.params[self.names[0]].device
        self.scaler = ([torch.tensor(65536.0, device=device), torch.tensor(0.0, device=device)]
                       if precision == "fp16" else [])
        # With loss scaling, AdamW's step count t is the step's too, and so its bias corrections
        # 1 - beta^t (in f32, as the host gave them): a skipped step does not count, as
        # GradScaler's skipped optimizer.step() leaves Adam's count alone.
        self.adam_steps = ([torch.tensor(0.0, device=device)]
                           if self.scaler and optimizer == "adamw" else [])
        self.graph = None  # KilnGraph, made on the first call
        self.in_place = []  # (output, input) pairs the step updates in place

    def _update(self, params, grads, state, scalars):
        """The optimizer's update as torch.optim computes it: new parameters and state."""
        if self.optimizer == "sgd":
            if self.weight_decay:
                grads = [g + self.weight_decay * p for p, g in zip(params, grads)]
            new_state = []
            if self.momentum:
                new_state = [[b * self.momentum + g for b, g in zip(state[0], grads)]]
                grads = new_state[0]
            return [p - self.lr * g for p, g in zip(params, grads)], new_state
        beta1, beta2 = self.betas
        bias1, bias2 = scalars  # 1 - beta^t, given per step so the graph does not change
        m = [beta1 * m + (1 - beta1) * g for m, g in zip(state[0], grads)]
        v = [beta2 * v + (1 - beta2) * g * g for v, g in zip(state[1], grads)]
        new = [p * (1 - self.lr * self.weight_decay)
               - (self.lr / bias1) * mi / (vi.sqrt() / bias2.sqrt() + self.eps)
               for p, mi, vi in zip(params, m, v)]
        return new, [m, v]

    def _pure_step(self, *flat):
        count = len(self.names)
        params = list(flat[:count])
        state = [list(flat[count * (i + 1):count * (i + 2)]) for i in range(len(self.state))]
        rest = flat[count * (len(self.state) + 1):]
        scaler, rest = rest[:len(self.scaler)], rest[len(self.scaler):]
        adam_steps, rest = rest[:len(self.adam_steps)], rest[len(self.adam_steps):]
        scalars, (inputs, targets) = rest[:-2], rest[-2:]
        if adam_steps:
            taken = adam_steps[0] + 1
            scalars = [1 - torch.exp(taken * math.log(beta)) for beta in self.betas]

        def loss_of(trainable):
            merged = {**self.buffers, **dict(zip(self.names, trainable))}
            output = torch.func.functional_call(self.model, merged, (inputs,))
            loss = self.loss_fn(output, targets)
            return (loss * scaler[0] if scaler else loss), loss

        grads, loss = torch.func.grad(loss_of, has_aux=True)(params)
        if scaler:
            grads = [g / scaler[0] for g in grads]
        new_params, new_state = self._update(params, grads, state, scalars)
        new_state = [t for group in new_state for t in group]
        if scaler:
            new_params, new_state, scaler, finite = _scaled_update(
                grads, (params, new_params), ([t for g in state for t in g], new_state), scaler)
            adam_steps = [torch.where(finite, taken, adam_steps[0]) for _ in adam_steps]
        return (loss, *new_params, *new_state, *scaler, *adam_steps)

    def _scalars(self):
        if self.optimizer != "adamw" or self.adam_steps:
            return []
        beta1, beta2 = self.betas
        device = self.params[self.names[0]].device
        return [torch.tensor(1 - beta1 ** self.steps, device=device),
                torch.tensor(1 - beta2 ** self.steps, device=device)]

    def _flat_inputs(self, inputs, targets):
        return ([self.params[n].detach() for n in self.names]
                + [t for group in self.state for t in group]
                + self.scaler + self.adam_steps + self._scalars() + [inputs, targets])

    def _compile(self, flat):
        device = graph_device(flat)
        if device is None:
            raise CompileError(
                "the step's tensors (parameters, optimizer state, inputs and targets) must all "
                "be on the CPU or all on one GPU, and are on " + ", ".join(
                    sorted({str(t.device) for t in flat if isinstance(t, torch.Tensor)})))
        try:
            with _DropoutAsNativeDropout(), attention_kernels_for(device):
                gm = make_fx(self._pure_step, decomposition_table=decompositions(),
                             tracing_mode="fake")(*flat)
        except RuntimeError as e:
            if "in-place" not in str(e):
                raise
            raise CompileError(
                "the model updates a tensor it holds in place (as batch norm's running "
                "statistics), which a pure step graph cannot hold: train it with "
                "torch.compile(model, backend='kiln')") from e
        unsupported = {}
        for node in gm.graph.nodes:
            if node.op != "call_function" or node.target.__module__ == "_operator":
                continue
            error = conversion_error(node)
            if error:
                unsupported.setdefault(str(node.target), error)
        if unsupported:
            raise CompileError(
                "the training step has ops Kiln does not convert, so it cannot be one Kiln "
                "graph (torch.compile(model, backend='kiln') runs such models, leaving these to "
                "PyTorch): " + "; ".join(f"{op}: {why}" for op, why in unsupported.items()))
        graph = KilnGraph(gm, "train_step", device, self.precision)
        # The new parameters and optimizer state over the old (outputs 1.. of inputs 0..), where
        # the program allows it: the step then holds them once, as torch.optim's in-place
        # update does, not once more for the new values.
        updated = len(self.names) * (1 + len(self.state))
        self.in_place = graph.compiled.allow_in_place([(1 + k, k) for k in range(updated)])
        return graph

    def __call__(self, inputs, targets):
        self.steps += 1
        flat = self._flat_inputs(inputs, targets)
        if self.graph is None:
            self.graph = self._compile(flat)
        loss, *rest = self.graph.run(flat, self.in_place)
        count = len(self.names)
        for name, new in zip(self.names, rest[:count]):
            self.params[name].data = new
        for i, group in enumerate(self.state):
            group[:] = rest[count * (i + 1):count * (i + 2)]
        counters = rest[count * (len(self.state) + 1):]
        self.scaler = counters[:len(self.scaler)]
        self.adam_steps = counters[len(self.scaler):]
        return loss

    def explain(self) -> str:
        """The fused kernels of the step's graph (after the first call)."""
        return self.graph.explain() if self.graph is not None else "not compiled yet\n"


def compile_train_step(model: torch.nn.Module, loss_fn, optimizer: str = "adamw",
                       lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                       weight_decay: float = 0.0, momentum: float = 0.0,
                       precision: str = "fp32") -> TrainStep:
    """One training step of `model` (forward, `loss_fn(output, targets)`, backward and the
    `optimizer` update: "adamw" as torch.optim.AdamW with these arguments, or "sgd" as
    torch.optim.SGD) compiled by Kiln as one graph. Returns a callable of (inputs, targets)
    that runs a step, updates the parameters in place and returns the loss. With `precision`
    "bf16" or "fp16" the step computes in mixed precision (kiln.make_backend says how); the
    parameters and the optimizer state stay f32: master weights."""
    if any(b.requires_grad for b in model.buffers()):
        raise ValueError("buffers that require grad are not supported")
    return TrainStep(model, loss_fn, optimizer, lr, betas, eps, weight_decay, momentum,
                     precision)
