"""Dropout in Kiln: its masks come from Kiln's counter-based RNG, not PyTorch's, so they are
checked by what a mask must be. The output is the input times the mask over 1 - p; about 1 - p
of the elements are kept; the gradient goes through the same mask; every run draws a new mask
from torch's generator, so torch.manual_seed repeats a run; two dropouts in one graph draw
different masks."""

import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

import kiln
from conftest import kiln_compile
from kiln.backend import KilnGraph

aten = torch.ops.aten


def compiled_dropout(p, shape, count=1):
    """A Kiln graph of `count` native_dropouts of one input, returning each (output, mask)."""
    def fn(x):
        return tuple(t for _ in range(count) for t in aten.native_dropout(x, p, True))
    x = torch.randn(*shape)
    graph = KilnGraph(make_fx(fn, tracing_mode="fake")(x), "dropout")
    assert graph.compiled.takes_rng_seed
    return graph, x


def test_the_output_is_the_input_times_the_mask_over_the_keep_probability():
    graph, x = compiled_dropout(0.3, (64, 256))
    out, mask = graph(x)
    assert mask.dtype == torch.bool and out.dtype == x.dtype
    torch.testing.assert_close(out, x * mask * (1 / 0.7), rtol=0, atol=0)
    kept = mask.float().mean().item()
    assert abs(kept - 0.7) < 0.02, f"kept {kept} of the elements, not about 0.7"


def test_each_run_draws_a_new_mask_and_manual_seed_repeats_them():
    graph, x = compiled_dropout(0.5, (16, 32))
    torch.manual_seed(7)
    first = [graph(x)[1] for _ in range(2)]
    torch.manual_seed(7)
    again = [graph(x)[1] for _ in range(2)]
    assert not torch.equal(first[0], first[1])
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


def test_two_dropouts_in_one_graph_draw_different_masks():
    graph, x = compiled_dropout(0.5, (16, 32), count=2)
    _, mask1, _, mask2 = graph(x)
    assert not torch.equal(mask1, mask2)


def test_certain_and_no_dropping():
    x = torch.randn(4, 8)
    for p, kept in ((0.0, True), (1.0, False)):
        gm = make_fx(lambda t: aten.native_dropout(t, p, True), tracing_mode="fake")(x)
        graph = KilnGraph(gm, "dropout")
        assert not graph.compiled.takes_rng_seed  # nothing to draw
        out, mask = graph(x)
        assert torch.equal(mask, torch.full_like(mask, kept))
        torch.testing.assert_close(out, x if kept else torch.zeros_like(x))


class ScaledDropout(nn.Module):
    """y = dropout(x * w): y shows the mask (x has no zeros), and w's gradient goes through it."""

    def __init__(self, p):
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, 64))
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.drop(x * self.w)


def test_under_the_backend_the_gradient_goes_through_the_forward_mask():
    torch.manual_seed(0)
    model = ScaledDropout(0.25)
    compiled, report = kiln_compile(model)
    x = torch.randn(8, 64)
    y = compiled(x)
    y.sum().backward()
    assert report.fallbacks == [] and len(report.graphs) == 2
    mask = y != 0
    assert 0 < mask.float().mean().item() < 1
    torch.testing.assert_close(y, x * model.w.detach() * mask / 0.75)
    torch.testing.assert_close(model.w.grad, (x * mask / 0.75).sum(0))
    assert not torch.equal(compiled(x) != 0, mask), "a second run drew the same mask"
    model.eval()  # dropout is then the identity, as eagerly
    torch.testing.assert_close(compiled(x), model(x))
