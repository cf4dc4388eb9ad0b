#!/usr/bin/env python3
"""Kiln's torch.compile backend against PyTorch eager and Inductor: training steps of the five
architectures written as ordinary nn.Modules, on this CPU or (--device cuda) on cuda:0.

Each model trains from the same weights on the same batches three ways: eagerly, under
torch.compile's default backend (Inductor) and under backend="kiln". A step is forward, loss,
backward and an SGD update with momentum (the optimizer runs eagerly in all three). The first
step's time, which holds the compilation, is reported apart; the others are timed in rounds of
turns (one step of each way per turn), so that a slower moment slows all three, and medians are
given. On the GPU every way computes in strict fp32 (cuDNN's TF32 off), as Kiln does, and a
step ends when its loss is read back.

Every step, the first and each timed one, is checked against PyTorch eager's, the reference:
under Inductor and under Kiln, the loss, each parameter's gradient, each parameter's update (its
value after the step less its value before), the optimizer's state (SGD's momentum buffers) and
the modules' floating-point buffers (batch norm's running statistics). Each step starts from the
same state: after its check, Inductor's and Kiln's copies take eager's parameters, buffers and
momentum (in place, outside the timed step), so that each step is compared from identical
inputs and the tolerances need not grow with the step number. Without that, three f32 runs
drift apart: over 16 steps of the ResNet, Inductor's gradients came to differ from eager's by
0.84 of their largest element, so that no tolerance could both pass it and catch a wrong
gradient in a later step. The tolerances, and why:
- the loss within 1e-4 relative, and each buffer within 1e-4 in norm (|t - eager's| / |eager's|
  in the L2 norm): these are forward quantities, continuous in the inputs, and differ only by
  the rounding of sums computed in another order (measured on the CPU over 16 steps of each
  model: at most 5e-7 for the loss, 3e-6 for a buffer, under Kiln and under Inductor; 1e-4
  leaves room for the GPU's other convolution algorithms);
- each gradient, update and momentum buffer within 5e-2 in norm. Kiln and Inductor agree with
  eager within about 3e-6 unless a ReLU or max-pool input lies within rounding of its kink: it
  then goes one way in one run and the other in another, and moves one channel's gradient
  (measured: the ResNet's blocks.2.conv1.weight under Inductor at step 2, one output channel off
  by 5.6e-2 of the tensor's largest element, 1e-2 in norm, as its blocks.2.bn1.bias; the GCN's
  w1.weight under Kiln at step 4, 2.4e-3 in norm). In norm, such a kink weighs about
  1/(positions per channel), 1/128 in the ResNet's last block; 5e-2 is five times the worst
  seen and twenty times below a gradient off by 2x (1 in norm) or of the wrong sign (2).
A tensor's norm is floored at 1e-4 of the largest of its kind, so that one that is rounding
noise on both sides (a gradient that is mathematically zero) is not compared as if it were
signal; an update's difference is taken beyond the f32 rounding of the parameter it is added to
(2 eps |p|). A disagreement fails the model's row (FAIL, naming the way, the step, the tensor,
its max abs error, its max elementwise error relative to the tensor's largest element, and its
error in norm; the model is not timed further) and the script's exit status (1); the other
models still run.

KILN_BENCH_CORRUPT_GRADIENT=1 (a test of these checks) doubles one parameter's gradient (the
model's first parameter) under Kiln before each optimizer step, as a wrong backward would: every
model's row must then FAIL at step 1.

Run from the Python package's environment (make python):
  .venv/bin/python bench/peers/bench_backend.py [--models bert,resnet] [--steps 20] [--device cuda]
Writes bench/results/backend.md, or backend-gpu.md for the GPU (and prints it).
"""

import argparse
import copy
import math
import os
import statistics
import sys
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


# Tolerances of a step's results against eager's (see the module's docstring for the reasons).
FORWARD_RTOL = 1e-4   # the loss and the buffers (batch norm's running statistics)
BACKWARD_RTOL = 5e-2  # the gradients, updates and optimizer state, in norm
SCALE_FLOOR = 1e-4    # a tensor's scale is at least this share of the largest of its kind
CORRUPT_GRADIENT = os.environ.get("KILN_BENCH_CORRUPT_GRADIENT", "") not in ("", "0")


class Disagreement(Exception):
    """A way's result differs from eager's beyond the tolerance."""


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

    def tensors(self, before):
        """What the checks compare, by kind and name: each parameter's gradient and its step's
        update (the parameter less `before`, the parameters before the step), the optimizer's
        state and the floating-point buffers."""
        kinds = {"gradient": {}, "update": {}, "optimizer state": {}, "buffer": {}}
        for name, parameter in self.model.named_parameters():
            if parameter.grad is not None:
                kinds["gradient"][name] = parameter.grad
            kinds["update"][name] = parameter.detach() - before[name]
            for key, value in self.optimizer.state.get(parameter, {}).items():
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    kinds["optimizer state"][f"{name} {key}"] = value
        for name, buffer in self.model.named_buffers():
            if buffer.is_floating_point():
                kinds["buffer"][name] = buffer
        return kinds

    def state(self):
        """The parameters, buffers and optimizer state, in place: what a step starts from."""
        tensors = list(self.model.parameters()) + list(self.model.buffers())
        for parameter in self.model.parameters():
            tensors += [v for v in self.optimizer.state.get(parameter, {}).values()
                        if isinstance(v, torch.Tensor)]
        return tensors

    @torch.no_grad()
    def take_state(self, other):
        """Continues from `other`'s state: its parameters, buffers and optimizer state copied
        into this one's, in place (the compiled graphs keep reading the same tensors)."""
        for mine, theirs in zip(self.state(), other.state(), strict=True):
            mine.copy_(theirs)


def corrupt_gradient(model):
    """KILN_BENCH_CORRUPT_GRADIENT's wrong backward: the model's first parameter's gradient
    doubled, once accumulated and before the optimizer reads it. Its name."""
    name, parameter = next(iter(model.named_parameters()))

    def double(accumulated):
        accumulated.grad.mul_(2)
    parameter.register_post_accumulate_grad_hook(double)
    return name


def compare_step(ways, losses, before):
    """Kiln's and Inductor's results of a step that started from eager's state (`before`, its
    parameters) against eager's: (way, what, max abs error, max relative error, measure,
    allowed), where the measure is what is held to the tolerance: the loss's relative error,
    or a tensor's relative error in norm (see the module's docstring)."""
    reference_loss = losses["eager"]
    reference = ways["eager"].tensors(before)
    epsilon = torch.finfo(torch.float32).eps
    for way in ("kiln", "inductor"):
        error = abs(losses[way] - reference_loss)
        relative = error / max(abs(reference_loss), 1e-30)
        yield (way, f"loss {losses[way]:.7g} (eager's {reference_loss:.7g})", error, relative,
               relative, FORWARD_RTOL)
        tensors = ways[way].tensors(before)
        for kind, expected in reference.items():
            allowed = FORWARD_RTOL if kind == "buffer" else BACKWARD_RTOL
            for tensor in sorted(set(expected) ^ set(tensors[kind])):
                yield (way, f"{kind} of {tensor}, present on one side only", math.inf, math.inf,
                       math.inf, allowed)
            largest = {n: float(t.abs().max()) if t.numel() else 0.0 for n, t in expected.items()}
            norms = {n: float(t.double().norm()) for n, t in expected.items()}
            largest_floor = SCALE_FLOOR * max(largest.values(), default=0.0)
            norm_floor = SCALE_FLOOR * max(norms.values(), default=0.0)
            for tensor, value in tensors[kind].items():
                if tensor not in expected:
                    continue
                difference = (value.double() - expected[tensor].double()).abs()
                what = f"{kind} of {tensor}"
                if kind == "update":  # each side's new parameter is rounded to f32 once
                    rounding = 2 * epsilon * (before[tensor].double().abs()
                                              + expected[tensor].double().abs())
                    difference = (difference - rounding).clamp(min=0)
                    what += " (beyond the f32 rounding of the parameter)"
                max_abs = float(difference.max()) if difference.numel() else 0.0
                max_relative = max_abs / max(largest[tensor], largest_floor, 1e-30)
                in_norm = float(difference.norm()) / max(norms[tensor], norm_floor, 1e-30)
                yield way, what, max_abs, max_relative, in_norm, allowed


def check_step(name, step, losses, ways, before):
    """Raises Disagreement, naming the first, when Kiln's or Inductor's loss or tensors after
    `step` (counted from 1) differ from eager's beyond the tolerances (compare_step)."""
    for way, what, max_abs, max_relative, measure, allowed in compare_step(ways, losses, before):
        if not measure <= allowed:  # a NaN fails too
            raise Disagreement(
                f"{name}: {way} disagrees with eager at step {step}: {what}: max abs error "
                f"{max_abs:.3g}, max rel. error {max_relative:.3g}"
                + ("" if what.startswith("loss") else f", rel. error in norm {measure:.3g}")
                + f" (allowed {allowed:.3g})")


def take_step(name, step, batch, ways, times=None):
    """One step of each way on `batch`, from the same state (eager's), checked against eager's
    (check_step); then Kiln and Inductor continue from eager's state. Each way's seconds are
    appended to `times` when given."""
    before = {n: p.detach().clone() for n, p in ways["eager"].model.named_parameters()}
    losses, seconds = {}, {}
    for way, runner in ways.items():
        losses[way], seconds[way] = runner.step(*batch)
        if times is not None:
            times[way].append(seconds[way])
    check_step(name, step, losses, ways, before)
    for way in ("kiln", "inductor"):
        ways[way].take_state(ways["eager"])
    return seconds


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
            if CORRUPT_GRADIENT:
                corrupted = corrupt_gradient(copy_of)
                print(f"   {name}: KILN_BENCH_CORRUPT_GRADIENT: {corrupted}'s gradient doubled "
                      "under Kiln", flush=True)
            report = kiln.Report()
            forward = torch.compile(copy_of, backend=kiln.make_backend(report), dynamic=False)
        ways[way] = Runner(copy_of, forward, loss_fn)
    first = take_step(name, 1, batches[0], ways)
    step = 1
    times = {way: [] for way in ways}
    for _ in range(rounds):
        for pair in batches[1:]:
            step += 1
            take_step(name, step, pair, ways, times)
    medians = {way: statistics.median(t) * 1e3 for way, t in times.items()}
    fallbacks = sorted({reason.split(":")[0] for _, reason in report.fallbacks})
    if not report.graphs and not fallbacks:
        fallbacks = ["everything: Dynamo captured no graph"]
    return medians, first, len(report.graphs), fallbacks, step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--steps", type=int, default=6, help="batches per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--output", help="default: bench/results/backend.md, or backend-gpu.md")
    args = parser.parse_args()
    if args.steps < 2 or args.rounds < 1:
        parser.error("--steps must be at least 2 (a first step and a timed one), --rounds 1")
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
        "(which compiles); ms per step (forward, loss, backward, SGD update). Every step, "
        "from eager's state, was checked against eager's: under Inductor and Kiln the loss and "
        f"batch norm's statistics agreed within {FORWARD_RTOL:g}, the gradients, updates and "
        f"momentum within {BACKWARD_RTOL:g} in norm (relative), unless the row says FAIL.",
        "",
        "| model | eager | Inductor | Kiln | Kiln vs eager | Kiln vs Inductor | first step "
        "(compile) eager / Inductor / Kiln, s | Kiln graphs | left to PyTorch |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    failures = []
    for name in args.models.split(","):
        try:
            medians, first, graphs, fallbacks, checked = bench_model(name, args.steps,
                                                                     args.rounds, args.device)
        except Disagreement as disagreement:  # not timed: the other models still are
            failures.append(str(disagreement))
            lines.append(f"| {name} | FAIL: {disagreement} |")
            print(f"FAIL {disagreement}", flush=True)
            continue
        print(f"   {name}: {checked} steps checked against eager", flush=True)
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
    if failures:
        print(f"FAIL: {len(failures)} model(s) disagree with eager:\n" + "\n".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
