#!/usr/bin/env python3
"""Kiln's torch.compile backend against PyTorch eager and Inductor: training steps of the five
architectures written as ordinary nn.Modules, on this CPU or (--device cuda) on cuda:0.

Each model trains from the same weights on the same batches three ways: eagerly, under
torch.compile's default backend (Inductor) and under backend="kiln". A step is forward, loss,
backward and an SGD update (the optimizer runs eagerly in all three). The first step's time,
which holds the compilation, is reported apart; the others are timed in rounds of turns (one
step of each way per turn), so that a slower moment slows all three, and medians are given.
Before timing, the three ways' first losses must agree within 1e-4 relative. On the GPU every
way computes in strict fp32 (cuDNN's TF32 off), as Kiln does, and a step ends when its loss is
read back.

Run from the Python package's environment (make python):
  .venv/bin/python bench/peers/bench_backend.py [--models bert,resnet] [--steps 20] [--device cuda]
Writes bench/results/backend.md, or backend-gpu.md for the GPU (and prints it).
"""

import argparse
import copy
import os
import statistics
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln


class EncoderLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(d, dim=-1))
        attended = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, d)
        x = self.norm1(x + self.proj(attended))
        return self.norm2(x + self.ffn(x))


class Bert(nn.Module):
    def __init__(self, vocab=2000, dim=256, heads=4, layers=2, seq=128, classes=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.layers = nn.Sequential(*[EncoderLayer(dim, heads) for _ in range(layers)])
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        return self.head(self.layers(self.embed(tokens) + self.position)[:, 0])


class ViT(nn.Module):
    def __init__(self, image=64, patch=8, dim=192, heads=3, layers=2, classes=10):
        super().__init__()
        self.patches = nn.Conv2d(3, dim, patch, stride=patch)
        self.position = nn.Parameter(torch.randn((image // patch) ** 2, dim) * 0.02)
        self.layers = nn.Sequential(*[EncoderLayer(dim, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, images):
        x = self.patches(images).flatten(2).transpose(1, 2) + self.position
        return self.head(self.norm(self.layers(x)).mean(dim=1))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                   nn.BatchNorm2d(cout)) if stride != 1 or cin != cout else None)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 7, 2, 3, bias=False), nn.BatchNorm2d(32),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(BasicBlock(32, 32, 1), BasicBlock(32, 64, 2),
                                    BasicBlock(64, 128, 2))
        self.head = nn.Linear(128, classes)

    def forward(self, images):
        return self.head(F.adaptive_avg_pool2d(self.blocks(self.stem(images)), 1).flatten(1))


class XmlCnn(nn.Module):
    """Kim's text CNN with dynamic max pooling, as XML-CNN: multi-label, trained with BCE."""

    def __init__(self, vocab=5000, dim=128, filters=64, labels=1000, chunks=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.convs = nn.ModuleList([nn.Conv1d(dim, filters, k, padding=k // 2) for k in (2, 4, 8)])
        self.chunks = chunks
        self.bottleneck = nn.Linear(3 * filters * chunks, 256)
        self.out = nn.Linear(256, labels)

    def forward(self, tokens):
        x = self.embed(tokens).transpose(1, 2)
        pooled = []
        for conv in self.convs:
            h = F.relu(conv(x))
            length = h.shape[2] // self.chunks * self.chunks
            pooled.append(h[:, :, :length].reshape(h.shape[0], h.shape[1], self.chunks, -1)
                          .amax(dim=3).flatten(1))
        return self.out(F.relu(self.bottleneck(torch.cat(pooled, dim=1))))


class Gcn(nn.Module):
    """Two graph convolutions by message passing over an edge list, as PyTorch Geometric writes
    them: each edge's message is its source row scaled by the symmetric normalization, summed
    into its target row (index_select, then index_add). Dynamo does not capture torch.sparse,
    so a GCN written with torch.sparse.mm runs eagerly under every backend."""

    def __init__(self, sources, targets, norm, features=256, hidden=64, classes=8):
        super().__init__()
        self.register_buffer("sources", sources, False)
        self.register_buffer("targets", targets, False)
        self.register_buffer("norm", norm, False)
        self.w1 = nn.Linear(features, hidden)
        self.w2 = nn.Linear(hidden, classes)

    def propagate(self, x):
        messages = x.index_select(0, self.sources) * self.norm.unsqueeze(1)
        return torch.zeros_like(x).index_add(0, self.targets, messages)

    def forward(self, x):
        return self.propagate(self.w2(F.relu(self.propagate(self.w1(x)))))


def normalized_edges(nodes, degree, generator):
    """Random undirected edges with self loops; each edge's 1/sqrt(deg(s) deg(t))."""
    rows = torch.arange(nodes).repeat_interleave(degree)
    cols = torch.randint(0, nodes, (nodes * degree,), generator=generator)
    loops = torch.arange(nodes)
    sources = torch.cat([rows, cols, loops])
    targets = torch.cat([cols, rows, loops])
    degrees = torch.zeros(nodes).index_add(0, targets, torch.ones(targets.shape[0]))
    norm = degrees[sources].rsqrt() * degrees[targets].rsqrt()
    return sources, targets, norm


def make_case(name, generator):
    """(model, batches(step) -> (inputs, targets), loss function)."""
    cross_entropy = F.cross_entropy
    if name == "bert":
        def batch(_):
            return (torch.randint(0, 2000, (8, 128), generator=generator),
                    torch.randint(0, 8, (8,), generator=generator))
        return Bert(), batch, cross_entropy
    if name == "vit":
        def batch(_):
            return (torch.randn(8, 3, 64, 64, generator=generator),
                    torch.randint(0, 10, (8,), generator=generator))
        return ViT(), batch, cross_entropy
    if name == "resnet":
        def batch(_):
            return (torch.randn(8, 3, 64, 64, generator=generator),
                    torch.randint(0, 10, (8,), generator=generator))
        return ResNet(), batch, cross_entropy
    if name == "xml-cnn":
        def batch(_):
            return (torch.randint(0, 5000, (8, 256), generator=generator),
                    (torch.rand(8, 1000, generator=generator) < 0.01).float())
        return XmlCnn(), batch, F.binary_cross_entropy_with_logits
    if name == "gcn":
        nodes = 2048
        features = torch.randn(nodes, 256, generator=generator)
        labels = torch.randint(0, 8, (nodes,), generator=generator)
        model = Gcn(*normalized_edges(nodes, 4, generator))
        return model, lambda _: (features, labels), cross_entropy
    raise ValueError(f"unknown model {name}")


MODELS = ["bert", "vit", "resnet", "xml-cnn", "gcn"]


class Runner:
    """One way of running the model: its own copy of the weights and optimizer."""

    def __init__(self, model, forward, loss_fn):
        self.model = model
        self.forward = forward
        self.loss_fn = loss_fn
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(self, inputs, targets):
        start = time.perf_counter()
        self.optimizer.zero_grad()
        loss = self.loss_fn(self.forward(inputs), targets)
        loss.backward()
        self.optimizer.step()
        return loss.item(), time.perf_counter() - start


def bench_model(name, steps, rounds, device):
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model, batch, loss_fn = make_case(name, generator)
    model.to(device)
    batches = [tuple(t.to(device) for t in batch(i)) for i in range(steps)]
    torch._dynamo.reset()
    ways = {}
    for way in ["eager", "inductor", "kiln"]:
        copy_of = copy.deepcopy(model)
        forward = copy_of
        if way == "inductor":
            forward = torch.compile(copy_of, dynamic=False)
        elif way == "kiln":
            report = kiln.Report()
            forward = torch.compile(copy_of, backend=kiln.make_backend(report), dynamic=False)
        ways[way] = Runner(copy_of, forward, loss_fn)
    first = {}
    first_loss = {}
    for way, runner in ways.items():
        first_loss[way], first[way] = runner.step(*batches[0])
    for way, loss in first_loss.items():
        assert abs(loss - first_loss["eager"]) <= 1e-4 * abs(first_loss["eager"]), (
            f"{name}: first loss {loss} under {way}, {first_loss['eager']} eagerly")
    times = {way: [] for way in ways}
    for _ in range(rounds):
        for inputs, targets in batches[1:]:
            for way, runner in ways.items():
                times[way].append(runner.step(inputs, targets)[1])
    medians = {way: statistics.median(t) * 1e3 for way, t in times.items()}
    fallbacks = sorted({reason.split(":")[0] for _, reason in report.fallbacks})
    if not report.graphs and not fallbacks:
        fallbacks = ["everything: Dynamo captured no graph"]
    return medians, first, len(report.graphs), fallbacks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--steps", type=int, default=6, help="batches per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--output", help="default: bench/results/backend.md, or backend-gpu.md")
    args = parser.parse_args()
    results = os.path.join(os.path.dirname(__file__), "..", "results")
    output = args.output or os.path.join(
        results, "backend-gpu.md" if args.device == "cuda" else "backend.md")
    warnings.simplefilter("ignore")
    if args.device == "cuda":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        machine = f"GPU {torch.cuda.get_device_name(0)}, strict fp32"
    else:
        machine = f"CPU, {torch.get_num_threads()} threads"
    lines = [
        "# Kiln's torch.compile backend against eager and Inductor: training steps",
        "",
        f"{machine}, torch {torch.__version__}, kiln {kiln.__version__}; "
        f"medians of {args.rounds} rounds x {args.steps - 1} steps after a first step "
        "(which compiles); ms per step (forward, loss, backward, SGD update).",
        "",
        "| model | eager | Inductor | Kiln | Kiln vs eager | Kiln vs Inductor | first step "
        "(compile) eager / Inductor / Kiln, s | Kiln graphs | left to PyTorch |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for name in args.models.split(","):
        try:
            medians, first, graphs, fallbacks = bench_model(name, args.steps, args.rounds,
                                                            args.device)
        except AssertionError as disagreement:  # not timed: the other models still are
            lines.append(f"| {name} | not timed: {disagreement} |")
            print(lines[-1], flush=True)
            continue
        lines.append(
            f"| {name} | {medians['eager']:.2f} | {medians['inductor']:.2f} | "
            f"{medians['kiln']:.2f} | {medians['eager'] / medians['kiln']:.2f}x | "
            f"{medians['inductor'] / medians['kiln']:.2f}x | {first['eager']:.2f} / "
            f"{first['inductor']:.1f} / {first['kiln']:.1f} | {graphs} | "
            f"{', '.join(fallbacks) or 'nothing'} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with open(output, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
