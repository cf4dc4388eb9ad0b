"""Shapes that change, as training loops change them: torch.compile's default (dynamic=None)
traces a graph with symbolic dimensions once a second size arrives, and Kiln compiles it for
each concrete shape it is called with (backend.ShapeSpecialized). Every graph runs in Kiln,
training matches eager step by step, and a shape seen before is served from the graphs kept
for it, without compiling again."""

import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from conftest import assert_close


class CausalAttention(nn.Module):
    """A GPT-style block: layer norm, causal scaled-dot-product attention over heads whose
    views take the batch and sequence sizes from the input, a residual, a mean-pooled head."""

    def __init__(self, dim=32, heads=4, classes=5):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(self.norm(x)).split(d, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return self.head(x.mean(dim=1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 5))

    def forward(self, x):
        return self.layers(x)


def train_side_by_side(model, shapes, make_batch):
    """Trains `model` under Kiln's backend (torch.compile's default dynamic=None) and a copy
    eagerly, one SGD step per shape of `shapes`; asserts the losses and parameters agree at
    every step, and returns the report, the seconds of each compiled step and the number of
    shape compilations made by the end of each."""
    torch.manual_seed(0)
    eager = type(model)()
    eager.load_state_dict(model.state_dict())
    report = kiln.Report()
    compiled = torch.compile(model, backend=kiln.make_backend(report))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    eager_optimizer = torch.optim.SGD(eager.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    seconds, compilations = [], []
    for step, shape in enumerate(shapes):
        x, labels = make_batch(shape, g)
        start = time.perf_counter()
        loss = F.cross_entropy(compiled(x), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        seconds.append(time.perf_counter() - start)
        compilations.append(len(report.specializations))
        expected = F.cross_entropy(eager(x), labels)
        expected.backward()
        eager_optimizer.step()
        eager_optimizer.zero_grad()
        assert_close(loss.detach(), expected.detach(), rtol=1e-4, what=f"loss at step {step}")
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            assert_close(p.detach(), q.detach(), rtol=1e-4, atol=1e-6,
                         what=f"{name} after step {step} ({shape})")
    return report, seconds, compilations


def assert_each_shape_compiled_once(report):
    """No graph of symbolic dimensions was compiled twice for the same shapes."""
    seen = {}
    for name, shapes, _ in report.specializations:
        graph = name.rsplit(".", 1)[0]
        assert shapes not in seen.setdefault(graph, set()), f"{graph} compiled again for {shapes}"
        seen[graph].add(shapes)


def test_batch_and_sequence_lengths_that_change_every_step():
    # Four shapes, three times over. Dynamo traces the first statically, then symbolic graphs
    # as the batch and then the sequence length change; Kiln compiles those per shape.
    rounds = 3
    shapes = [(4, 16), (3, 16), (4, 12), (2, 9)] * rounds
    report, seconds, compilations = train_side_by_side(
        CausalAttention(), shapes,
        lambda shape, g: (torch.randn(*shape, 32, generator=g),
                          torch.randint(0, 5, (shape[0],), generator=g)))
    assert not report.fallbacks, report.fallbacks
    assert report.specializations, report.text()
    assert "compilation(s) for new shapes" in report.text()
    assert_each_shape_compiled_once(report)
    # By the last round every shape has its graphs: each step runs them at once.
    last_round = seconds[-len(shapes) // rounds:]
    assert max(last_round) < 1.0, seconds
    before_last_round = compilations[-len(shapes) // rounds - 1]
    assert compilations[-1] == before_last_round, "the last round compiled a shape again"


def test_a_ragged_last_batch():
    shapes = [(8,), (8,), (5,), (8,), (5,)]
    report, _, _ = train_side_by_side(
        MLP(), shapes,
        lambda shape, g: (torch.randn(*shape, 32, generator=g),
                          torch.randint(0, 5, shape, generator=g)))
    assert not report.fallbacks, report.fallbacks
    assert report.specializations, report.text()
    assert_each_shape_compiled_once(report)


def test_explain_over_several_shapes_reports_each_compilation_and_its_time():
    model = MLP()
    first = torch.randn(8, 32)
    text = kiln.explain(model, first, more_inputs=[(torch.randn(5, 32),), (torch.randn(3, 32),)])
    assert "== Kiln graph" in text, text
    assert "compilation(s) for new shapes" in text, text
    # One line per compilation: the graph, the shapes it was called with, its seconds.
    assert "for 5x32" in text and "for 3x32" in text, text
    assert all(p.grad is None for p in model.parameters()), "the model itself was not run"
    # One shape alone: no symbolic graph, nothing compiled again.
    assert "new shapes" not in kiln.explain(model, first)
