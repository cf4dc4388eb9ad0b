"""kiln.compile_train_step: forward, backward and the optimizer update as one Kiln graph,
against the same model trained eagerly with torch.optim."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln

STEPS = 4
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no GPU"))]


def make_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 5))


@pytest.mark.parametrize("optimizer,kwargs,eager_optimizer", [
    ("adamw", dict(lr=1e-2, weight_decay=0.01), torch.optim.AdamW),
    ("sgd", dict(lr=0.1, momentum=0.9, weight_decay=0.01), torch.optim.SGD),
])
@pytest.mark.parametrize("device", DEVICES)
def test_whole_step_matches_torch_optim(optimizer, kwargs, eager_optimizer, device):
    start = make_mlp().to(device)
    mine, eager = copy.deepcopy(start), copy.deepcopy(start)
    step = kiln.compile_train_step(mine, F.cross_entropy, optimizer=optimizer, **kwargs)
    parameters_before = [id(p) for p in mine.parameters()]
    reference = eager_optimizer(eager.parameters(), **kwargs)
    g = torch.Generator().manual_seed(1)
    for i in range(STEPS):
        x, y = torch.randn(8, 16, generator=g), torch.randint(0, 5, (8,), generator=g)
        x, y = x.to(device), y.to(device)
        loss = step(x, y)
        reference.zero_grad()
        expected = F.cross_entropy(eager(x), y)
        expected.backward()
        reference.step()
        assert abs(loss.item() - expected.item()) <= 1e-4 * abs(expected.item()), f"step {i}"
    assert [id(p) for p in mine.parameters()] == parameters_before  # updated in place
    initial = dict(start.named_parameters())
    updated = dict(mine.named_parameters())
    for name, p in eager.named_parameters():
        change = p.detach() - initial[name]
        error = (updated[name].detach() - p.detach()).abs().max().item()
        assert error <= 5e-4 * change.abs().max().item() + 1e-7, f"{name}: off by {error}"
    assert "kernel" in step.explain()
    assert step.graph.compiled.device == ("cuda:0" if device == "cuda" else device)


@pytest.mark.parametrize("device", DEVICES)
def test_the_update_writes_over_the_old_parameters_and_state_where_the_program_allows(device):
    model = make_mlp().to(device)
    step = kiln.compile_train_step(model, F.cross_entropy, optimizer="adamw", lr=1e-2)
    x, y = torch.randn(8, 16, device=device), torch.randint(0, 5, (8,), device=device)
    step(x, y)
    # Most updates read each element before writing it; a gemm that parks a weight's gradient in
    # an output's memory keeps that output apart.
    assert len(step.in_place) >= len(step.names), step.in_place
    def addresses():  # the step's inputs 0..: the parameters, then the state
        tensors = [step.params[n] for n in step.names] + [t for g in step.state for t in g]
        return [t.data_ptr() for t in tensors]

    before = addresses()
    for _ in range(3):
        step(x, y)
    after = addresses()
    for _, i in step.in_place:
        assert after[i] == before[i], f"input {i} was given a new tensor, not written over"


def test_a_step_with_unconverted_ops_is_refused_naming_them():
    class WithCumprod(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(6, 3)

        def forward(self, x):
            return self.linear(torch.cumprod(x, dim=1))

    step = kiln.compile_train_step(WithCumprod(), F.cross_entropy, optimizer="sgd", lr=0.1)
    with pytest.raises(kiln.CompileError, match="cumprod"):
        step(torch.randn(4, 6), torch.randint(0, 3, (4,)))


def test_a_model_that_updates_buffers_in_place_is_refused():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(),
                          nn.Linear(4 * 6 * 6, 3))
    step = kiln.compile_train_step(model, F.cross_entropy, optimizer="sgd", lr=0.1)
    with pytest.raises(kiln.CompileError, match="batch norm's running statistics"):
        step(torch.randn(2, 3, 8, 8), torch.tensor([0, 1]))


def test_a_batch_of_another_shape_is_refused_not_misread():
    # The step is compiled for its first batch's shapes; the user's next tensors are checked
    # against them (a ragged last batch must not be read past its end).
    step = kiln.compile_train_step(make_mlp(), F.cross_entropy, lr=1e-2)
    step(torch.randn(8, 16), torch.randint(0, 5, (8,)))
    with pytest.raises(ValueError, match="shape differs"):
        step(torch.randn(5, 16), torch.randint(0, 5, (5,)))


def test_an_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="adamw"):
        kiln.compile_train_step(make_mlp(), F.cross_entropy, optimizer="lamb")


def test_a_step_with_dropout_draws_new_masks_that_manual_seed_repeats():
    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 5))

    x, y = torch.randn(8, 16), torch.randint(0, 5, (8,))
    runs = []
    for seed in (3, 3, 4):
        m = model()
        step = kiln.compile_train_step(m, F.cross_entropy, optimizer="sgd", lr=0.1)
        torch.manual_seed(seed)
        losses = [step(x, y).item() for _ in range(3)]
        runs.append((losses, [p.detach().clone() for p in m.parameters()]))
    assert len(set(runs[0][0])) == 3  # each step its own mask (and its own weights)
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))
    assert runs[0][0][0] != runs[2][0][0]
