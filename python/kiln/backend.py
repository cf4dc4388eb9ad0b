"""Kiln as a torch.compile backend: ``torch.compile(model, backend="kiln")``.

AOTAutograd traces the model's forward and backward into two graphs of Core ATen ops, with
FakeTensor metadata on every node, and hands each to ``compile_graph``. Kiln takes the parts
of a graph it converts (asking its ATen importer about each node) and compiles each part with
its whole pipeline, for the CPU or, when the graph's tensors are on a GPU (cuda:N), for it; the
nodes it does not convert stay with PyTorch, between the Kiln parts, and are reported once
with the reason.

Kiln compiles static shapes. A graph traced with symbolic dimensions (torch.compile marks a
dimension dynamic when a second size arrives: a ragged last batch, sequences of varying
length) is specialized when it is called: traced again with the call's concrete shapes,
compiled, and kept per shape, so that each shape a training loop visits again runs at once.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import os
import time
import warnings
from dataclasses import dataclass, field

import torch
import torch.fx
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._pytree import tree_leaves
from functorch.compile import make_boxed_func

from . import _aten
from ._kiln import CompileError, UnsupportedError, compile_aten_graph, import_error

class KilnGraph(torch.nn.Module):
    """A graph of ATen ops compiled by Kiln, called with the graph's tensors, returning its
    outputs (a tuple, or the one value when the graph returns one).

    With `vouched`, its caller guarantees that every call's tensors have the traced shapes,
    dtypes and device, as AOTAutograd's calls of its graphs do (dynamo's guards hold them), and
    they are passed by address unchecked (CompiledGraph.run_addresses): a DLPack conversion
    cost about 2.3 us a tensor, most of a small graph's call. Otherwise each tensor is checked
    against the graph (CompiledGraph.run), as a user's tensors must be."""

    def __init__(self, gm: torch.fx.GraphModule, name: str,
                 device: torch.device = torch.device("cpu"), precision: str = "fp32",
                 vouched: bool = False):
        super().__init__()
        self.vouched = vouched
        graph = _aten.graph_to_json(gm, name)
        self.name = name
        self.graph_json = graph.text
        dump_dir = os.environ.get("KILN_DUMP_ATEN")
        if dump_dir:  # for `kiln run` / `kiln explain` on the graph the backend received
            os.makedirs(dump_dir, exist_ok=True)
            with open(os.path.join(dump_dir, f"{name}.json"), "w") as f:
                f.write(graph.text)
        self.device = device
        self.compiled = compile_aten_graph(graph.text, device=str(device), precision=precision)
        self.output_slots = graph.output_slots
        self.outputs = graph.outputs
        self.single_output = graph.single_output
        self.input_dtypes = graph.input_dtypes

    def forward(self, *args):
        return self.run(args)

    def run(self, args, in_place=()):
        """The graph's outputs for `args`. `in_place`, (output, input) pairs that
        CompiledGraph.allow_in_place allowed, writes each such output over its input's tensor,
        which is then returned as the output: where the input reaches the graph as it is
        (contiguous, of the traced dtype), else in a tensor of its own."""
        inputs = [as_traced(a.contiguous(), dtype) for a, dtype in zip(args, self.input_dtypes)]
        if self.compiled.takes_rng_seed:
            # Dropout's masks: a new seed for each run, from torch's generator, so that
            # torch.manual_seed repeats a run (below 2**53, the range Kiln's reference keeps).
            inputs.append(torch.randint(0, 2**53, (), dtype=torch.int64, device=self.device))
        over = {o: inputs[i] for o, i in in_place if inputs[i].data_ptr() == args[i].data_ptr()}
        outputs = [over[k] if k in over else
                   torch.empty(o.shape, dtype=o.dtype, device=self.device)
                   for k, o in enumerate(self.outputs)]
        # On a GPU: in order with PyTorch's work on the current stream, without waiting for the
        # GPU. The intermediates live in memory of PyTorch's allocator, which is free again for
        # PyTorch between calls: on a GPU always (the caching allocator counts it in
        # torch.cuda.memory_allocated and orders its reuse after the work queued on this
        # stream), on the CPU for the backend's graphs (a forward's and a backward's then share
        # memory, as eager's passes do). The CPU's whole step keeps the graph's own arena, as
        # glibc would map a multi-GB block afresh at every step and fault it in page by page.
        stream, arena = 0, None
        if self.device.type == "cuda":
            stream = torch.cuda.current_stream(self.device).cuda_stream
        if self.compiled.arena_bytes > 0 and (self.device.type == "cuda" or self.vouched):
            arena = torch.empty(self.compiled.arena_bytes, dtype=torch.uint8,
                                device=self.device)
        arena_address = 0 if arena is None else arena.data_ptr()
        if self.vouched:
            self.compiled.run_addresses([t.data_ptr() for t in inputs],
                                        [t.data_ptr() for t in outputs], stream, arena_address)
        else:
            # DLPack refuses tensors that require grad; detaching shares their memory.
            self.compiled.run([t.detach() for t in inputs], outputs, stream, arena_address)
        results = tuple(None if slot is None else outputs[slot] for slot in self.output_slots)
        return results[0] if self.single_output else results

    def explain(self) -> str:
        return self.compiled.explain()


def as_traced(tensor, dtype):
    """`tensor` in the dtype PyTorch traced it with. Some of PyTorch's meta kernels give a
    result another dtype than the kernel that runs: under autocast on the CPU, batch norm's
    saved mean and inverse deviation are traced bf16 and computed in f32. A Kiln graph compiled
    for the traced dtype reads them rounded to it, as it was compiled to; any other mismatch
    is left for the run's own check to refuse."""
    if tensor.dtype == dtype or not (tensor.is_floating_point() and dtype.is_floating_point):
        return tensor
    return tensor.to(dtype)


def with_traced_strides(tensor, strides):
    """`tensor` with the strides PyTorch traced it with, copied when it has others. Kiln writes
    its outputs row-major; the ATen kernels that run between Kiln graphs may read their inputs'
    memory in the layout their producer gives (the CPU flash attention's backward reads its
    logsumexp so)."""
    if tensor.stride() == strides:
        return tensor
    return torch.empty_strided(tensor.shape, strides, dtype=tensor.dtype,
                               device=tensor.device).copy_(tensor)


def _restride_pytorch_inputs(graph: torch.fx.Graph):
    """Before each node left to PyTorch, its tensor inputs as PyTorch traced them: a Kiln
    graph's output, or a tensor that a Kiln graph of the forward saved for the backward, is
    row-major whatever its traced strides. A Kiln graph reads row-major anyway, so tensors
    that pass from Kiln graph to Kiln graph are never copied."""
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        for arg in list(node.all_input_nodes):
            value = arg.meta.get("val")
            if not isinstance(value, torch.Tensor) or value.is_contiguous():
                continue
            with graph.inserting_before(node):
                restrided = graph.call_function(with_traced_strides, (arg, tuple(value.stride())))
            restrided.meta = dict(arg.meta)
            node.replace_input_with(arg, restrided)


def conversion_error(node: torch.fx.Node) -> str:
    """Why Kiln's ATen importer does not convert `node` (imported on its own), or ''."""
    try:
        return import_error(_aten.single_node_json(node))
    except _aten.Unsupported as e:
        return str(e)


def _tensor_devices(value) -> set:
    """The devices of the tensors in a node's value (a tensor, or a tuple of them)."""
    return {t.device for t in tree_leaves(value) if isinstance(t, torch.Tensor)}


class KilnSupport(OperatorSupportBase):
    """Which nodes Kiln takes: those its ATen importer converts, asked one node at a time, and
    why not for the others. A Kiln graph runs on one device, so a node whose result is on
    another (a copy to or from the CPU) stays with PyTorch."""

    def __init__(self, device: torch.device):
        self.device = device
        self.reasons = {}  # node name -> why Kiln does not take it

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:
            return self.is_node_supported(submodules, node.args[0])
        if node.name in self.reasons:
            return False
        devices = _tensor_devices(node.meta.get("val"))
        error = "" if devices <= {self.device} else (
            f"its result is on {', '.join(sorted(map(str, devices)))}, and the graph runs on "
            f"{self.device}")
        error = error or conversion_error(node)
        if error:
            self.reasons[node.name] = f"{node.target}: {error}"
        return not error


@dataclass
class Report:
    """What Kiln made of the graphs it was handed: each Kiln graph, and each node left to
    PyTorch with the reason."""

    graphs: list = field(default_factory=list)  # KilnGraph
    fallbacks: list = field(default_factory=list)  # (graph name, reason)
    # Graphs of symbolic shapes compiled for a shape they were called with:
    # (graph name, the shapes of its tensor inputs, seconds to trace and compile).
    specializations: list = field(default_factory=list)

    def text(self) -> str:
        lines = []
        for graph in self.graphs:
            lines.append(f"== Kiln graph {graph.name}: {graph.compiled.num_kernels} kernels")
            lines.append(graph.explain().rstrip())
        if self.fallbacks:
            lines.append(f"== {len(self.fallbacks)} node(s) left to PyTorch")
            lines.extend(f"  {name}: {reason}" for name, reason in self.fallbacks)
        if self.specializations:
            seconds = sum(s for _, _, s in self.specializations)
            lines.append(f"== {len(self.specializations)} compilation(s) for new shapes of "
                         f"graphs with symbolic dimensions, {seconds:.2f} s in all")
            lines.extend(f"  {name} for {shapes}: {s:.2f} s"
                         for name, shapes, s in self.specializations)
        return "\n".join(lines) + "\n"


def graph_device(example_inputs) -> torch.device | None:
    """Where Kiln compiles a graph for: the CPU, or a GPU (cuda:N), when every tensor input is
    there; None for other devices or a mix."""
    devices = {x.device for x in example_inputs if isinstance(x, torch.Tensor)}
    if devices <= {torch.device("cpu")}:
        return torch.device("cpu")
    if len(devices) == 1:
        device = devices.pop()
        if device.type == "cuda":
            return torch.device("cuda", device.index or 0)
    return None


def is_symbolic(gm: torch.fx.GraphModule) -> bool:
    """Whether any value of `gm` has a symbolic size, stride or scalar (a SymInt)."""
    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    for node in gm.graph.nodes:
        for value in tree_leaves(node.meta.get("val")):
            if isinstance(value, symbolic):
                return True
            if isinstance(value, torch.Tensor) and any(
                    isinstance(d, symbolic) for d in (*value.shape, *value.stride())):
                return True
    return False


class ShapeSpecialized:
    """A graph with symbolic dimensions, compiled by Kiln for each set of concrete shapes it is
    called with. The first call with a shape traces the graph again with that call's tensors
    (make_fx on fake tensors of their shapes: no computation, the sizes that were symbols now
    numbers) and compiles the static graph as compile_graph does any; later calls with the
    shape run that compilation. A training loop visits a handful of shapes many times, so each
    is compiled once; Kiln's compilation cache serves the same shapes across processes."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, report: Report | None,
                 precision: str):
        self.gm = gm
        self.name = name
        self.report = report
        self.precision = precision
        self.by_shape = {}

    @staticmethod
    def shape_key(args) -> tuple:
        """What a specialization depends on: each tensor's shape, strides, dtype and device,
        and the value of each scalar (a size passed as a SymInt is an int by now)."""
        return tuple((tuple(a.shape), a.stride(), a.dtype, a.device)
                     if isinstance(a, torch.Tensor) else a for a in args)

    def __call__(self, *args):
        key = self.shape_key(args)
        compiled = self.by_shape.get(key)
        if compiled is None:
            start = time.perf_counter()
            static = make_fx(self.gm, tracing_mode="fake")(*args)
            name = f"{self.name}.shape{len(self.by_shape) + 1}"
            compiled = compile_graph(static, args, name, self.report, self.precision)
            self.by_shape[key] = compiled
            if self.report is not None:
                shapes = ", ".join("x".join(map(str, a.shape)) or "scalar"
                                   for a in args if isinstance(a, torch.Tensor))
                self.report.specializations.append(
                    (name, shapes, time.perf_counter() - start))
        return compiled(*args)


def compile_graph(gm: torch.fx.GraphModule, example_inputs, name: str,
                  report: Report | None = None, precision: str = "fp32"):
    """Kiln's compilation of one ATen graph, in `precision` (see make_backend): a callable of
    the graph's inputs. A graph with symbolic dimensions is compiled for each shape it is
    called with (ShapeSpecialized). Nodes Kiln does not convert run in PyTorch, and so does a
    part Kiln does not support (a kernel the GPU cannot take: UnsupportedError); a graph whose
    tensors are on several devices runs as it is. Each with a warning. Any other error of
    Kiln's (InvalidInputError, ResourceExhaustedError, InternalError) is raised, naming the
    graph part, node and op."""
    if is_symbolic(gm):
        return ShapeSpecialized(gm, name, report, precision)
    device = graph_device(example_inputs)
    if device is None:
        devices = sorted({str(x.device) for x in example_inputs if isinstance(x, torch.Tensor)})
        warnings.warn(f"kiln: {name} runs in PyTorch: its tensors are on {', '.join(devices)}; "
                      "Kiln compiles a graph whose tensors are all on the CPU or all on one GPU")
        return gm
    support = KilnSupport(device)
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    if support.reasons:
        warnings.warn("kiln: {} node(s) of {} run in PyTorch: {}".format(
            len(support.reasons), name, "; ".join(support.reasons.values())))
        if report is not None:
            report.fallbacks.extend((name, why) for why in support.reasons.values())
    fused = partitioner.fuse_partitions(partitions)
    for node in list(fused.graph.nodes):
        if node.op != "call_module":
            continue
        part = f"{name}.{node.target}"
        try:
            kiln_graph = KilnGraph(getattr(fused, node.target), part, device, precision,
                                   vouched=True)
        except (_aten.Unsupported, UnsupportedError) as e:
            warnings.warn(f"kiln: {part} runs in PyTorch: {e}")
            if report is not None:
                report.fallbacks.append((part, str(e)))
            continue
        except CompileError as e:
            # Invalid input, exhausted memory or a bug in Kiln: running the graph in PyTorch
            # instead would hide it.
            raise type(e)(f"kiln: {part}: {e}") from e
        setattr(fused, node.target, kiln_graph)
        if report is not None:
            report.graphs.append(kiln_graph)
    _restride_pytorch_inputs(fused.graph)
    fused.recompile()
    return fused


def decompositions() -> dict:
    """The Core ATen decompositions, but for those that are wrong under autograd: the CPU
    flash attention's decomposition returns the attention weights where its logsumexp goes, and
    the backward (not decomposed) would read them as the logsumexp. Kiln converts the op itself
    and its backward."""
    table = dict(core_aten_decompositions())
    table.pop(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, None)
    return table


# Graphs are numbered across the process, so that the names in warnings, reports and the files
# KILN_DUMP_ATEN writes never repeat between models or graph breaks.
_GRAPH_NUMBERS = {"forward": itertools.count(1), "backward": itertools.count(1)}


PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def make_backend(report: Report | None = None, precision: str = "fp32"):
    """A torch.compile backend compiling forward and backward graphs with Kiln; `report`, when
    given, collects what it made of them. `precision` is what the graphs compute in: "fp32" as
    traced (a model run under torch.autocast is traced mixed already); "bf16" or "fp16",
    Kiln's own mixed precision, as autocast computes (matmuls in bf16 or fp16 with f32
    accumulation, convolutions in f32 for now; sums, softmax, normalizations and losses in f32;
    each graph's inputs and outputs keep their dtypes); "tf32" computes as fp32 until Kiln's
    GPU gemms take it."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: Kiln's precisions are {PRECISIONS}")
    def compiler(kind):
        def compile_fn(gm, example_inputs):
            name = f"{kind}{next(_GRAPH_NUMBERS[kind])}"
            module = compile_graph(gm, example_inputs, name, report, precision)
            return make_boxed_func(module)
        return compile_fn

    traced = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                          decompositions=decompositions())

    def backend(gm, example_inputs):
        with attention_kernels_for(graph_device(example_inputs)):
            return traced(gm, example_inputs)
    return backend


def attention_kernels_for(device: torch.device | None):
    """The scaled-dot-product attention that AOTAutograd traces, for a graph on `device`: on
    the CPU, PyTorch's choice (its flash attention for the CPU, whose forward and backward Kiln
    converts); on a GPU, the math form (matmuls and a softmax, which Kiln fuses), since Kiln
    converts none of PyTorch's fused CUDA attention kernels (flash, memory-efficient, cuDNN)."""
    if device is not None and device.type == "cuda":
        return sdpa_kernel(SDPBackend.MATH)
    return contextlib.nullcontext()


def kiln_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None):
    """The backend registered as "kiln" (pyproject.toml's torch_dynamo_backends entry point).
    torch.compile's `options` may hold {"precision": "bf16"} (make_backend's precisions)."""
    options = dict(options or {})
    precision = options.pop("precision", "fp32")
    if options:
        raise ValueError(f"kiln backend: unknown options {sorted(options)}; it takes 'precision'")
    return make_backend(precision=precision)(gm, example_inputs)
