"""Shared helpers of the Python package's tests: compile with Kiln, collecting its report, and
compare with PyTorch eager."""

import pytest
import torch

import kiln


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles its own graphs (dynamo's caches would keep an earlier test's)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def kiln_compile(fn):
    """`fn` compiled by Kiln's backend with static shapes, and the report of what it made."""
    report = kiln.Report()
    return torch.compile(fn, backend=kiln.make_backend(report), dynamic=False), report


def assert_close(actual, expected, rtol=1e-5, atol=1e-6, what="result"):
    """Elementwise closeness, relative to the expected tensor's largest magnitude."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} vs {expected.dtype}"
    if expected.dtype == torch.bool or not expected.is_floating_point():
        assert torch.equal(actual, expected), f"{what}: values differ"
        return
    scale = expected.abs().max().item() if expected.numel() else 0.0
    error = (actual - expected).abs().max().item() if expected.numel() else 0.0
    assert error <= atol + rtol * scale, f"{what}: max error {error} (scale {scale})"


def assert_trained_alike(kiln_losses, eager_losses, under_kiln, eager, start):
    """Training under Kiln went as eagerly from the same `start` parameters: each step's loss
    within 1e-4 relative, each parameter's change within 5e-4 of its largest change."""
    for step, (k, e) in enumerate(zip(kiln_losses, eager_losses)):
        assert abs(k - e) <= 1e-4 * abs(e), f"step {step}: loss {k} under Kiln, {e} eager"
    kiln_params = dict(under_kiln.named_parameters())
    for name, p in eager.named_parameters():
        change = p.detach() - start[name]
        kiln_change = kiln_params[name].detach() - start[name]
        scale = change.abs().max().item()
        error = (kiln_change - change).abs().max().item()
        assert error <= 5e-4 * scale + 1e-7, f"{name}: change differs by {error} (of {scale})"
