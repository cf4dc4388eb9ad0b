"""The extension's run checks each tensor against the graph before Kiln touches its memory;
run_addresses, the backend's, takes what its caller vouches for."""

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


def test_run_by_address_writes_the_same_in_place_and_checks_only_the_counts():
    # The backend's calls: the tensors' addresses, their metadata vouched for by the caller.
    graph = _kiln.compile_aten_graph(RELU)
    x, out = torch.randn(2, 3), torch.empty(2, 3)
    graph.run_addresses([x.data_ptr()], [out.data_ptr()])
    assert torch.equal(out, x.relu())
    with pytest.raises(ValueError, match="takes 1 inputs and 1 outputs"):
        graph.run_addresses([x.data_ptr()], [])


def test_an_unconvertible_graph_raises_compile_error_naming_the_node():
    bad = RELU.replace("aten.relu.default", "aten.fancy.default")
    with pytest.raises(kiln.CompileError, match="node 'r' \\(aten.fancy.default\\)"):
        _kiln.compile_aten_graph(bad)


def test_a_device_kiln_does_not_compile_for_is_refused():
    with pytest.raises(ValueError, match="device 'tpu'"):
        _kiln.compile_aten_graph(RELU, device="tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_compiling_for_a_gpu_on_a_machine_without_one_says_why():
    with pytest.raises(kiln.CompileError, match="(?i)driver|GPU|CUDA"):
        _kiln.compile_aten_graph(RELU, device="cuda")


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")


@needs_gpu
def test_a_gpu_graph_runs_on_cuda_tensors_in_order_with_the_callers_stream():
    graph = _kiln.compile_aten_graph(RELU, device="cuda")
    assert graph.device == "cuda:0"
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):  # fresh inputs each run: the outputs must follow them
            x = torch.randn(2, 3, device="cuda")
            out = torch.full((2, 3), float("nan"), device="cuda")
            graph.run([x], [out], stream.cuda_stream)
            assert torch.equal(out, x.relu())  # read on the same stream, after the run


@needs_gpu
def test_a_gpu_graph_refuses_cpu_tensors_and_a_cpu_graph_gpu_ones():
    on_gpu = _kiln.compile_aten_graph(RELU, device="cuda")
    with pytest.raises(ValueError, match="not on cuda:0"):
        on_gpu.run([torch.randn(2, 3)], [torch.empty(2, 3, device="cuda")])
    on_cpu = _kiln.compile_aten_graph(RELU)
    with pytest.raises(ValueError, match="not on the CPU"):
        on_cpu.run([torch.randn(2, 3, device="cuda")], [torch.empty(2, 3)])


# Two products whose intermediate (x @ a, 4x4 floats) lies in the arena between two kernels.
CHAIN = json.dumps({
    "format": "kiln-aten-1", "name": "chain",
    "inputs": [{"name": "x", "dtype": "f32", "shape": [4, 4]},
               {"name": "a", "dtype": "f32", "shape": [4, 4]}],
    "nodes": [{"name": "p", "target": "aten.mm.default",
               "args": {"self": {"tensor": "x"}, "mat2": {"tensor": "a"}},
               "outputs": [{"dtype": "f32", "shape": [4, 4]}]},
              {"name": "q", "target": "aten.mm.default",
               "args": {"self": {"tensor": "p"}, "mat2": {"tensor": "a"}},
               "outputs": [{"dtype": "f32", "shape": [4, 4]}]}],
    "outputs": [{"tensor": "q"}]})


def test_a_graph_says_how_much_arena_a_run_needs():
    graph = _kiln.compile_aten_graph(CHAIN)
    assert graph.arena_bytes >= 4 * 4 * 4
    x, a, out = torch.randn(4, 4), torch.randn(4, 4), torch.empty(4, 4)
    graph.run([x, a], [out])
    torch.testing.assert_close(out, x @ a @ a)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_gpu)])
def test_a_graph_keeps_its_intermediates_in_the_arena_it_is_given(device):
    # The backend's arena: a tensor of PyTorch's allocator (on a GPU, counted by
    # torch.cuda.memory_allocated); the run writes x @ a there.
    graph = _kiln.compile_aten_graph(CHAIN, device=device)
    x, a = torch.randn(4, 4, device=device), torch.randn(4, 4, device=device)
    out = torch.empty(4, 4, device=device)
    arena = torch.full((graph.arena_bytes,), 255, dtype=torch.uint8, device=device)
    stream = torch.cuda.current_stream().cuda_stream if device == "cuda" else 0
    graph.run_addresses([x.data_ptr(), a.data_ptr()], [out.data_ptr()], stream, arena.data_ptr())
    torch.testing.assert_close(out, x @ a @ a)
    assert (arena != 255).any(), "the intermediate was written into the given arena"
    with pytest.raises(kiln.InvalidInputError, match="-byte aligned"):
        graph.run_addresses([x.data_ptr(), a.data_ptr()], [out.data_ptr()], stream,
                            arena.data_ptr() + 4)
