"""Checks a Kiln zoo model against an independent PyTorch implementation of it.

Usage: zoo_check.py PRESET DUMP.npz

DUMP.npz is what `kiln zoo dump PRESET` writes: every input of the model's loss graph by name
(parameters such as "layer0.attn.wq", data such as "tokens" and "labels") and Kiln's outputs
"output/loss" and "output/logits" from its reference interpreter. This script builds the same
architecture with torch.nn.functional from those parameters (in float64), runs it on the same
data, and requires the loss and every logit to agree within a relative error of 1e-4. It then
computes each parameter's gradient with torch's autograd and compares every "grad/NAME" array
the dump holds (Kiln's gradient of the loss with respect to parameter NAME) the same way.

The architecture's hyperparameters that the arrays' shapes do not tell (heads, patch size,
strides, pooling chunks, epsilons) are this file's own, per preset, written from the papers
and the zoo's documentation rather than from Kiln's code. Dense weights are stored [in, out].

Exit status: 0 when everything agrees, 1 otherwise (each disagreement printed).
"""

import math
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F

RTOL = 1e-4

# Hyperparameters per preset that shapes alone do not give.
PRESETS = {
    "mlp-tiny": {"family": "mlp"},
    "mlp-mnist": {"family": "mlp"},
    "bert-tiny": {"family": "bert", "heads": 2},
    "bert-base": {"family": "bert", "heads": 12},
    "bert-large": {"family": "bert", "heads": 16},
    "vit-tiny": {"family": "vit", "heads": 3, "patch": 16},
    "vit-base": {"family": "vit", "heads": 12, "patch": 16},
    "resnet-tiny": {"family": "resnet", "bottleneck": False},
    "resnet-18": {"family": "resnet", "bottleneck": False},
    "resnet-50": {"family": "resnet", "bottleneck": True},
    "xml-cnn-tiny": {"family": "xml-cnn", "chunks": 4},
    "xml-cnn": {"family": "xml-cnn", "chunks": 4},
    "gcn-tiny": {"family": "gcn"},
    "gcn-cora": {"family": "gcn"},
}


def layer_count(p, prefix):
    count = 0
    while any(name.startswith(f"{prefix}{count}.") for name in p):
        count += 1
    return count


def attention(p, name, x, heads):
    batch, seq, hidden = x.shape
    d = hidden // heads

    def project(w, b):
        return (x @ p[f"{name}.{w}"] + p[f"{name}.{b}"]).view(batch, seq, heads, d).transpose(1, 2)

    q, k, v = project("wq", "bq"), project("wk", "bk"), project("wv", "bv")
    probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)
    context = (probs @ v).transpose(1, 2).reshape(batch, seq, hidden)
    return context @ p[f"{name}.wo"] + p[f"{name}.bo"]


def norm(p, name, x, eps):
    return F.layer_norm(x, x.shape[-1:], p[f"{name}.scale"], p[f"{name}.bias"], eps)


def feed_forward(p, name, x):
    h = F.gelu(x @ p[f"{name}.w1"] + p[f"{name}.b1"])
    return h @ p[f"{name}.w2"] + p[f"{name}.b2"]


def encoder_layer(p, name, x, heads, eps, pre_norm):
    if pre_norm:
        x = x + attention(p, f"{name}.attn", norm(p, f"{name}.attn_norm", x, eps), heads)
        return x + feed_forward(p, f"{name}.ffn", norm(p, f"{name}.ffn_norm", x, eps))
    x = norm(p, f"{name}.attn_norm", x + attention(p, f"{name}.attn", x, heads), eps)
    return norm(p, f"{name}.ffn_norm", x + feed_forward(p, f"{name}.ffn", x), eps)


def mlp(p, d, cfg):
    h = d["x"]
    layers = layer_count(p, "layer")
    for i in range(layers):
        if i > 0:
            h = F.relu(h)
        h = h @ p[f"layer{i}.w"] + p[f"layer{i}.b"]
    return F.cross_entropy(h, d["labels"]), h


def bert(p, d, cfg):
    eps = 1e-12
    tokens = d["tokens"]
    seq = tokens.shape[1]
    h = F.embedding(tokens, p["embed.tokens"]) + p["embed.positions"][:seq]
    h = norm(p, "embed.norm", h, eps)
    for i in range(layer_count(p, "layer")):
        h = encoder_layer(p, f"layer{i}", h, cfg["heads"], eps, pre_norm=False)
    h = F.gelu(h @ p["head.dense.w"] + p["head.dense.b"])
    h = norm(p, "head.norm", h, eps)
    logits = h @ p["embed.tokens"].T + p["head.bias"]
    # Masked-LM loss: mean cross-entropy over the positions whose mask is 1.
    per_position = F.cross_entropy(logits.flatten(0, 1), d["labels"].flatten(), reduction="none")
    mask = d["label_mask"].flatten()
    loss = (per_position * mask).sum() / mask.sum().clamp(min=1)
    return loss, logits


def vit(p, d, cfg):
    eps = 1e-6
    images = d["images"]
    batch = images.shape[0]
    patches = F.conv2d(images, p["patch_embed.w"], p["patch_embed.b"], stride=cfg["patch"])
    tokens = patches.flatten(2).transpose(1, 2)
    h = torch.cat([p["cls_token"].expand(batch, -1, -1), tokens], dim=1) + p["pos_embed"]
    for i in range(layer_count(p, "layer")):
        h = encoder_layer(p, f"layer{i}", h, cfg["heads"], eps, pre_norm=True)
    h = norm(p, "norm", h, eps)
    logits = h[:, 0] @ p["head.w"] + p["head.b"]
    return F.cross_entropy(logits, d["labels"]), logits


def conv_bn(p, name, x, stride, padding):
    y = F.conv2d(x, p[f"{name}.w"], stride=stride, padding=padding)
    # Training mode: normalize with the batch's statistics.
    return F.batch_norm(y, None, None, p[f"{name}.bn.scale"], p[f"{name}.bn.bias"], training=True,
                        eps=1e-5)


def resnet(p, d, cfg):
    h = F.relu(conv_bn(p, "stem.conv", d["images"], 2, 3))
    h = F.max_pool2d(h, 3, 2, 1)
    for stage in range(1, 5):
        for block in range(layer_count(p, f"stage{stage}.block")):
            name = f"stage{stage}.block{block}"
            stride = 2 if stage > 1 and block == 0 else 1
            if cfg["bottleneck"]:
                y = F.relu(conv_bn(p, f"{name}.conv1", h, 1, 0))
                y = F.relu(conv_bn(p, f"{name}.conv2", y, stride, 1))
                y = conv_bn(p, f"{name}.conv3", y, 1, 0)
            else:
                y = F.relu(conv_bn(p, f"{name}.conv1", h, stride, 1))
                y = conv_bn(p, f"{name}.conv2", y, 1, 1)
            if f"{name}.downsample.w" in p:
                h = conv_bn(p, f"{name}.downsample", h, stride, 0)
            h = F.relu(y + h)
    logits = h.mean(dim=(2, 3)) @ p["fc.w"] + p["fc.b"]
    return F.cross_entropy(logits, d["labels"]), logits


def xml_cnn(p, d, cfg):
    x = F.embedding(d["tokens"], p["embed"]).transpose(1, 2)  # [batch, embedding, seq]
    batch, _, seq = x.shape
    pooled = []
    for window in (2, 4, 8):
        y = F.relu(F.conv1d(x, p[f"conv{window}.w"], p[f"conv{window}.b"], padding="same"))
        # Dynamic max pooling: the max of each of `chunks` equal pieces of the sequence.
        pooled.append(F.adaptive_max_pool1d(y, cfg["chunks"]).flatten(1))
    h = F.relu(torch.cat(pooled, dim=1) @ p["bottleneck.w"] + p["bottleneck.b"])
    logits = h @ p["output.w"] + p["output.b"]
    return F.binary_cross_entropy_with_logits(logits, d["targets"]), logits


def gcn(p, d, cfg):
    nodes = d["adjacency.row_ptr"].shape[0] - 1
    adjacency = torch.sparse_csr_tensor(d["adjacency.row_ptr"], d["adjacency.col_indices"],
                                        d["adjacency.values"], (nodes, nodes)).to_dense()
    h = F.relu(adjacency @ (d["features"] @ p["gc1.w"]) + p["gc1.b"])
    logits = adjacency @ (h @ p["gc2.w"]) + p["gc2.b"]
    return F.cross_entropy(logits, d["labels"]), logits


FAMILIES = {"mlp": mlp, "bert": bert, "vit": vit, "resnet": resnet, "xml-cnn": xml_cnn,
            "gcn": gcn}

# Data inputs by family; every other input of the dump (but outputs and gradients) is a
# parameter.
DATA = {"x", "labels", "tokens", "label_mask", "images", "targets", "features",
        "adjacency.row_ptr", "adjacency.col_indices", "adjacency.values"}


def relative_error(kiln, torch_value, floor=1e-30):
    """max |kiln - torch| over max |torch|, the latter at least `floor`."""
    reference = torch_value.detach().numpy()
    scale = max(np.abs(reference).max(), floor)
    return float(np.abs(kiln.astype(np.float64) - reference).max() / scale)


def main():
    # torch warns that padding="same" with an even kernel copies the input, and that sparse
    # CSR tensors are a beta feature: both are fine here.
    warnings.simplefilter("ignore", UserWarning)
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    preset, path = sys.argv[1], sys.argv[2]
    if preset not in PRESETS:
        sys.exit(f"zoo_check.py: no PyTorch implementation of preset '{preset}'")
    cfg = PRESETS[preset]
    dump = dict(np.load(path))
    params, data = {}, {}
    for name, array in dump.items():
        if name.startswith(("output/", "grad/")):
            continue
        tensor = torch.from_numpy(array)
        if tensor.is_floating_point():
            tensor = tensor.double()
        if name in DATA:
            data[name] = tensor
        else:
            params[name] = tensor.requires_grad_()
    loss, logits = FAMILIES[cfg["family"]](params, data, cfg)
    loss.backward()

    checks = [("loss", dump["output/loss"], loss), ("logits", dump["output/logits"], logits)]
    for name, array in dump.items():
        if name.startswith("grad/"):
            param = name[len("grad/"):]
            if param not in params:
                print(f"FAIL {name}: the model has no parameter '{param}'")
                return 1
            checks.append((name, array, params[param].grad))
    # Kiln's graphs are f32, so a gradient that is mathematically zero (an attention key bias:
    # softmax ignores a constant added to a row) comes out as f32 rounding noise, which no
    # relative measure accepts. Gradients are therefore measured against at least 1e-5 of the
    # model's largest gradient (zero gradients reach 1.6e-9 of it in vit-tiny; the smallest
    # non-zero ones, bert-tiny's query biases, are 7e-5 of it).
    largest_gradient = max((float(ref.abs().max()) for name, _, ref in checks
                            if name.startswith("grad/")), default=0.0)
    failures = 0
    for name, kiln, reference in checks:
        floor = 1e-5 * largest_gradient if name.startswith("grad/") else 1e-30
        if kiln.shape != tuple(reference.shape):
            print(f"FAIL {name}: Kiln's shape {kiln.shape}, torch's {tuple(reference.shape)}")
            failures += 1
            continue
        error = relative_error(kiln, reference, floor)
        if error > RTOL:
            print(f"FAIL {name}: relative error {error:.3g} > {RTOL}")
            failures += 1
    verdict = f"{failures} of {len(checks)} differ" if failures else "all agree"
    print(f"{preset}: loss {loss.item():.6g} (Kiln {float(dump['output/loss']):.6g}); loss, logits "
          f"and {len(checks) - 2} parameter gradients compared with relative tolerance {RTOL}: "
          f"{verdict}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
