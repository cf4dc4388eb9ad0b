"""The extension's run checks each tensor against the graph before Kiln touches its memory."""

import json

import pytest
import torch

import kiln
from kiln import _kiln

RELU = json.dumps({
    "format": "kiln-aten-1", "name": "relu",
    "inputs": [{"name": "x", "dtype": "f32", "shape": [2, 3]}],
    "nodes": [{"name": "r", "target": "aten.relu.default", "args": {"self": {"tensor": "x"}},
               "outputs": [{"dtype": "f32", "shape": [2, 3]}]}],
    "outputs": [{"tensor": "r"}]})


def test_run_writes_the_outputs_in_place():
    graph = _kiln.compile_aten_graph(RELU)
    x, out = torch.randn(2, 3), torch.empty(2, 3)
    graph.run([x], [out])
    assert torch.equal(out, x.relu())


@pytest.mark.parametrize("tensor,why", [
    (torch.randn(3, 2).t(), "not contiguous"),
    (torch.randn(2, 3, dtype=torch.float64), "dtype differs"),
    (torch.randn(3, 2), "shape differs"),
    (torch.randn(6), "has 1 dims"),
])
def test_run_refuses_a_tensor_unlike_the_graphs(tensor, why):
    graph = _kiln.compile_aten_graph(RELU)
    with pytest.raises(ValueError, match=why):
        graph.run([tensor], [torch.empty(2, 3)])
    with pytest.raises(ValueError, match="takes 1 inputs and 1 outputs"):
        graph.run([], [])


def test_an_unconvertible_graph_raises_compile_error_naming_the_node():
    bad = RELU.replace("aten.relu.default", "aten.fancy.default")
    with pytest.raises(kiln.CompileError, match="node 'r' \\(aten.fancy.default\\)"):
        _kiln.compile_aten_graph(bad)
