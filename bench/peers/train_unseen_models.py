#!/usr/bin/env python3
"""Models that no test uses, written as PyTorch users write them, trained a few SGD steps under
torch.compile(backend="kiln") and eagerly from the same weights: a Llama-style block (two RMS
norms, one hand-written and nn.RMSNorm, SwiGLU, grouped-query attention by repeat_interleave,
causal scaled-dot-product attention), a MobileNet block (depthwise convolution, batch norm,
hardswish, relu6), an nn.EmbeddingBag model and nn.MultiheadAttention with a causal mask.

For each: the largest relative difference of the losses, the largest difference of a
parameter's change relative to its largest change (SGD, so that a gradient that is zero in
exact arithmetic cannot be magnified as Adam magnifies its rounding noise), how many Kiln
graphs were compiled, and the ops left to PyTorch. It checks what issue 31 asks, that
supported ops run in Kiln and the rest fall back without a wrong result; it times nothing.

Run from the Python package's environment (make python):
  .venv/bin/python bench/peers/train_unseen_models.py
"""

import copy
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln

STEPS = 3


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class LlamaBlock(nn.Module):
    def __init__(self, dim=32, heads=4, kv_heads=2, vocab=40, classes=5):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        head_dim = dim // heads
        self.embed = nn.Embedding(vocab, dim)
        self.norm1 = RMSNorm(dim)
        self.norm2 = nn.RMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, head_dim * kv_heads, bias=False)
        self.v = nn.Linear(dim, head_dim * kv_heads, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.ffn = SwiGLU(dim, 64)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        x = self.embed(tokens)
        b, n, d = x.shape
        hd = d // self.heads
        h = self.norm1(x)
        q = self.q(h).view(b, n, self.heads, hd).transpose(1, 2)
        repeat = self.heads // self.kv_heads
        k = self.k(h).view(b, n, self.kv_heads, hd).transpose(1, 2).repeat_interleave(repeat, 1)
        v = self.v(h).view(b, n, self.kv_heads, hd).transpose(1, 2).repeat_interleave(repeat, 1)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(attended.transpose(1, 2).reshape(b, n, d))
        x = x + self.ffn(self.norm2(x))
        return self.head(x[:, -1])


class MobileBlock(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 2, 1)
        self.bn0 = nn.BatchNorm2d(16)
        self.depthwise = nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.pointwise = nn.Conv2d(16, 24, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(24)
        self.head = nn.Linear(24, classes)

    def forward(self, x):
        x = F.hardswish(self.bn0(self.stem(x)))
        x = F.relu6(self.bn1(self.depthwise(x)))
        x = self.bn2(self.pointwise(x))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


class BagModel(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.bag = nn.EmbeddingBag(50, 16, mode="mean")
        self.out = nn.Linear(16, classes)

    def forward(self, tokens):
        return self.out(self.bag(tokens))


class CausalMultiheadAttention(nn.Module):
    def __init__(self, dim=32, classes=5):
        super().__init__()
        self.attention = nn.MultiheadAttention(dim, 4, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, classes)

    def forward(self, x):
        n = x.shape[1]
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        attended, _ = self.attention(x, x, x, attn_mask=mask, need_weights=False)
        return self.out(self.norm(x + attended).mean(1))


CASES = [
    ("Llama-style block (RMSNorm, SwiGLU, GQA, causal SDPA)", LlamaBlock, "tokens"),
    ("MobileNet block (depthwise conv, batch norm, hardswish, relu6)", MobileBlock, "images"),
    ("nn.EmbeddingBag", BagModel, "tokens"),
    ("nn.MultiheadAttention with a causal mask", CausalMultiheadAttention, "sequence"),
]


def batch(kind, generator):
    if kind == "tokens":
        inputs = torch.randint(0, 40, (4, 10), generator=generator)
    elif kind == "images":
        inputs = torch.randn(4, 3, 16, 16, generator=generator)
    else:
        inputs = torch.randn(4, 7, 32, generator=generator)
    return inputs, torch.randint(0, 5, (4,), generator=generator)


def train(model, forward, kind):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator().manual_seed(3)
    losses = []
    for _ in range(STEPS):
        inputs, targets = batch(kind, generator)
        loss = F.cross_entropy(forward(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main():
    warnings.simplefilter("ignore")
    print("| model | loss, largest relative difference | parameter change, largest relative "
          "difference | Kiln graphs | left to PyTorch |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, make, kind in CASES:
        torch._dynamo.reset()
        torch.manual_seed(0)
        start = make()
        eager, mine = copy.deepcopy(start), copy.deepcopy(start)
        report = kiln.Report()
        compiled = torch.compile(mine, backend=kiln.make_backend(report), dynamic=False)
        eager_losses = train(eager, eager, kind)
        kiln_losses = train(mine, compiled, kind)
        loss_error = max(abs(k - e) / abs(e) for k, e in zip(kiln_losses, eager_losses))
        initial, trained = dict(start.named_parameters()), dict(eager.named_parameters())
        change_error = 0.0
        for param_name, p in mine.named_parameters():
            change = trained[param_name] - initial[param_name]
            scale = change.abs().max().item()
            if scale > 1e-6:
                error = (p - trained[param_name]).abs().max().item() / scale
                change_error = max(change_error, error)
        fallbacks = sorted({reason.split(":")[0] for _, reason in report.fallbacks})
        print(f"| {name} | {loss_error:.1e} | {change_error:.1e} | {len(report.graphs)} | "
              f"{', '.join(fallbacks) or 'nothing'} |", flush=True)


if __name__ == "__main__":
    main()
