"""Mixed precision from PyTorch: modules trained under torch.autocast with the Kiln backend
against eager autocast, and Kiln's own precision (the backend's option, compile_train_step's
argument) against f32 training. The tolerances: bf16 carries 8 bits, so a loss computed from
bf16 contractions moves by about 1e-2 of itself; a few steps apart, two runs may drift by a
few times that."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from conftest import kiln_compile

STEPS = 3
AUTOCAST_TOLERANCE = 2e-2  # one bf16 rounding of the loss, a few steps on
PRECISION_TOLERANCE = 5e-2  # bf16 or fp16 training against f32, a few steps on


class ConvAttentionNet(nn.Module):
    """A convolution with batch norm, then attention with a layer norm over its positions: the
    ops whose low-precision forms autocast traces (convolution, batch norm, matmul, softmax,
    layer norm)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.norm = nn.BatchNorm2d(16)
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)
        self.layer_norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        h = F.relu(self.norm(self.conv(x)))       # [N, 16, 8, 8]
        tokens = h.flatten(2).transpose(1, 2)     # [N, 64, 16]
        attended, _ = self.attention(tokens, tokens, tokens, need_weights=False)
        return self.head(self.layer_norm(tokens + attended).mean(1))


def train(model, forward, x, labels, autocast=False):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = F.cross_entropy(forward(x), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def assert_losses_track(got, want, tolerance, what):
    for step, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= tolerance * abs(w), f"{what}, step {step}: loss {g} against {w}"


def test_a_module_under_bf16_autocast_trains_as_eagerly_and_whole_in_kiln():
    torch.manual_seed(0)
    eager = ConvAttentionNet()
    under_kiln = copy.deepcopy(eager)
    compiled, report = kiln_compile(under_kiln)
    x, labels = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    want = train(eager, eager, x, labels, autocast=True)
    got = train(under_kiln, compiled, x, labels, autocast=True)
    assert_losses_track(got, want, AUTOCAST_TOLERANCE, "autocast")
    assert report.graphs, "Kiln compiled none of the step"
    dtype_fallbacks = [(part, why) for part, why in report.fallbacks
                       if "dtype" in why or "bf16" in why or "bfloat16" in why]
    assert not dtype_fallbacks, f"left to PyTorch for a dtype: {dtype_fallbacks}"


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_backend_precision_option_trains_close_to_f32(precision):
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 10))
    under_kiln = copy.deepcopy(eager)
    compiled = torch.compile(under_kiln, backend="kiln", dynamic=False,
                             options={"precision": precision})
    x, labels = torch.randn(16, 32), torch.randint(0, 10, (16,))
    want = train(eager, eager, x, labels)
    got = train(under_kiln, compiled, x, labels)
    assert_losses_track(got, want, PRECISION_TOLERANCE, precision)
    assert all(p.dtype == torch.float32 for p in under_kiln.parameters())


def test_compile_train_step_in_bf16_keeps_f32_master_weights():
    torch.manual_seed(0)
    start = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 5))
    f32_model, bf16_model = copy.deepcopy(start), copy.deepcopy(start)
    # SGD, whose update is the gradient's: Adam's would turn a gradient near zero, rounded to
    # the other sign in bf16, into a full step the other way.
    f32_step = kiln.compile_train_step(f32_model, F.cross_entropy, optimizer="sgd", lr=0.1)
    bf16_step = kiln.compile_train_step(bf16_model, F.cross_entropy, optimizer="sgd", lr=0.1,
                                        precision="bf16")
    g = torch.Generator().manual_seed(1)
    for i in range(4):
        x, y = torch.randn(8, 16, generator=g), torch.randint(0, 5, (8,), generator=g)
        want, got = f32_step(x, y).item(), bf16_step(x, y).item()
        assert abs(got - want) <= PRECISION_TOLERANCE * abs(want), f"step {i}: {got} vs {want}"
    for (name, p), q in zip(bf16_model.named_parameters(), f32_model.parameters()):
        assert p.dtype == torch.float32, name
        # Updated as the f32 step updates it, to bf16's precision of the gradients.
        change = (q.detach() - dict(start.named_parameters())[name].detach()).abs().max().item()
        assert (p - q).abs().max().item() <= 0.1 * change + 1e-6, name
    assert "bf16" in bf16_step.explain()


def test_compile_train_step_in_fp16_scales_its_loss():
    torch.manual_seed(0)
    start = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 5))
    f32_model, fp16_model = copy.deepcopy(start), copy.deepcopy(start)
    f32_step = kiln.compile_train_step(f32_model, F.cross_entropy, lr=1e-2)
    fp16_step = kiln.compile_train_step(fp16_model, F.cross_entropy, lr=1e-2, precision="fp16")
    g = torch.Generator().manual_seed(1)
    for i in range(4):
        x, y = torch.randn(8, 16, generator=g), torch.randint(0, 5, (8,), generator=g)
        want, got = f32_step(x, y).item(), fp16_step(x, y).item()
        assert abs(got - want) <= PRECISION_TOLERANCE * abs(want), f"step {i}: {got} vs {want}"
    # GradScaler's state, kept by the step: the initial scale, four finite steps counted.
    scale, finite_steps = fp16_step.scaler
    assert scale.item() == 65536.0 and finite_steps.item() == 4.0
    assert all(p.dtype == torch.float32 for p in fp16_model.parameters())


def test_a_skipped_fp16_step_does_not_count_in_adams_step():
    # A batch with a NaN makes every gradient NaN: GradScaler skips the step, and the skipped
    # optimizer.step() leaves Adam's count alone, so the next step's bias corrections are a
    # first step's: the parameters come out as a step that only ever saw the finite batch.
    torch.manual_seed(0)
    start = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 5))
    skipped_model, fresh_model = copy.deepcopy(start), copy.deepcopy(start)
    skipped = kiln.compile_train_step(skipped_model, F.cross_entropy, lr=1e-2, precision="fp16")
    fresh = kiln.compile_train_step(fresh_model, F.cross_entropy, lr=1e-2, precision="fp16")
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 16, generator=g), torch.randint(0, 5, (8,), generator=g)
    poisoned = x.clone()
    poisoned[0, 0] = float("nan")
    skipped(poisoned, y)
    assert skipped.scaler[0].item() == 32768.0 and skipped.adam_steps[0].item() == 0.0
    for p, q in zip(skipped_model.parameters(), start.parameters()):
        assert torch.equal(p.detach(), q.detach())
    skipped(x, y)
    fresh(x, y)
    assert skipped.adam_steps[0].item() == 1.0 and fresh.adam_steps[0].item() == 1.0
    for (name, p), q in zip(skipped_model.named_parameters(), fresh_model.parameters()):
        change = (q.detach() - dict(start.named_parameters())[name].detach()).abs().max().item()
        assert (p - q).abs().max().item() <= 1e-3 * change, name


def test_unknown_precisions_and_backend_options_are_refused():
    with pytest.raises(ValueError, match="precision"):
        kiln.make_backend(precision="int8")
    with pytest.raises(ValueError, match="precision"):
        kiln.compile_train_step(nn.Linear(2, 2), F.mse_loss, precision="fp8")
    with pytest.raises(Exception, match="unknown options"):
        torch.compile(nn.Linear(2, 2), backend="kiln", options={"precison": "bf16"})(
            torch.randn(1, 2))
