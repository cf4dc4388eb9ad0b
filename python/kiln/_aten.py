"""torch.fx graphs of ATen ops as the JSON text Kiln's ATen importer reads.

The format is described in src/frontend/aten_import.h. Every argument of a node is written by
its schema name, defaults included, so that the importer reads arguments by name; shapes and
dtypes come from the FakeTensor metadata (``node.meta["val"]``) that AOTAutograd attaches, so
no data is needed.
"""

from __future__ import annotations

import json
import math
import operator
from dataclasses import dataclass, field

import torch
import torch.fx

FORMAT = "kiln-aten-1"

DTYPES = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.bool: "bool",
}


class Unsupported(Exception):
    """A graph or node that Kiln cannot take (a dtype, a symbolic shape, a non-ATen call)."""


def tensor_meta(value) -> dict:
    """The {"dtype", "shape"} of a FakeTensor (or real tensor) with static shape."""
    if not isinstance(value, torch.Tensor):
        raise Unsupported(f"expected a tensor, got {type(value).__name__}")
    if value.layout != torch.strided:
        raise Unsupported(f"{value.layout} tensors are not supported (dense tensors only)")
    if value.dtype not in DTYPES:
        raise Unsupported(f"dtype {value.dtype} is not supported")
    shape = []
    for dim in value.shape:
        if not isinstance(dim, int):
            raise Unsupported(f"symbolic shape {tuple(value.shape)} (Kiln compiles static shapes)")
        shape.append(dim)
    return {"dtype": DTYPES[value.dtype], "shape": shape}


def result_metas(node: torch.fx.Node) -> list:
    """One {"dtype", "shape"} (or None) per result of a call_function node."""
    value = node.meta.get("val")
    if value is None:
        raise Unsupported(f"node {node.name} has no metadata (meta['val'])")
    values = value if isinstance(value, (tuple, list)) else [value]
    return [None if v is None else tensor_meta(v) for v in values]


@dataclass
class Encoder:
    """Encodes argument values, resolving getitem nodes to (node, result index) references."""

    aliases: dict = field(default_factory=dict)  # getitem node -> reference

    def ref(self, node: torch.fx.Node) -> dict:
        return self.aliases.get(node, {"tensor": node.name})

    def value(self, v):
        if isinstance(v, torch.fx.Node):
            return self.ref(v)
        if isinstance(v, (list, tuple)):
            return [self.value(x) for x in v]
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            if math.isnan(v):
                return {"float": "nan"}
            if math.isinf(v):
                return {"float": "inf" if v > 0 else "-inf"}
            return v
        if isinstance(v, torch.dtype):
            if v not in DTYPES:
                raise Unsupported(f"dtype {v} is not supported")
            return {"dtype": DTYPES[v]}
        if isinstance(v, torch.device):
            return {"device": str(v)}
        if isinstance(v, (torch.layout, torch.memory_format)):
            return {"other": str(v)}
        raise Unsupported(f"argument of type {type(v).__name__} ({v!r})")


def normalized_arguments(node: torch.fx.Node) -> dict:
    """The node's arguments by schema name, with the schema's defaults filled in."""
    schema = node.target._schema
    args = {}
    for i, argument in enumerate(schema.arguments):
        if i < len(node.args) and not argument.kwarg_only:
            args[argument.name] = node.args[i]
        elif argument.name in node.kwargs:
            args[argument.name] = node.kwargs[argument.name]
        elif argument.has_default_value():
            args[argument.name] = argument.default_value
        else:
            args[argument.name] = None
    return args


def target_name(node: torch.fx.Node) -> str:
    """'aten.addmm.default' for the node's OpOverload, or Unsupported."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        raise Unsupported(f"{target} is not an ATen op")
    return f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"


def node_json(node: torch.fx.Node, encoder: Encoder) -> dict:
    return {
        "name": node.name,
        "target": target_name(node),
        "args": {k: encoder.value(v) for k, v in normalized_arguments(node).items()},
        "outputs": result_metas(node),
    }


@dataclass
class OutputSpec:
    """A Kiln graph output as PyTorch expects it (Kiln writes it row-major: see
    backend.with_traced_strides)."""

    shape: tuple
    dtype: torch.dtype


@dataclass
class GraphText:
    """A graph as the importer's JSON, with what the caller needs to run it."""

    text: str
    # Per output of the fx graph: an index into `outputs`, or None for an output that is None
    # (a gradient AOTAutograd does not need).
    output_slots: list
    outputs: list  # OutputSpec per Kiln graph output
    # Whether the fx graph returns one value rather than a tuple.
    single_output: bool
    # Per graph input, the dtype PyTorch traced it with.
    input_dtypes: list


def output_spec(node: torch.fx.Node) -> OutputSpec:
    value = node.meta.get("val")
    tensor_meta(value)  # a dense tensor of static shape and a supported dtype, or Unsupported
    return OutputSpec(tuple(value.shape), value.dtype)


def graph_to_json(gm: torch.fx.GraphModule, name: str = "graph") -> GraphText:
    """The JSON text of a graph module whose nodes are ATen ops; Unsupported if it has any
    other kind of node."""
    encoder = Encoder()
    inputs, nodes, outputs = [], [], []
    output_slots, output_specs, input_dtypes = [], [], []
    single_output = False
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            inputs.append({"name": node.name, **tensor_meta(node.meta.get("val"))})
            input_dtypes.append(node.meta["val"].dtype)
        elif node.op == "call_function" and node.target is operator.getitem:
            source, index = node.args
            encoder.aliases[node] = {"tensor": source.name, "index": index}
        elif node.op == "call_function":
            nodes.append(node_json(node, encoder))
        elif node.op == "output":
            results = node.args[0]
            single_output = not isinstance(results, (tuple, list))
            results = [results] if single_output else results
            for result in results:
                if result is None:
                    output_slots.append(None)
                    continue
                if not isinstance(result, torch.fx.Node):
                    raise Unsupported(f"graph output {result!r} is not a tensor")
                output_slots.append(len(outputs))
                outputs.append(encoder.ref(result))
                output_specs.append(output_spec(result))
        else:
            raise Unsupported(f"{node.op} node {node.name} ({node.target})")
    text = json.dumps(
        {"format": FORMAT, "name": name, "inputs": inputs, "nodes": nodes, "outputs": outputs},
        allow_nan=False,
    )
    return GraphText(text, output_slots, output_specs, single_output, input_dtypes)


def single_node_json(node: torch.fx.Node) -> str:
    """A graph of one node alone, its tensor arguments made inputs: importing it tells whether
    (and why not) Kiln converts the node."""
    encoder = Encoder()
    inputs = []
    seen = set()

    def add_input(arg):
        if isinstance(arg, torch.fx.Node) and arg not in seen:
            seen.add(arg)
            # A result of another node becomes an input of its own name.
            name = f"in{len(inputs)}"
            encoder.aliases[arg] = {"tensor": name}
            inputs.append({"name": name, **tensor_meta(arg.meta.get("val"))})
        return arg

    torch.fx.node.map_arg((node.args, node.kwargs), add_input)
    entry = node_json(node, encoder)
    outputs = [{"tensor": node.name, "index": i} for i, m in enumerate(entry["outputs"]) if m]
    return json.dumps(
        {"format": FORMAT, "name": node.name, "inputs": inputs, "nodes": [entry],
         "outputs": outputs},
        allow_nan=False,
    )
