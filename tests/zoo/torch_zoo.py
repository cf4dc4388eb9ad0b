"""Independent PyTorch implementations of Kiln's zoo models.

Each model is written with torch.nn.functional from a dict of parameters by Kiln's names
(dense weights stored [in, out]) and a dict of data inputs, from the papers and the zoo's
documentation rather than from Kiln's code. Two users: tests/zoo/zoo_check.py, which checks
Kiln's loss, logits and gradients against these in float64, and bench/peers/bench_peers.py,
which times them (eagerly and under torch.compile) beside Kiln in float32.

forward(preset, params, data, training) returns (loss, logits); with training=False the loss is
None and batch norm uses its running statistics (the inference graph's bn.mean and bn.var), as
Kiln's inference graph does. The hyperparameters that the arrays' shapes do not tell (heads,
patch size, strides, pooling chunks, epsilons) are this file's own, per preset.

Written to run on torch 1.13 (Debian's python3-torch, which the tests use) and on the pinned
torch of bench/peers.
"""

import math

import torch
import torch.nn.functional as F

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

# Data inputs by family; every other input is a parameter or (batch norm's running statistics)
# state.
DATA = {"x", "labels", "tokens", "label_mask", "images", "targets", "features",
        "adjacency.row_ptr", "adjacency.col_indices", "adjacency.values"}


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


def mlp(p, d, cfg, training):
    h = d["x"]
    for i in range(layer_count(p, "layer")):
        if i > 0:
            h = F.relu(h)
        h = h @ p[f"layer{i}.w"] + p[f"layer{i}.b"]
    return (F.cross_entropy(h, d["labels"]) if training else None), h


def bert(p, d, cfg, training):
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
    if not training:
        return None, logits
    # Masked-LM loss: mean cross-entropy over the positions whose mask is 1.
    per_position = F.cross_entropy(logits.flatten(0, 1), d["labels"].flatten(), reduction="none")
    mask = d["label_mask"].flatten()
    return (per_position * mask).sum() / mask.sum().clamp(min=1), logits


def vit(p, d, cfg, training):
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
    return (F.cross_entropy(logits, d["labels"]) if training else None), logits


def conv_bn(p, name, x, stride, padding, training):
    y = F.conv2d(x, p[f"{name}.w"], stride=stride, padding=padding)
    # Training: normalize with the batch's statistics; inference: with the running ones.
    mean, var = (None, None) if training else (p[f"{name}.bn.mean"], p[f"{name}.bn.var"])
    return F.batch_norm(y, mean, var, p[f"{name}.bn.scale"], p[f"{name}.bn.bias"],
                        training=training, eps=1e-5)


def resnet(p, d, cfg, training):
    h = F.relu(conv_bn(p, "stem.conv", d["images"], 2, 3, training))
    h = F.max_pool2d(h, 3, 2, 1)
    for stage in range(1, 5):
        for block in range(layer_count(p, f"stage{stage}.block")):
            name = f"stage{stage}.block{block}"
            stride = 2 if stage > 1 and block == 0 else 1
            if cfg["bottleneck"]:
                y = F.relu(conv_bn(p, f"{name}.conv1", h, 1, 0, training))
                y = F.relu(conv_bn(p, f"{name}.conv2", y, stride, 1, training))
                y = conv_bn(p, f"{name}.conv3", y, 1, 0, training)
            else:
                y = F.relu(conv_bn(p, f"{name}.conv1", h, stride, 1, training))
                y = conv_bn(p, f"{name}.conv2", y, 1, 1, training)
            if f"{name}.downsample.w" in p:
                h = conv_bn(p, f"{name}.downsample", h, stride, 0, training)
            h = F.relu(y + h)
    logits = h.mean(dim=(2, 3)) @ p["fc.w"] + p["fc.b"]
    return (F.cross_entropy(logits, d["labels"]) if training else None), logits


def xml_cnn(p, d, cfg, training):
    x = F.embedding(d["tokens"], p["embed"]).transpose(1, 2)  # [batch, embedding, seq]
    pooled = []
    for window in (2, 4, 8):
        y = F.relu(F.conv1d(x, p[f"conv{window}.w"], p[f"conv{window}.b"], padding="same"))
        # Dynamic max pooling: the max of each of `chunks` equal pieces of the sequence.
        pooled.append(F.adaptive_max_pool1d(y, cfg["chunks"]).flatten(1))
    h = F.relu(torch.cat(pooled, dim=1) @ p["bottleneck.w"] + p["bottleneck.b"])
    logits = h @ p["output.w"] + p["output.b"]
    if not training:
        return None, logits
    return F.binary_cross_entropy_with_logits(logits, d["targets"]), logits


def adjacency_matrix(d):
    """The normalized adjacency as a sparse COO tensor (CSR arrays in the data)."""
    row_ptr = d["adjacency.row_ptr"]
    nodes = row_ptr.shape[0] - 1
    rows = torch.repeat_interleave(torch.arange(nodes), row_ptr[1:] - row_ptr[:-1])
    indices = torch.stack([rows, d["adjacency.col_indices"]])
    return torch.sparse_coo_tensor(indices, d["adjacency.values"], (nodes, nodes)).coalesce()


def gcn(p, d, cfg, training):
    adjacency = d["adjacency"] if "adjacency" in d else adjacency_matrix(d)
    h = F.relu(torch.sparse.mm(adjacency, d["features"] @ p["gc1.w"]) + p["gc1.b"])
    logits = torch.sparse.mm(adjacency, h @ p["gc2.w"]) + p["gc2.b"]
    return (F.cross_entropy(logits, d["labels"]) if training else None), logits


FAMILIES = {"mlp": mlp, "bert": bert, "vit": vit, "resnet": resnet, "xml-cnn": xml_cnn,
            "gcn": gcn}


def forward(preset, params, data, training):
    """(loss, logits) of `preset`; the loss is None when not training."""
    cfg = PRESETS[preset]
    return FAMILIES[cfg["family"]](params, data, cfg, training)
