#!/usr/bin/env python3
"""Builds one model-level test fixture for Kiln's ONNX importer.

    make_fixture.py MODEL OUTDIR

writes
    OUTDIR/model.onnx       the model, exported with torch.onnx.export
    OUTDIR/input.npz        its inputs, keyed by ONNX input name
    OUTDIR/expected.npz     PyTorch's float32 outputs on them, keyed by ONNX output name
    OUTDIR/reference64.npz  the same model (same float32 weights and inputs, widened) run by
                            PyTorch in float64: the exact answer up to ~1e-15, so a test can
                            tell Kiln's error from PyTorch's own float32 rounding
    OUTDIR/fixture.json     model name, shapes, opset, versions, timings

Every model is built with random weights (torch seeded, no pretrained weights: fixtures are
made offline and never committed) and run in eval mode. Normalization layers get random
statistics and affine parameters, so folding them (as the exporter does for Conv+BatchNorm) is
actually tested rather than being the identity; parameters torchvision initializes to zero or
nearly zero where that would hide most of the model (ViT's head and class token, ConvNeXt's layer
scales) are made random too. Inputs are deterministic random tensors.

`make_fixture.py --list` prints the model names.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

# The newest opset torch 1.13's exporter writes; it emits LayerNormalization directly. The
# opset-13 variant of BERT keeps the decomposed LayerNorm (ReduceMean/Sub/Pow/Sqrt/Div) that
# models exported at older opsets carry.
DEFAULT_OPSET = 17


# ---- models written in plain PyTorch --------------------------------------------------------


class BertEmbeddings(nn.Module):
    def __init__(self, vocab, hidden, max_positions, type_vocab):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(type_vocab, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(max_positions).unsqueeze(0))

    def forward(self, input_ids, token_type_ids):
        seq = input_ids.shape[1]
        positions = self.position_ids[:, :seq]
        x = self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids)
        return self.norm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, hidden)

    def split(self, x):
        batch, seq, _ = x.shape
        return x.view(batch, seq, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, mask_bias):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask_bias
        probs = torch.softmax(scores, dim=-1)
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        batch, seq = context.shape[0], context.shape[1]
        return self.output(context.view(batch, seq, self.heads * self.head_dim))


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, mask_bias):
        x = self.attention_norm(x + self.attention(x, mask_bias))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    """A small BERT encoder: embeddings (word, position, token type) with LayerNorm, post-norm
    layers of masked multi-head self-attention and a GELU feed-forward, and the tanh pooler
    over the first token."""

    def __init__(self, vocab=1000, hidden=128, layers=2, heads=4, intermediate=512,
                 max_positions=64, type_vocab=2):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, max_positions, type_vocab)
        self.layers = nn.ModuleList(
            [BertLayer(hidden, heads, intermediate) for _ in range(layers)])
        self.pooler = nn.Linear(hidden, hidden)

    def forward(self, input_ids, token_type_ids, attention_mask):
        # The classic BERT mask: 0 where attended, -10000 where masked, broadcast over heads
        # and query positions.
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        x = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled


class TextCNN(nn.Module):
    """Kim-style text CNN: embedding, parallel 1-d convolutions of widths 3, 4, 5 with ReLU,
    adaptive max pooling over time, concatenation, linear classifier."""

    def __init__(self, vocab=2000, embed=64, channels=32, widths=(3, 4, 5), classes=5):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.convs = nn.ModuleList([nn.Conv1d(embed, channels, w) for w in widths])
        self.pool = nn.AdaptiveMaxPool1d(1)
        self.classifier = nn.Linear(channels * len(widths), classes)

    def forward(self, tokens):
        x = self.embedding(tokens).transpose(1, 2)  # [batch, embed, time]
        features = [self.pool(F.relu(conv(x))).squeeze(-1) for conv in self.convs]
        return self.classifier(torch.cat(features, dim=1))


class GCN(nn.Module):
    """Two-layer graph convolutional network (Kipf & Welling) on a dense normalized adjacency:
    log_softmax(A relu(A X W1) W2)."""

    def __init__(self, features=32, hidden=64, classes=7):
        super().__init__()
        self.layer1 = nn.Linear(features, hidden)
        self.layer2 = nn.Linear(hidden, classes)

    def forward(self, x, adjacency):
        h = F.relu(adjacency @ self.layer1(x))
        return F.log_softmax(adjacency @ self.layer2(h), dim=-1)


class RMSNorm(nn.Module):
    """RMS norm as LLaMA writes it: w * (x * rsqrt(mean(x^2) + eps))."""

    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(features))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class ExporterPatterns(nn.Module):
    """What Kiln's canonical rules recognize (src/subst/rules/canonical.rules), each as PyTorch
    users write it, in one chain over activations of rank 3 and then rank 2: nn.LayerNorm
    (spelled out by the exporter below opset 17), F.gelu in its erf and tanh forms, GELU as
    Hugging Face writes both, softmax and log-softmax written with exp and sums, an RMS norm,
    powers 2, 3 and 0.5, and divisions by constants."""

    def __init__(self, features=32):
        super().__init__()
        self.norm = nn.LayerNorm(features)
        self.rms = RMSNorm(features)
        self.linear = nn.Linear(features, features)
        self.flat_norm = nn.LayerNorm(features)

    @staticmethod
    def hf_gelu(x):
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))

    @staticmethod
    def new_gelu(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                           (x + 0.044715 * torch.pow(x, 3.0))))

    @staticmethod
    def softmax(x):
        e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
        return e / e.sum(dim=-1, keepdim=True)

    @staticmethod
    def log_softmax(x):
        shifted = x - x.max(dim=-1, keepdim=True).values
        return shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))

    def forward(self, x):
        x = self.norm(x)
        x = F.gelu(x) + F.gelu(x, approximate="tanh") / 3.0
        # Each pattern on a value of its own: the exporter shares what two patterns compute
        # alike (x * 0.5, x - max(x)), and a shared piece is no longer the pattern's alone.
        x = self.hf_gelu(x) + self.new_gelu(x + 1.0)
        x = self.rms(x) + torch.abs(x) ** 0.5 + x ** 2 / 7.0
        x = self.linear(self.softmax(x) + self.log_softmax(x + 1.0))
        flat = self.flat_norm(x.reshape(-1, x.shape[-1]))
        return F.gelu(flat) + self.softmax(flat)


# The canonical rule families an exporter_patterns fixture must show as recognized (run by
# run_model_test.py); below opset 17 also layer-norm, which is one ONNX op from opset 17 on.
EXPORTER_PATTERN_RULES = ["gelu-erf", "gelu-erf-half-first", "gelu-tanh", "gelu-tanh-half-first",
                          "cube-as-product", "square-as-product", "sqrt-as-power-half",
                          "rsqrt-from-division", "softmax", "log-softmax",
                          "division-by-constant"]


# ---- inputs ---------------------------------------------------------------------------------


class ImportCases(nn.Module):
    """What users' exports held that Kiln's importer once refused: a max pool with dilations,
    nn.PReLU with one slope per channel, and Range, Expand and Reshape whose shapes come from
    the input's own (exported with a symbolic batch, fixed by `kiln run --shape`)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.prelu = nn.PReLU(num_parameters=8)
        self.pool = nn.MaxPool2d(3, stride=1, dilation=2, padding=1)
        self.fc = nn.Linear(8 * 10 * 10, 10)

    def forward(self, x):
        y = self.pool(self.prelu(self.conv(x)))
        channel = torch.arange(y.size(1), dtype=y.dtype).view(1, -1, 1, 1)
        y = y + channel.expand(y.size(0), y.size(1), y.size(2), y.size(3))
        return self.fc(y.reshape(y.size(0), -1))


def activations(*shape):
    def make(gen):
        return {"x": torch.randn(*shape, generator=gen)}
    return make


def image(batch, size):
    def make(gen):
        return {"input": torch.randn(batch, 3, size, size, generator=gen)}
    return make


def bert_inputs(batch=2, seq=16, vocab=1000):
    def make(gen):
        ids = torch.randint(0, vocab, (batch, seq), generator=gen)
        types = torch.zeros(batch, seq, dtype=torch.int64)
        types[:, seq // 2:] = 1
        mask = torch.ones(batch, seq, dtype=torch.int64)
        mask[1, seq - 5:] = 0  # the second sequence is padded
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    return make


def text_inputs(batch=2, seq=40, vocab=2000):
    def make(gen):
        return {"tokens": torch.randint(0, vocab, (batch, seq), generator=gen)}
    return make


def graph_inputs(nodes=50, features=32):
    def make(gen):
        x = torch.randn(nodes, features, generator=gen)
        # A random undirected graph with self-loops, symmetrically normalized:
        # D^-1/2 (A + I) D^-1/2.
        a = (torch.rand(nodes, nodes, generator=gen) < 0.1).float()
        a = torch.clamp(a + a.T + torch.eye(nodes), max=1.0)
        d = a.sum(dim=1).rsqrt()
        return {"x": x, "adjacency": d[:, None] * a * d[None, :]}
    return make


# ---- the model table ------------------------------------------------------------------------


def torchvision_model(name, **kwargs):
    def build():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, **kwargs)
    return build


def vision_transformer(image_size):
    """torchvision's vit_b_16: patch 16, 12 layers, 12 heads, hidden 768, MLP 3072 (86M
    parameters). At image_size 224 it is vit_b_16() itself; at a smaller image it is the same
    architecture with the same weight shapes except the position embedding's length, which the
    f64 reference interpreter runs much faster."""
    def build():
        from torchvision.models.vision_transformer import VisionTransformer
        model = VisionTransformer(image_size=image_size, patch_size=16, num_layers=12,
                                  num_heads=12, hidden_dim=768, mlp_dim=3072)
        # torchvision zero-initializes the classification head and the class token (training
        # recipes fill them in); zero outputs would test nothing.
        model.heads.head.reset_parameters()
        nn.init.normal_(model.class_token, std=1.0)
        return model
    return build


MODELS = {
    # name: (builder, input maker, output names, export options)
    "resnet50": (torchvision_model("resnet50"), image(1, 224), ["logits"], {}),
    "vit_b_16": (vision_transformer(224), image(1, 224), ["logits"], {}),
    "bert": (Bert, bert_inputs(), ["last_hidden_state", "pooler_output"],
             {"dynamic_axes": {name: {0: "batch", 1: "sequence"}
                               for name in ("input_ids", "token_type_ids", "attention_mask",
                                            "last_hidden_state")}}),
    "bert_opset13": (Bert, bert_inputs(), ["last_hidden_state", "pooler_output"],
                     {"opset_version": 13}),
    "text_cnn": (TextCNN, text_inputs(), ["logits"], {}),
    # What the canonical rules recognize, as the exporter writes it at three opsets.
    **{f"exporter_patterns_opset{opset}":
       (ExporterPatterns, activations(2, 16, 32), ["y"], {"opset_version": opset})
       for opset in (11, 14, 17)},
    "gcn": (GCN, graph_inputs(), ["log_probs"], {}),
    **{f"import_cases_opset{opset}":
       (ImportCases, image(2, 12), ["y"],
        {"opset_version": opset, "dynamic_axes": {"input": {0: "batch"}, "y": {0: "batch"}}})
       for opset in (11, 17)},
    "squeezenet1_1": (torchvision_model("squeezenet1_1"), image(1, 64), ["logits"], {}),
    "shufflenet_v2_x0_5": (torchvision_model("shufflenet_v2_x0_5"), image(1, 64), ["logits"], {}),
    "mobilenet_v2": (torchvision_model("mobilenet_v2"), image(1, 64), ["logits"], {}),
    "mobilenet_v3_small": (torchvision_model("mobilenet_v3_small"), image(1, 64), ["logits"], {}),
    "efficientnet_b0": (torchvision_model("efficientnet_b0"), image(1, 64), ["logits"], {}),
    "densenet121": (torchvision_model("densenet121"), image(1, 64), ["logits"], {}),
    "googlenet": (torchvision_model("googlenet", aux_logits=False, init_weights=True),
                  image(1, 64), ["logits"], {}),
    "inception_v3": (torchvision_model("inception_v3", aux_logits=False, init_weights=True),
                     image(1, 96), ["logits"], {}),
    "resnext50_32x4d": (torchvision_model("resnext50_32x4d"), image(1, 64), ["logits"], {}),
    "regnet_y_400mf": (torchvision_model("regnet_y_400mf"), image(1, 64), ["logits"], {}),
    "mnasnet0_5": (torchvision_model("mnasnet0_5"), image(1, 64), ["logits"], {}),
    "convnext_tiny": (torchvision_model("convnext_tiny"), image(1, 64), ["logits"], {}),
    "swin_t": (torchvision_model("swin_t"), image(1, 64), ["logits"], {}),
    "alexnet": (torchvision_model("alexnet"), image(1, 224), ["logits"], {}),
    "vgg11": (torchvision_model("vgg11"), image(1, 224), ["logits"], {}),
}


# ---- building a fixture ---------------------------------------------------------------------


def randomize_normalization(model, gen):
    """Random running statistics and affine parameters for every BatchNorm and LayerNorm, and
    random ConvNeXt layer scales (initialized to 1e-6, which would all but remove the residual
    branches)."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("layer_scale"):
                parameter.copy_(0.5 + torch.rand(parameter.shape, generator=gen))
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                n = module.num_features
                module.running_mean.copy_(0.1 * torch.randn(n, generator=gen))
                module.running_var.copy_(0.5 + torch.rand(n, generator=gen))
            if isinstance(module, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm)):
                if module.weight is not None:
                    module.weight.copy_(0.5 + torch.rand(module.weight.shape, generator=gen))
                    module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=gen))


def as_tuple(outputs):
    return outputs if isinstance(outputs, tuple) else (outputs,)


def to_numpy(tensors):
    return {name: t.detach().cpu().numpy() for name, t in tensors.items()}


def make_fixture(name, outdir):
    build, make_inputs, output_names, export_options = MODELS[name]
    torch.manual_seed(0)
    model = build()
    randomize_normalization(model, torch.Generator().manual_seed(1))
    model.eval()
    inputs = make_inputs(torch.Generator().manual_seed(2))
    input_names = list(inputs)
    args = tuple(inputs.values())

    os.makedirs(outdir, exist_ok=True)
    start = time.monotonic()
    with torch.no_grad():
        outputs = as_tuple(model(*args))
    torch_seconds = time.monotonic() - start
    if len(outputs) != len(output_names):
        raise RuntimeError(f"{name}: {len(outputs)} outputs, {len(output_names)} names")

    options = {"opset_version": DEFAULT_OPSET}
    options.update(export_options)
    start = time.monotonic()
    torch.onnx.export(model, args, os.path.join(outdir, "model.onnx"),
                      input_names=input_names, output_names=output_names, **options)
    export_seconds = time.monotonic() - start

    # The float64 run: the same float32 weights and inputs, widened exactly.
    model64 = model.double()
    args64 = tuple(a.double() if a.is_floating_point() else a for a in args)
    with torch.no_grad():
        outputs64 = as_tuple(model64(*args64))

    np.savez(os.path.join(outdir, "input.npz"), **to_numpy(inputs))
    np.savez(os.path.join(outdir, "expected.npz"), **to_numpy(dict(zip(output_names, outputs))))
    np.savez(os.path.join(outdir, "reference64.npz"),
             **to_numpy(dict(zip(output_names, outputs64))))
    info = {
        "model": name,
        "inputs": {k: [str(v.dtype), list(v.shape)] for k, v in inputs.items()},
        "outputs": {k: list(v.shape) for k, v in zip(output_names, outputs)},
        "opset": options["opset_version"],
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__,
        "torch_forward_seconds": round(torch_seconds, 3),
        "export_seconds": round(export_seconds, 3),
    }
    if name.startswith("exporter_patterns"):
        info["recognized"] = EXPORTER_PATTERN_RULES + (
            ["layer-norm"] if options["opset_version"] < 17 else [])
    with open(os.path.join(outdir, "fixture.json"), "w") as f:
        json.dump(info, f, indent=2)
    return info


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="one of --list")
    parser.add_argument("outdir", nargs="?")
    parser.add_argument("--list", action="store_true", help="print the model names")
    args = parser.parse_args()
    if args.list:
        print("\n".join(MODELS))
        return 0
    if args.model not in MODELS or not args.outdir:
        parser.error(f"give MODEL OUTDIR; MODEL is one of: {', '.join(MODELS)}")
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    info = make_fixture(args.model, args.outdir)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
