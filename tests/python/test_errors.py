"""Kiln's errors by kind: the backend leaves to PyTorch only what Kiln does not support, and
raises the rest (a bug in Kiln above all) as a kiln exception naming the graph, node and op;
a failed internal check inside the module raises instead of ending the Python process."""

import json

import pytest
import torch

import kiln
from kiln import _kiln

from conftest import kiln_compile

RELU = json.dumps({
    "format": "kiln-aten-1", "name": "relu",
    "inputs": [{"name": "x", "dtype": "f32", "shape": [3, 5]}],
    "nodes": [{"name": "r", "target": "aten.relu.default", "args": {"self": {"tensor": "x"}},
               "outputs": [{"dtype": "f32", "shape": [3, 5]}]}],
    "outputs": [{"tensor": "r"}]})


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A compilation cache of the test's own, so that every graph goes through the pipeline."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))


def backend_error(error: BaseException) -> BaseException:
    """The error the backend raised, under torch.compile's wrapper (BackendCompilerFailed
    keeps it as inner_exception)."""
    while getattr(error, "inner_exception", None) is not None:
        error = error.inner_exception
    return error


def test_the_error_classes_are_compile_errors():
    for error in (kiln.UnsupportedError, kiln.InvalidInputError, kiln.ResourceExhaustedError,
                  kiln.InternalError):
        assert issubclass(error, kiln.CompileError)


def test_an_op_kiln_does_not_convert_is_unsupported():
    bad = RELU.replace("aten.relu.default", "aten.fancy.default")
    with pytest.raises(kiln.UnsupportedError, match="aten.fancy.default"):
        _kiln.compile_aten_graph(bad)


def test_a_malformed_graph_is_invalid_input():
    with pytest.raises(kiln.InvalidInputError, match="ATen graph"):
        _kiln.compile_aten_graph(json.dumps({"format": "kiln-aten-1", "nodes": 3}))


def test_an_internal_error_is_raised_as_internal(fresh_cache, monkeypatch):
    monkeypatch.setenv("KILN_FAULT", "internal")
    with pytest.raises(kiln.InternalError, match="internal compiler error"):
        _kiln.compile_aten_graph(RELU, reuse_compilations=False)


def test_a_failed_check_raises_and_the_process_lives_on(fresh_cache, monkeypatch):
    monkeypatch.setenv("KILN_FAULT", "check")
    with pytest.raises(kiln.InternalError, match="check failed: .*KILN_FAULT=check"):
        _kiln.compile_aten_graph(RELU, reuse_compilations=False)
    monkeypatch.delenv("KILN_FAULT")
    graph = _kiln.compile_aten_graph(RELU, reuse_compilations=False)
    x, out = torch.randn(3, 5), torch.empty(3, 5)
    graph.run([x], [out])
    assert torch.equal(out, x.relu())


def test_the_backend_raises_an_internal_error_instead_of_falling_back(fresh_cache, monkeypatch):
    def fn(x):
        return (x * 3).relu() + 1

    compiled, report = kiln_compile(fn)
    monkeypatch.setenv("KILN_FAULT", "internal")
    with pytest.raises(Exception) as raised:
        compiled(torch.randn(4, 7))
    cause = backend_error(raised.value)
    assert isinstance(cause, kiln.InternalError), f"{type(cause).__name__}: {cause}"
    assert "kiln: forward" in str(cause), str(cause)
    assert not report.fallbacks and not report.graphs


def test_the_backend_still_leaves_what_kiln_does_not_support_to_pytorch(fresh_cache):
    def fn(x):
        return torch.cumprod(x, dim=1).relu() * 2  # cumprod: not converted by Kiln

    compiled, report = kiln_compile(fn)
    x = torch.randn(3, 6)
    with pytest.warns(UserWarning, match="cumprod"):
        result = compiled(x)
    assert torch.allclose(result, fn(x), rtol=1e-5, atol=1e-6)
    assert report.fallbacks and report.graphs
