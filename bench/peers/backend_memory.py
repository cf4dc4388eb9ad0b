#!/usr/bin/env python3
"""A BERT-base training step under torch.compile(backend="kiln") against the same step run
eagerly: peak device memory, time per step, and agreement.

The model is ordinary PyTorch code (embeddings, 12 encoder layers of self-attention through
F.scaled_dot_product_attention and a GELU MLP, layer norms, a classifier on the first token),
trained with AdamW at BERT-base's size, batch 32 and sequence 128 by default. Both ways start
from the same weights and batches. For each way it reports the peak of
torch.cuda.max_memory_allocated over the timed steps (what PyTorch's caching allocator holds:
Kiln's graphs take their intermediates from it, so they count) and the median step time after
warm-up steps; then the losses of every step and the parameters after the last must agree
with eager's (`--rtol`), else it exits 1. On the GPU the check of issue 48 is a peak at most
10% above eager's (`--max-memory-ratio`), which it enforces.

Usage: backend_memory.py [--device cuda] [--layers 12] [--batch 32] [--seq 128] [--steps 6]
Run from the Python package's environment. Prints a Markdown table; on the CPU (a smoke run at
small sizes), memory is not measured.
"""

import argparse
import copy
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x):
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, dim // self.heads).unbind(2)
        attended = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                  v.transpose(1, 2))
        x = self.norm1(x + self.proj(attended.transpose(1, 2).reshape(batch, seq, dim)))
        return self.norm2(x + self.down(F.gelu(self.up(x))))


class Bert(nn.Module):
    def __init__(self, layers: int, dim: int = 768, heads: int = 12, vocab: int = 30522,
                 seq: int = 512, classes: int = 2):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(seq, dim)
        self.norm = nn.LayerNorm(dim)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads) for _ in range(layers))
        self.classify = nn.Linear(dim, classes)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.tokens(ids) + self.positions(positions))
        for layer in self.layers:
            x = layer(x)
        return self.classify(x[:, 0])


def train(model, forward, batches, device, warmup):
    """Trains on `batches`: each step's loss and seconds, and the peak memory of the steps
    after `warmup` (None on the CPU)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    losses, seconds, peak = [], [], None
    for step, (ids, labels) in enumerate(batches):
        if step == warmup and device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        loss = F.cross_entropy(forward(ids), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())  # waits for the step
        seconds.append(time.perf_counter() - start)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
    return losses, seconds[warmup:], peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=6, help="steps per way, warm-up included")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rtol", type=float, default=2e-3)
    parser.add_argument("--max-memory-ratio", type=float, default=1.10)
    args = parser.parse_args()
    device = torch.device(args.device)

    torch.manual_seed(0)
    eager_model = Bert(args.layers).to(device)
    kiln_model = copy.deepcopy(eager_model)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 30522, (args.batch, args.seq), generator=g).to(device),
                torch.randint(0, 2, (args.batch,), generator=g).to(device))
               for _ in range(args.steps)]

    results = {}
    report = kiln.Report()
    compiled = torch.compile(kiln_model, backend=kiln.make_backend(report))
    results["kiln"] = train(kiln_model, compiled, batches, device, args.warmup)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    results["eager"] = train(eager_model, eager_model, batches, device, args.warmup)

    machine = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"
    print(f"BERT (layers {args.layers}, dim 768) training step, AdamW, batch {args.batch}, "
          f"sequence {args.seq}, on {machine}; median of {args.steps - args.warmup} steps "
          f"after {args.warmup}")
    print()
    print("| way | median step | peak memory allocated |")
    print("| --- | ---: | ---: |")
    for way, (_, seconds, peak) in results.items():
        memory = "n/a" if peak is None else f"{peak / 2**30:.2f} GiB"
        print(f"| {way} | {statistics.median(seconds) * 1e3:.1f} ms | {memory} |")
    print()
    failures = []
    if report.fallbacks:
        print(f"{len(report.fallbacks)} node(s) left to PyTorch: {report.fallbacks[:5]}")
    for step, (mine, theirs) in enumerate(zip(results["kiln"][0], results["eager"][0])):
        if abs(mine - theirs) > args.rtol * (1 + abs(theirs)):
            failures.append(f"step {step}: loss {mine} under Kiln, {theirs} eager")
    for (name, mine), theirs in zip(kiln_model.named_parameters(), eager_model.parameters()):
        change = (theirs.detach() - mine.detach()).abs().max().item()
        if change > args.rtol * (1 + theirs.detach().abs().max().item()):
            failures.append(f"parameter {name}: differs by {change:.3g}")
    kiln_peak, eager_peak = results["kiln"][2], results["eager"][2]
    if kiln_peak is not None:
        ratio = kiln_peak / eager_peak
        print(f"peak memory under Kiln / eager: {ratio:.3f} (at most {args.max_memory_ratio})")
        if ratio > args.max_memory_ratio:
            failures.append(f"peak memory {ratio:.3f}x eager's")
    print("agreement with eager: " + ("yes" if not failures else "NO"))
    for failure in failures:
        print("  " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
