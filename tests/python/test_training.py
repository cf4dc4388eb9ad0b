"""Models written as ordinary nn.Modules train under torch.compile(backend="kiln") as they do
eagerly: from the same weights, on the same batches, the losses agree within 1e-4 relative and
each parameter's change within 5e-4 relative (of its largest change). On the CPU, and on the
GPU where the machine has one (Kiln's CUDA kernels against PyTorch's, both in strict fp32)."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from conftest import assert_trained_alike, kiln_compile

STEPS = 4
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no GPU"))]


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(),
                                    nn.Linear(32, 5))

    def forward(self, x):
        return self.layers(x)


class TinyEncoder(nn.Module):
    """A BERT-style encoder block written by hand: attention with softmax, layer norms, GELU."""

    def __init__(self, dim=32, heads=4, vocab=50, classes=5):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.norm2 = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        x = self.embed(tokens)
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        attended = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = self.norm1(x + self.proj(attended))
        x = self.norm2(x + self.ffn(x))
        return self.head(x.mean(dim=1))


class SmallCNN(nn.Module):
    """Convolutions with batch norm (training mode, running statistics updated) and ReLU."""

    def __init__(self, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)) + x[:, :, ::2, ::2])
        return self.head(x.mean(dim=(2, 3)))


class TinyViT(nn.Module):
    """Patches by a strided convolution, a position embedding, scaled-dot-product attention."""

    def __init__(self, dim=32, heads=4, classes=5):
        super().__init__()
        self.heads = heads
        self.patches = nn.Conv2d(3, dim, 4, stride=4)
        self.position = nn.Parameter(torch.randn(9, dim) * 0.1)
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(approximate="tanh"),
                                 nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, images):
        x = self.patches(images).flatten(2).transpose(1, 2) + self.position
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
                   for t in self.qkv(self.norm1(x)).chunk(3, dim=-1))
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, d))
        x = x + self.mlp(self.norm2(x))
        return self.head(x.mean(dim=1))


class XmlCnn(nn.Module):
    """A text CNN with dynamic max pooling over chunks of the sequence, as XML-CNN."""

    def __init__(self, vocab=50, dim=16, filters=8, classes=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.convs = nn.ModuleList([nn.Conv1d(dim, filters, k, padding=k // 2) for k in (2, 3)])
        self.out = nn.Linear(2 * filters * 2, classes)

    def forward(self, tokens):
        x = self.embed(tokens).transpose(1, 2)
        pooled = [F.relu(conv(x))[:, :, :12].reshape(x.shape[0], -1, 2, 6).amax(dim=3).flatten(1)
                  for conv in self.convs]
        return self.out(torch.cat(pooled, dim=1))


class MessagePassingGCN(nn.Module):
    """Two graph convolutions over an edge list, as PyTorch Geometric writes them (gather the
    source rows, scale, add into the target rows); one prediction per graph of 6 nodes."""

    def __init__(self, features=16, hidden=16, classes=5):
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.register_buffer("sources", torch.randint(0, 48, (96,), generator=g), False)
        self.register_buffer("targets", torch.randint(0, 48, (96,), generator=g), False)
        self.w1 = nn.Linear(features, hidden)
        self.w2 = nn.Linear(hidden, classes)

    def propagate(self, x):
        messages = x.index_select(0, self.sources) * 0.5
        return x + torch.zeros_like(x).index_add(0, self.targets, messages)

    def forward(self, x):
        h = self.propagate(self.w2(F.relu(self.propagate(self.w1(x)))))
        return h.view(8, 6, -1).mean(dim=1)


def batches(model_name, count):
    g = torch.Generator().manual_seed(1)
    for _ in range(count):
        labels = torch.randint(0, 5, (8,), generator=g)
        if model_name == "mlp":
            yield torch.randn(8, 16, generator=g), labels
        elif model_name in ("encoder", "xml-cnn"):
            yield torch.randint(0, 50, (8, 12), generator=g), labels
        elif model_name == "vit":
            yield torch.randn(8, 3, 12, 12, generator=g), labels
        elif model_name == "gcn":
            yield torch.randn(48, 16, generator=g), labels
        else:
            yield torch.randn(8, 3, 12, 12, generator=g), labels


def train(model, forward, model_name, device="cpu"):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for inputs, labels in batches(model_name, STEPS):
        optimizer.zero_grad()
        loss = F.cross_entropy(forward(inputs.to(device)), labels.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("model_name,make", [
    ("mlp", MLP), ("encoder", TinyEncoder), ("vit", TinyViT), ("cnn", SmallCNN),
    ("xml-cnn", XmlCnn), ("gcn", MessagePassingGCN)])
@pytest.mark.parametrize("device", DEVICES)
def test_training_matches_eager(model_name, make, device, monkeypatch):
    # cuDNN's convolutions would otherwise round their operands to TF32.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    torch.manual_seed(0)
    eager = make().to(device)
    under_kiln = copy.deepcopy(eager)
    start = {name: p.detach().clone() for name, p in eager.named_parameters()}
    compiled, report = kiln_compile(under_kiln)

    eager_losses = train(eager, eager, model_name, device)
    kiln_losses = train(under_kiln, compiled, model_name, device)

    assert_trained_alike(kiln_losses, eager_losses, under_kiln, eager, start)
    for name, buffer in eager.named_buffers():
        assert torch.allclose(dict(under_kiln.named_buffers())[name], buffer, rtol=1e-4,
                              atol=1e-6), f"buffer {name} differs"
    assert len(report.graphs) >= 2, "Kiln compiled neither the forward nor the backward"
    assert not report.fallbacks, f"left to PyTorch: {report.fallbacks}"
    compiled_for = "cuda:0" if device == "cuda" else device
    assert {graph.compiled.device for graph in report.graphs} == {compiled_for}


def test_an_unsupported_op_falls_back_with_a_warning_and_stays_right():
    def fn(x):
        return torch.cumprod(x, dim=1).relu() * 2  # cumprod: not converted by Kiln

    report = kiln.Report()
    compiled = torch.compile(fn, backend=kiln.make_backend(report), dynamic=False)
    x = torch.randn(3, 6)
    with pytest.warns(UserWarning, match="cumprod"):
        result = compiled(x)
    assert torch.allclose(result, fn(x), rtol=1e-5, atol=1e-6)
    assert any("cumprod" in reason for _, reason in report.fallbacks)
    assert report.graphs, "the ops around cumprod were not compiled by Kiln"


class SparseGCN(nn.Module):
    """Two graph convolutions by torch.sparse.mm over a sparse adjacency, as a user writes one
    without PyTorch Geometric."""

    def __init__(self, features=16, hidden=16, classes=5):
        super().__init__()
        g = torch.Generator().manual_seed(2)
        edges = torch.randint(0, 48, (2, 96), generator=g)
        self.adjacency = torch.sparse_coo_tensor(edges, torch.full((96,), 0.5), (48, 48))
        self.w1 = nn.Linear(features, hidden)
        self.w2 = nn.Linear(hidden, classes)

    def forward(self, x):
        h = F.relu(torch.sparse.mm(self.adjacency, self.w1(x)))
        return torch.sparse.mm(self.adjacency, self.w2(h)).view(8, 6, -1).mean(dim=1)


def test_a_gcn_with_torch_sparse_trains_right_in_pytorch():
    """Dynamo captures no graph from a frame that touches a sparse tensor (under every backend):
    the model runs eagerly, nothing is handed to Kiln, and training stays right."""
    torch.manual_seed(0)
    eager = SparseGCN()
    under_kiln = copy.deepcopy(eager)
    compiled, report = kiln_compile(under_kiln)
    assert train(under_kiln, compiled, "gcn") == train(eager, eager, "gcn")
    assert report.graphs == []


def test_the_backend_is_registered_by_name():
    compiled = torch.compile(lambda x: torch.relu(x) + 1, backend="kiln", dynamic=False)
    x = torch.randn(4, 4)
    assert torch.allclose(compiled(x), torch.relu(x) + 1)


def test_explain_names_the_kernels_and_the_fallbacks():
    with pytest.warns(UserWarning, match="cumprod"):
        text = kiln.explain(lambda x: torch.cumprod(torch.relu(x) * 2, dim=0).exp(),
                            torch.randn(4, 4))
    assert "Kiln graph" in text
    assert "cumprod" in text


def test_explain_gives_the_backward_graphs_and_leaves_the_model_as_it_was():
    model = SmallCNN()
    before = {name: t.clone() for name, t in model.state_dict().items()}
    x = torch.randn(2, 3, 8, 8)
    text = kiln.explain(model, x)
    assert "Kiln graph forward" in text and "Kiln graph backward" in text
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(t, before[name]) for name, t in model.state_dict().items())
    assert "Kiln graph backward" not in kiln.explain(model, x, backward=False)


def test_a_graph_compiled_again_comes_from_the_compilation_cache():
    def fn(x, w):
        return torch.tanh(x @ w).sum(dim=1)

    x, w = torch.randn(6, 5), torch.randn(5, 7)
    results = []
    for _ in range(2):
        torch._dynamo.reset()
        compiled, report = kiln_compile(fn)
        results.append(compiled(x, w))
    assert torch.equal(results[0], results[1])
    assert report.graphs[0].compiled.from_cache


def test_a_kiln_output_that_pytorch_reads_has_the_strides_pytorch_traced():
    """Kiln writes row-major; before an op left to PyTorch, an input traced with other strides
    (a transpose Kiln computed) is copied into them, and only there."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from kiln.backend import compile_graph, with_traced_strides

    def fn(x):
        return torch.cumprod((x * 2).t(), dim=0), (x * 3).t() + 1

    x = torch.randn(5, 7)
    with pytest.warns(UserWarning, match="cumprod"):
        fused = compile_graph(make_fx(fn, tracing_mode="fake")(x), [x], "strides")
    restrided = [n for n in fused.graph.nodes if n.target is with_traced_strides]
    assert len(restrided) == 1 and restrided[0].args[1] == (1, 7)
    for actual, expected in zip(fused(x), fn(x)):
        torch.testing.assert_close(actual, expected)


def test_attention_on_a_gpu_is_traced_in_the_math_form_kiln_converts():
    """PyTorch's fused CUDA attention kernels are ops Kiln does not convert; for a GPU graph the
    backend traces the math form instead. Under that choice on the CPU, the same attention
    trains with nothing left to PyTorch."""
    from kiln.backend import attention_kernels_for

    def fn(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    q, k, v = (torch.randn(2, 3, 8, 4, requires_grad=True) for _ in range(3))
    compiled, report = kiln_compile(fn)
    with attention_kernels_for(torch.device("cuda")):
        out = compiled(q, k, v)
        out.backward(torch.ones_like(out))
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    expected = fn(q, k, v)
    expected.backward(torch.ones_like(expected))
    torch.testing.assert_close(out, expected)
    for grad, t in zip(grads, (q, k, v)):
        torch.testing.assert_close(grad, t.grad)
    assert not report.fallbacks, f"left to PyTorch: {report.fallbacks}"
    assert len(report.graphs) == 2
    assert not any("attention" in graph.graph_json for graph in report.graphs)


class SqueezeExcite(nn.Module):
    """A convolution with batch norm and a squeeze-and-excite gate, as a user writes one."""

    def __init__(self, channels=48, classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.norm = nn.BatchNorm2d(channels)
        self.squeeze = nn.Linear(channels, channels // 4)
        self.excite = nn.Linear(channels // 4, channels)
        self.head = nn.Linear(channels, classes)

    def forward(self, x):
        h = F.relu(self.norm(self.conv(x)))
        gate = torch.sigmoid(self.excite(F.relu(self.squeeze(h.mean((2, 3))))))
        return self.head((h * gate[:, :, None, None]).mean((2, 3)))


def test_a_batch_norm_under_bf16_autocast_trains_as_eagerly():
    """PyTorch traces batch norm's saved statistics as bf16 under autocast and computes them in
    f32 on the CPU; the Kiln graph of the backward reads them in the dtype it was compiled for."""
    torch.manual_seed(0)
    eager = SqueezeExcite()
    under_kiln = copy.deepcopy(eager)
    compiled, report = kiln_compile(under_kiln)
    x, labels = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    losses = {}
    for name, model, forward in (("eager", eager, eager), ("kiln", under_kiln, compiled)):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        losses[name] = []
        for _ in range(3):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(forward(x), labels)
            loss.backward()
            optimizer.step()
            losses[name].append(loss.item())
    for step, (k, e) in enumerate(zip(losses["kiln"], losses["eager"])):
        assert abs(k - e) <= 1e-2 * abs(e), f"step {step}: loss {k} under Kiln, {e} eager"
    assert report.graphs, "Kiln compiled none of the step"
