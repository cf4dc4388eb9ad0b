"""The benchmarks' correctness checks (bench/peers) pass what only rounding separates and fail a
gradient off by 2x, as KILN_BENCH_CORRUPT_GRADIENT makes one: bench_backend.py's check of every
step against eager, and bench_peers.py's check of a training step's gradients, Adam moments and
updates against PyTorch eager's."""

import copy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "peers"))
import bench_backend  # noqa: E402
import bench_peers  # noqa: E402


def backend_ways(corrupt):
    """bench_backend's three ways on a small MLP; the "inductor" way runs eagerly here, to spare
    the test Inductor's compile."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 5))
    ways = {}
    for way in ("eager", "inductor", "kiln"):
        copy_of = copy.deepcopy(model)
        forward = copy_of
        if way == "kiln":
            if corrupt:
                bench_backend.corrupt_gradient(copy_of)
            forward = torch.compile(copy_of, backend=kiln.make_backend(), dynamic=False)
        ways[way] = bench_backend.Runner(copy_of, forward, F.cross_entropy)
    return ways


def batches(count):
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 16, generator=generator),
             torch.randint(0, 5, (8,), generator=generator)) for _ in range(count)]


def test_backend_check_passes_kiln_over_steps():
    ways = backend_ways(corrupt=False)
    for step, batch in enumerate(batches(3), 1):
        bench_backend.take_step("mlp", step, batch, ways)
    assert ways["kiln"].optimizer.state  # the momentum the checks compared


def test_backend_check_fails_a_doubled_gradient():
    ways = backend_ways(corrupt=True)
    with pytest.raises(bench_backend.Disagreement,
                       match=r"mlp: kiln disagrees with eager at step 1: gradient of 0\.weight: "
                             r"max abs error .*, rel\. error in norm 1 "):
        bench_backend.take_step("mlp", 1, batches(1)[0], ways)


def adam_step(inputs, trainable, x, labels, lr):
    """A training step's result as training_systems collects it, from torch.optim.Adam."""
    params = {n: torch.from_numpy(inputs[n].copy()).requires_grad_() for n in trainable}
    optimizer = torch.optim.Adam(list(params.values()), lr=lr)
    loss = F.cross_entropy(torch.relu(x @ params["w1"]) @ params["w2"], labels)
    loss.backward()
    optimizer.step()
    return {"loss": float(loss.detach()),
            "updated": {n: p.detach().numpy().copy() for n, p in params.items()},
            "gradient": {n: p.grad.numpy().copy() for n, p in params.items()},
            "exp_avg": {n: optimizer.state[p]["exp_avg"].numpy().copy()
                        for n, p in params.items()},
            "exp_avg_sq": {n: optimizer.state[p]["exp_avg_sq"].numpy().copy()
                           for n, p in params.items()}}


@pytest.mark.parametrize("corrupt", [False, True])
def test_peers_training_check(corrupt):
    generator = torch.Generator().manual_seed(2)
    trainable = ["w1", "w2"]
    inputs = {"w1": torch.randn(16, 32, generator=generator).numpy(),
              "w2": torch.randn(32, 5, generator=generator).numpy()}
    for n in trainable:
        inputs[f"{n}.m"] = np.zeros_like(inputs[n])
        inputs[f"{n}.v"] = np.zeros_like(inputs[n])
    x, labels = torch.randn(8, 16, generator=generator), torch.randint(0, 5, (8,))
    lr = 1e-3
    reference = adam_step(inputs, trainable, x, labels, lr)
    reference["allowed"] = {n: bench_peers.GRADIENT_RTOL for n in trainable}
    largest = max(float(np.abs(g).max()) for g in reference["gradient"].values())
    reference["noise"] = {n: bench_peers.NOISE_GRADIENT * largest for n in trainable}
    # Another system's step, as Kiln's outputs give it (moments by name), from the same inputs.
    other = adam_step(inputs, trainable, x, labels, lr)
    state = {}
    for n in trainable:
        state[f"{n}.m.next"] = other["exp_avg"][n]
        state[f"{n}.v.next"] = other["exp_avg_sq"][n]
    if corrupt:
        assert bench_peers.corrupted_gradient(trainable, inputs, state, 0.9, 0.999) == "w1"
        np.testing.assert_allclose(state["w1.m.next"], 2 * other["exp_avg"]["w1"], rtol=1e-6)
        np.testing.assert_allclose(state["w1.v.next"], 4 * other["exp_avg_sq"]["w1"], rtol=1e-6)
    result = {"loss": other["loss"], "updated": other["updated"],
              "exp_avg": {n: state[f"{n}.m.next"] for n in trainable},
              "exp_avg_sq": {n: state[f"{n}.v.next"] for n in trainable},
              "gradient": {n: (state[f"{n}.m.next"] / (1 - 0.9)).astype(np.float32)
                           for n in trainable}}
    ok, text = bench_peers.check_training(torch, result, reference, inputs, trainable, lr, 0.9,
                                          0.999, 1e-8)
    assert ok is not corrupt, text
    if corrupt:
        assert text.startswith("gradient of w1: rel. error in norm 1.00e+00 > 0.05"), text
        assert "exp_avg of w1" in text and "exp_avg_sq of w1" in text, text
