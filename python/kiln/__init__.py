"""Kiln, a deep-learning compiler that fuses operators, from PyTorch.

    import kiln, torch
    model = torch.compile(model, backend="kiln")   # forward and backward compiled by Kiln

Kiln compiles the Core ATen graphs that torch.compile's AOTAutograd traces (forward and
backward) for this machine's CPU, or for a GPU when the tensors are on it (cuda:N); the ops it
does not convert run in PyTorch between its kernels. ``kiln.explain(model, *inputs)`` tells
what was fused and what was left to PyTorch.
``kiln.compile_train_step(model, loss_fn, optimizer="adamw")`` compiles forward, backward and
the optimizer update as one Kiln graph.
"""

from importlib.metadata import PackageNotFoundError, version as _version

# PyTorch loads before the extension: loaded first, the libraries the extension brings (a GPU
# bundle's copies, scripts/gpu-bundle) made PyTorch's import abort ("free(): invalid pointer").
import torch  # noqa: F401

from ._kiln import (CompileError, InternalError, InvalidInputError, ResourceExhaustedError,
                    UnsupportedError, supported_aten_ops)
from .backend import Report, compile_graph, kiln_backend, make_backend
from .train_step import TrainStep, compile_train_step

try:
    __version__ = _version("kiln")
except PackageNotFoundError:  # imported from the source tree
    __version__ = "unknown"

__all__ = ["CompileError", "InternalError", "InvalidInputError", "Report", "ResourceExhaustedError",
           "TrainStep", "UnsupportedError", "compile_graph", "compile_train_step", "explain",
           "kiln_backend", "make_backend", "supported_aten_ops"]


def explain(model, *example_inputs, backward: bool = True, more_inputs=()) -> str:
    """Compiles `model` for `example_inputs` and returns Kiln's account of it: each Kiln
    graph's fused kernels and why, and each op left to PyTorch with the reason. With
    `backward` (the default), the graphs of the backward pass too, when the outputs need
    gradients: a training step's account.

    `more_inputs`, tuples of inputs of other shapes (a ragged last batch, other sequence
    lengths), are then run in turn, as a training loop would: PyTorch makes the dimensions that
    change symbolic, Kiln compiles its graphs for each shape, and the account ends with each
    compilation for a new shape and its time.

    A copy of the model runs, once forward (and backward) for each set of inputs, so its
    parameters, gradients and buffers (batch norm's running statistics) are left as they
    were."""
    import copy

    import torch
    from torch.utils._pytree import tree_leaves

    if isinstance(model, torch.nn.Module):
        model = copy.deepcopy(model)
    report = Report()
    # One shape: compiled for it alone. Several: as torch.compile's default does, symbolic
    # where they differ.
    compiled = torch.compile(model, backend=make_backend(report),
                             dynamic=None if more_inputs else False)
    with torch.set_grad_enabled(backward):
        for inputs in (example_inputs, *more_inputs):
            outputs = compiled(*inputs)
            differentiable = [t for t in tree_leaves(outputs)
                              if isinstance(t, torch.Tensor) and t.requires_grad]
            if differentiable:
                torch.autograd.backward(differentiable,
                                        [torch.ones_like(t) for t in differentiable])
    return report.text()
