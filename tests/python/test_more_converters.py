"""The ATen ops that real models produce beyond the basic set (issue 51, part 3): log1p,
expm1, elu; advanced indexing (index.Tensor, index_put, index_add, scatter_add, scatter.src);
cumsum, flip, triu_indices; upsampling (decomposed by AOTAutograd into indexing); transposed
convolutions. Each small model trains under Kiln as it does eagerly, with nothing left to
PyTorch; the edge cases of each converter are checked against PyTorch on their own."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from conftest import assert_close, assert_trained_alike, kiln_compile
from kiln.backend import KilnGraph

aten = torch.ops.aten
STEPS = 4


class Activations(nn.Module):
    """elu, selu and celu (elu with other constants, celu decomposed through expm1), log1p."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 32)
        self.c = nn.Linear(32, 5)

    def forward(self, x):
        h = F.elu(self.a(x), alpha=0.7) + F.selu(self.a(x)) * 0.5
        h = F.celu(self.b(h), alpha=1.3) + torch.log1p(h.abs()) - torch.expm1(h * 0.1)
        return self.c(h)


class MessagePassing(nn.Module):
    """Message passing over an edge list as users write it: h[src] (index.Tensor), messages
    added into the targets by index_add, scatter_add and index_put with accumulate; one
    prediction per graph of 6 nodes."""

    def __init__(self, features=16, hidden=16, classes=5):
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.register_buffer("src", torch.randint(0, 48, (96,), generator=g), False)
        self.register_buffer("dst", torch.randint(0, 48, (96,), generator=g), False)
        self.w1 = nn.Linear(features, hidden)
        self.w2 = nn.Linear(hidden, hidden)
        self.w3 = nn.Linear(hidden, classes)

    def forward(self, x):
        h = self.w1(x)
        h = h + torch.zeros_like(h).index_add(0, self.dst, h[self.src], alpha=0.5)
        h = F.relu(self.w2(h))
        messages = h[self.src] * 0.5
        spread = self.dst[:, None].expand(-1, h.shape[1])
        h = h + torch.zeros_like(h).scatter_add(0, spread, messages)
        h = self.w3(h)
        h = h.index_put((self.dst,), h[self.src] * 0.25, accumulate=True)
        return h.view(8, 6, -1).mean(dim=1)


class Gathers(nn.Module):
    """Indexing with several index tensors and None entries (h[:, idx], h[rows, cols],
    h[rows, :, cols]), writes without accumulation (index_put, scatter.src), unique indices."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 24)
        self.head = nn.Linear(20, 5)
        self.register_buffer("columns", torch.tensor([3, 0, 7, 10, -1, 12, 2, 5]), False)
        self.register_buffer("rows", torch.tensor([[0], [5], [-2]]), False)
        self.register_buffer("depth", torch.tensor([3, 0, -1]), False)
        self.register_buffer("order", torch.randperm(24, generator=torch.Generator().manual_seed(3))
                             .view(1, 24).expand(8, 24), False)

    def forward(self, x):
        h = self.a(x)                                                    # [8, 24]
        picked = h[:, self.columns]                                      # [8, 8]
        pairs = h[self.rows, self.columns].flatten().view(4, 6)          # [3, 8] -> [4, 6]
        cube = h.view(8, 4, 6)
        across = cube[self.rows, :, self.depth]                          # [3, 3, 4]
        shuffled = torch.zeros_like(h).scatter(1, self.order, h)         # a permutation
        written = h.clone()
        written[:, self.columns[:4]] = picked[:, 4:] * 2                 # index_put, unique
        features = torch.cat([picked, shuffled[:, :4] + written[:, :4], pairs.sum(0, True)
                              .expand(8, 6)[:, :2] + across.sum().view(1, 1), written[:, 4:10]],
                             dim=1)
        return self.head(features)


class Scan(nn.Module):
    """cumsum over the features (its gradient flips and sums again), and the upper triangle of
    a feature interaction as DLRM takes it (triu_indices)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 12)
        self.b = nn.Linear(66 + 6, 5)
        self.register_buffer("upper", torch.triu_indices(12, 12, 1), False)

    def forward(self, x):
        h = self.a(x)
        scanned = torch.cumsum(torch.tanh(h), dim=1) / 4
        interaction = scanned[:, :, None] * h[:, None, :]
        upper = interaction[:, self.upper[0], self.upper[1]]
        lower = h[:, torch.tril_indices(4, 4, -1)[1]]
        return self.b(torch.cat([upper, lower], dim=1))


class Upsampling(nn.Module):
    """A small decoder: nearest upsampling by a scale and to a size, bilinear upsampling with and
    without align_corners; AOTAutograd decomposes each into index.Tensor and its gradient into
    index_put with accumulate."""

    def __init__(self, classes=5):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Linear(4 * 3 * 3, classes)

    def forward(self, x):
        h = F.relu(self.a(x))                                               # [8, 4, 6, 6]
        h = F.interpolate(h, scale_factor=2, mode="nearest")                # 12 x 12
        h = F.relu(self.b(h))
        h = F.interpolate(h, size=(7, 5), mode="bilinear", align_corners=False)
        h = h + F.interpolate(h, size=(7, 5), mode="nearest")
        h = F.interpolate(h, size=(9, 9), mode="bilinear", align_corners=True)
        return self.head(h[:, :, ::3, ::3].flatten(1))


class TransposedConv(nn.Module):
    """An upsampling decoder of transposed convolutions: stride 2 with output_padding, grouped,
    dilated, with and without bias."""

    def __init__(self, classes=5):
        super().__init__()
        self.down = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.up1 = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.up2 = nn.ConvTranspose2d(6, 4, 2, stride=1, dilation=2, bias=False)
        self.head = nn.Linear(4, classes)

    def forward(self, x):
        h = F.relu(self.down(x))
        h = F.relu(self.up1(h))
        return self.head(self.up2(h).mean(dim=(2, 3)))


class KMaxPooling(nn.Module):
    """k-max pooling over a sequence (topk's values; their gradient scattered back to the
    indices), and the smallest values too."""

    def __init__(self, classes=5):
        super().__init__()
        self.a = nn.Linear(16, 24)
        self.head = nn.Linear(2 * 8 + 3 + 3, classes)

    def forward(self, x):
        h = self.a(x).view(8, 3, 8)
        top = h.topk(2, dim=1).values.flatten(1)
        bottom = h.topk(3, dim=2, largest=False).values[:, :, 0]
        unsorted = h.topk(3, dim=2, largest=False, sorted=False).values.sum(dim=2)
        return self.head(torch.cat([top, bottom, unsorted], dim=1))


class Bags(nn.Module):
    """EmbeddingBag in sum mode with per-sample weights and in mean mode with a padding index,
    from offsets and from a 2-d input."""

    def __init__(self, classes=5):
        super().__init__()
        self.summed = nn.EmbeddingBag(30, 8, mode="sum")
        self.averaged = nn.EmbeddingBag(30, 8, mode="mean", padding_idx=0)
        self.head = nn.Linear(16, classes)
        self.register_buffer("offsets", torch.tensor([0, 3, 3, 7, 9, 12, 15, 20]), False)

    def forward(self, tokens):
        flat = tokens.flatten()[:24]
        weights = torch.linspace(0.5, 1.5, 24)
        summed = self.summed(flat, self.offsets, per_sample_weights=weights)
        averaged = self.averaged(tokens[:, :5])
        return self.head(torch.cat([summed, averaged], dim=1))


def batches(model_name, count):
    g = torch.Generator().manual_seed(1)
    for _ in range(count):
        labels = torch.randint(0, 5, (8,), generator=g)
        if model_name == "message-passing":
            yield torch.randn(48, 16, generator=g), labels
        elif model_name in ("upsampling", "transposed-conv"):
            yield torch.randn(8, 3, 6, 6, generator=g), labels
        elif model_name == "bags":
            yield torch.randint(0, 30, (8, 12), generator=g), labels
        else:
            yield torch.randn(8, 16, generator=g), labels


def train(model, forward, model_name):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for inputs, labels in batches(model_name, STEPS):
        optimizer.zero_grad()
        loss = F.cross_entropy(forward(inputs), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


MODELS = [("activations", Activations), ("message-passing", MessagePassing),
          ("gathers", Gathers), ("scan", Scan), ("upsampling", Upsampling),
          ("transposed-conv", TransposedConv), ("k-max-pooling", KMaxPooling), ("bags", Bags)]


@pytest.mark.parametrize("model_name,make", MODELS, ids=[m[0] for m in MODELS])
def test_training_matches_eager(model_name, make):
    """As test_training.py: losses within 1e-4 relative, each parameter's change within 5e-4 of
    its largest change, and every graph wholly in Kiln."""
    torch.manual_seed(0)
    eager = make()
    under_kiln = copy.deepcopy(eager)
    start = {name: p.detach().clone() for name, p in eager.named_parameters()}
    compiled, report = kiln_compile(under_kiln)

    eager_losses = train(eager, eager, model_name)
    kiln_losses = train(under_kiln, compiled, model_name)

    assert_trained_alike(kiln_losses, eager_losses, under_kiln, eager, start)
    assert len(report.graphs) >= 2, "Kiln compiled neither the forward nor the backward"
    assert not report.fallbacks, f"left to PyTorch: {report.fallbacks}"


def kiln_call(fn, *inputs):
    """fn's ATen graph (traced without decompositions) compiled by Kiln and run on inputs."""
    graph = make_fx(fn, tracing_mode="fake")(*inputs)
    return KilnGraph(graph, "case")(*inputs)


def test_log1p_and_expm1_are_accurate_near_zero_and_exact_at_the_edges():
    tiny = torch.tensor([1e-30, -1e-30, 1e-12, -1e-10, 3e-8, -6e-8, 1e-7, 1e-5, -1e-4])
    edges = torch.tensor([0.0, -0.0, -1.0, -2.0, float("inf"), float("-inf"), float("nan"),
                          1e30, 3e38, 88.0, 89.0, -17.0, -20.0, -104.0, 0.5, -0.5, 2.0])
    for x in (tiny, edges, torch.linspace(-0.9, 5, 1001)):
        for op in (torch.log1p, torch.expm1):
            expected = op(x)
            actual = kiln_call(lambda t: op(t), x)
            assert torch.equal(actual.isnan(), expected.isnan()), f"{op.__name__}({x})"
            finite = expected.isfinite()
            assert torch.equal(actual[~finite & ~expected.isnan()],
                               expected[~finite & ~expected.isnan()]), f"{op.__name__}({x})"
            # A few ulp, relative to each value (the small ones too).
            relative = ((actual - expected).abs() / expected.abs().clamp_min(1e-38))[finite]
            assert relative.max() <= 4e-7, f"{op.__name__}: {relative.max()} on {x}"
    for op in (torch.log1p, torch.expm1):
        assert kiln_call(lambda t: op(t), torch.tensor([-0.0])).signbit().item(), op.__name__


def test_elu_and_its_backward_match_pytorch_from_the_input_and_from_the_result():
    x = torch.tensor([-3.0, -1e-3, -0.0, 0.0, 2e-3, 1.5, float("nan"), -float("inf")])
    g = torch.randn(8)
    for alpha, scale, input_scale in ((1.0, 1.0, 1.0), (0.7, 1.0507, 1.0), (1.3, 1.0, 1 / 1.3)):
        assert_close(kiln_call(lambda t: aten.elu(t, alpha, scale, input_scale), x)[:6],
                     aten.elu(x, alpha, scale, input_scale)[:6])
        y = aten.elu(x, alpha, scale, input_scale)
        for is_result, v in ((False, x), (True, y)):
            def fn(grad, value):
                return aten.elu_backward(grad, alpha, scale, input_scale, is_result, value)
            assert_close(kiln_call(fn, g, v)[:6], fn(g, v)[:6], what=f"is_result={is_result}")


def test_advanced_indexing_forms_match_pytorch():
    x = torch.randn(4, 5, 6)
    i = torch.tensor([[0, -1, 2], [3, 3, 1]])
    j = torch.tensor([4, 0, -5])
    cases = [
        lambda t, i, j: aten.index.Tensor(t, [i]),                 # dim 0, a 2-d index
        lambda t, i, j: aten.index.Tensor(t, [None, j]),           # dim 1
        lambda t, i, j: aten.index.Tensor(t, [None, None, i]),     # the last dim
        lambda t, i, j: aten.index.Tensor(t, [i, j]),              # consecutive, broadcast
        lambda t, i, j: aten.index.Tensor(t, [None, j, i]),        # consecutive after a dim
        lambda t, i, j: aten.index.Tensor(t, [i, None, j]),        # apart: B goes first
        lambda t, i, j: aten.index.Tensor(t, [i[0, 2], None, j]),  # a 0-d index
    ]
    for k, fn in enumerate(cases):
        assert_close(kiln_call(fn, x, i, j), fn(x, i, j), what=f"case {k}")


def test_index_put_writes_exactly_for_unique_indices_and_the_mean_for_repeats():
    x = torch.randn(5, 4)
    v = torch.tensor([[1.0, -0.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [-0.0, 0.5, 0.25, 8.0]])

    def put(t, idx, values):
        return aten.index_put(t, [idx], values, False)

    unique = torch.tensor([3, 0, -1])
    exact = kiln_call(put, x, unique, v)
    assert torch.equal(exact, put(x, unique, v))
    assert torch.equal(exact.signbit(), put(x, unique, v).signbit())
    repeated = torch.tensor([1, 1, 2])
    same = torch.tensor([[2.5] * 4, [2.5] * 4, [1.0] * 4])
    assert torch.equal(kiln_call(put, x, repeated, same), put(x, repeated, same))
    # Where repeats write different values PyTorch leaves the result unspecified; Kiln writes
    # their mean.
    assert torch.equal(kiln_call(put, x, repeated, v)[1], (v[0] + v[1]) / 2)

    def mark(mask, idx, value):
        return aten.index_put(mask, [idx], value, False)

    args = (torch.tensor([False, True, False, True]), torch.tensor([2, 0, 2]), torch.tensor(True))
    assert torch.equal(kiln_call(mark, *args), mark(*args))

    def accumulate(t, rows, cols, value):
        return aten.index_put(t, [rows, cols], value, True)

    args = (x, torch.tensor([[0], [4], [0]]), torch.tensor([1, 3, 1, -4]), torch.tensor(1.5))
    assert_close(kiln_call(accumulate, *args), accumulate(*args))


def test_scatters_and_index_add_match_pytorch():
    x = torch.randn(4, 6)
    src = torch.randn(4, 5)
    index = torch.tensor([[5, 0, 5], [1, 1, 2], [0, 3, 4]])     # smaller than x and src
    unique = torch.tensor([[5, 0, 2], [1, 4, 2], [0, 3, 1]])
    rows = torch.tensor([3, 0, 3, 1])
    cases = {
        "scatter_add dim 1": lambda t, s, i: aten.scatter_add(t, 1, i, s),
        "scatter_add dim 0": lambda t, s, i: aten.scatter_add(t, 0, i.clamp(max=3), s),
        "scatter.src unique": lambda t, s, i: aten.scatter.src(t, 1, i, s),
        "index_add dim 0": lambda t, s, i: aten.index_add(t, 0, i, aten.cat([s, s], 1)[:, :6],
                                                          alpha=-2),
        "index_add dim 1": lambda t, s, i: aten.index_add(t, 1, i, s[:, :4]),
    }
    for name, fn in cases.items():
        i = unique if "unique" in name else rows if "index_add" in name else index
        assert_close(kiln_call(fn, x, src, i), fn(x, src, i), what=name)


def test_cumsum_flip_and_triangle_indices_match_pytorch():
    x = torch.randn(3, 7, 5)
    for dim in (0, 1, 2, -1):
        assert_close(kiln_call(lambda t: aten.cumsum(t, dim), x), torch.cumsum(x, dim))
    special = torch.tensor([1.0, float("inf"), 2.0, float("-inf"), 3.0, float("nan"), -0.0])
    assert torch.equal(kiln_call(lambda t: aten.cumsum(t, 0), special).isnan(),
                       torch.cumsum(special, 0).isnan())
    assert kiln_call(lambda t: aten.cumsum(t, 0), torch.tensor([-0.0])).signbit().item()
    ints = torch.randint(-5, 5, (4, 9))
    assert torch.equal(kiln_call(lambda t: aten.cumsum(t, 1), ints), torch.cumsum(ints, 1))
    assert torch.equal(kiln_call(lambda t: aten.cumsum(t, 1), ints > 0), torch.cumsum(ints > 0, 1))
    assert torch.equal(kiln_call(lambda t: aten.flip(t, [0, -1]), x), torch.flip(x, [0, -1]))
    def plus_indices(fn, args):
        return lambda t: t + fn(*args)

    zeros = torch.zeros(2, 1, dtype=torch.int64)
    for fn in (torch.triu_indices, torch.tril_indices):
        for args in ((4, 4, 0), (3, 6, 1), (5, 2, -2), (2, 7, 3)):
            case = plus_indices(fn, args)
            assert torch.equal(kiln_call(case, zeros), case(zeros)), f"{fn.__name__}{args}"


def test_transposed_convolutions_and_their_gradients_match_pytorch():
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    cases = [
        dict(weight=torch.randn(4, 3, 3, 3), stride=2, padding=1, output_padding=1),
        dict(weight=torch.randn(4, 2, 3, 3), stride=2, padding=0, output_padding=0, groups=2),
        dict(weight=torch.randn(4, 3, 2, 3), stride=(1, 2), padding=(1, 0), dilation=(2, 1)),
    ]
    for k, case in enumerate(cases):
        weight = case.pop("weight").requires_grad_()
        bias = torch.randn(weight.shape[1] * case.get("groups", 1), requires_grad=True)

        def fn(t, w, b):
            return F.conv_transpose2d(t, w, b, **case)
        compiled, report = kiln_compile(fn)
        expected = fn(x, weight, bias)
        actual = compiled(x, weight, bias)
        assert_close(actual, expected, rtol=1e-5, what=f"case {k}")
        seed = torch.randn_like(expected)
        grads = torch.autograd.grad((expected * seed).sum(), (x, weight, bias))
        kiln_grads = torch.autograd.grad((actual * seed).sum(), (x, weight, bias))
        for name, a, e in zip("xwb", kiln_grads, grads):
            assert_close(a, e, rtol=1e-4, what=f"case {k}: gradient of {name}")
        assert not report.fallbacks, report.fallbacks
        torch._dynamo.reset()


def test_topk_matches_pytorch_with_nans_infinities_and_ties():
    x = torch.tensor([[1.0, float("nan"), 3.0, float("-inf"), 2.0, float("nan"), 0.0],
                      [5.0, 4.0, float("inf"), -1.0, 2.0, 3.0, -2.0]])
    for largest in (True, False):
        for k in (1, 3, 7):
            values, indices = kiln_call(lambda t: aten.topk(t, k, 1, largest), x)
            expected_values, expected_indices = aten.topk(x, k, 1, largest)
            assert torch.equal(values.isnan(), expected_values.isnan())
            assert torch.equal(values.nan_to_num(), expected_values.nan_to_num())
            assert torch.equal(indices[1], expected_indices[1]), f"largest={largest}, k={k}"
    # Among equal values Kiln takes lower indices first (ATen's order is its algorithm's).
    ties = torch.tensor([[2.0, 7.0, 2.0, 7.0, 7.0, 1.0]])
    values, indices = kiln_call(lambda t: aten.topk(t, 4, -1), ties)
    assert values.tolist() == [[7.0, 7.0, 7.0, 2.0]] and indices.tolist() == [[1, 3, 4, 0]]
    values, indices = kiln_call(lambda t: aten.topk(t, 2, 0), torch.randn(5, 3))
    assert values.shape == (2, 3) and indices.dtype == torch.int64


def test_embedding_bag_results_and_gradient_match_pytorch():
    weight = torch.randn(10, 3)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0])
    offsets = torch.tensor([0, 4, 4, 7])
    samples, grad = torch.rand(9), torch.randn(4, 3)
    for mode, padding_idx, with_samples in ((0, -1, False), (0, 4, True), (1, -1, False),
                                            (1, 4, False)):
        def forward(w, i, o, *s):
            return aten._embedding_bag(w, i, o, False, mode, False, s[0] if s else None, False,
                                       padding_idx)

        def backward(g, w, i, o, *s):
            o2b, bag_size, max_indices = forward(w, i, o, *s)[1:]
            return aten._embedding_bag_backward(g, i, o, o2b, bag_size, max_indices, 10, False,
                                                mode, False, s[0] if s else None, padding_idx)

        what = f"mode {mode}, padding {padding_idx}"
        extra = (samples,) if with_samples else ()
        args = (weight, indices, offsets) + extra
        for k, (a, e) in enumerate(zip(kiln_call(forward, *args), forward(*args))):
            assert_close(a, e, what=f"{what}: result {k}")
        args = (grad, weight, indices, offsets) + extra
        assert_close(kiln_call(backward, *args), backward(*args), what=f"{what}: gradient")
    # include_last_offset: the offsets end with the end of the last bag.
    ends = torch.tensor([0, 4, 4, 7, 9])

    def last(w, i, o):
        return aten._embedding_bag(w, i, o, False, 1, False, None, True, -1)[0]

    assert_close(kiln_call(last, weight, indices, ends), last(weight, indices, ends))
