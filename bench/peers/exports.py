"""The architectures users bring, written as ordinary PyTorch modules and exported by
torch.onnx.export: the models of bench_exports.py's table (Kiln and ONNX Runtime on the same
file).

Usage: exports.py [--opset N] [--list] MODEL OUTDIR
writes OUTDIR/model.onnx and OUTDIR/input.npz (the inputs, by ONNX input name).

The modules are those of the model tests (tests/models/make_fixture.py: BERT, a GCN) at full
size, torchvision's ResNet-50 and ViT-B/16, and an XML-CNN written here. Weights are random
(seed 0); integer inputs are valid indices. The default opset, 14, is the one at which
torch's exporter still writes layer norm as ReduceMean, Sub, Pow, Sqrt and Div, as most
published exports do.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "models"))
import make_fixture  # noqa: E402  (the model tests' modules)

DEFAULT_OPSET = 14


class BertEncoderLayer(nn.Module):
    """One BERT encoder layer over hidden states, with the additive attention mask."""

    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.layer = make_fixture.BertLayer(hidden, heads, intermediate)

    def forward(self, hidden_states, mask_bias):
        return self.layer(hidden_states, mask_bias)


class XmlCnn(nn.Module):
    """XML-CNN (Liu et al. 2017), as Kiln's zoo builds it: embeddings, 1-d convolutions of
    windows 2, 4 and 8 with "same" padding and ReLU, dynamic max pooling in 4 chunks, a ReLU
    bottleneck and one logit per label."""

    def __init__(self, vocab=30000, embedding=300, filters=128, windows=(2, 4, 8), chunks=4,
                 seq=500, hidden=512, labels=3956):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embedding)
        self.convs = nn.ModuleList(
            [nn.Conv1d(embedding, filters, w, padding="same") for w in windows])
        self.pool = nn.MaxPool1d(seq // chunks)
        self.bottleneck = nn.Linear(filters * len(windows) * chunks, hidden)
        self.output = nn.Linear(hidden, labels)

    def forward(self, tokens):
        x = self.embedding(tokens).transpose(1, 2)
        pooled = [self.pool(F.relu(conv(x))).flatten(1) for conv in self.convs]
        return self.output(F.relu(self.bottleneck(torch.cat(pooled, dim=1))))


def bert_layer_inputs(batch, seq, hidden):
    def make(gen):
        mask = torch.ones(batch, seq)
        mask[0, seq // 2:] = 0  # the first sequence is padded
        return {"hidden_states": torch.randn(batch, seq, hidden, generator=gen),
                "mask_bias": (1.0 - mask[:, None, None, :]) * -10000.0}
    return make


def bert_inputs(batch, seq, vocab):
    """Token ids, token types (the second half of each sequence 1) and an attention mask
    padding the last tenth of the first sequence."""
    def make(gen):
        types = torch.zeros(batch, seq, dtype=torch.int64)
        types[:, seq // 2:] = 1
        mask = torch.ones(batch, seq, dtype=torch.int64)
        mask[0, seq - seq // 10:] = 0
        return {"input_ids": torch.randint(0, vocab, (batch, seq), generator=gen),
                "token_type_ids": types, "attention_mask": mask}
    return make


def resnet50():
    import torchvision
    return torchvision.models.resnet50(weights=None)


# name: (description, builder, input maker, output names)
MODELS = {
    "bert-base-layer": ("BERT-base encoder layer, batch 8, seq 128",
                        lambda: BertEncoderLayer(768, 12, 3072),
                        bert_layer_inputs(8, 128, 768), ["output"]),
    "bert-base": ("BERT-base (12 layers, hidden 768, vocab 30522, pooler), batch 1, seq 128",
                  lambda: make_fixture.Bert(vocab=30522, hidden=768, layers=12, heads=12,
                                            intermediate=3072, max_positions=512),
                  bert_inputs(batch=1, seq=128, vocab=30522),
                  ["last_hidden_state", "pooler_output"]),
    "bert-large-layer": ("BERT-large encoder layer, batch 8, seq 128",
                         lambda: BertEncoderLayer(1024, 16, 4096),
                         bert_layer_inputs(8, 128, 1024), ["output"]),
    "resnet-50": ("torchvision ResNet-50, batch 1, 224x224", resnet50,
                  make_fixture.image(1, 224), ["logits"]),
    "vit-b16": ("torchvision ViT-B/16, batch 1, 224x224", make_fixture.vision_transformer(224),
                make_fixture.image(1, 224), ["logits"]),
    "xml-cnn": ("XML-CNN (vocab 30000, embedding 300, 3956 labels), batch 8, seq 500", XmlCnn,
                make_fixture.text_inputs(batch=8, seq=500, vocab=30000), ["logits"]),
    "gcn": ("GCN, 2 layers (1433 features, hidden 16, 7 classes), 2,048 nodes, dense adjacency",
            lambda: make_fixture.GCN(features=1433, hidden=16, classes=7),
            make_fixture.graph_inputs(nodes=2048, features=1433), ["log_probs"]),
}


def export(name, outdir, opset=DEFAULT_OPSET):
    """Writes outdir/model.onnx and outdir/input.npz for MODELS[name]; returns the paths."""
    _, build, make_inputs, output_names = MODELS[name]
    torch.manual_seed(0)
    model = build()
    make_fixture.randomize_normalization(model, torch.Generator().manual_seed(1))
    model.eval()
    inputs = make_inputs(torch.Generator().manual_seed(2))
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    onnx_path, input_path = outdir / "model.onnx", outdir / "input.npz"
    # With gradients on: without them, nn.MultiheadAttention (ViT's) takes its fused fast
    # path, which the exporter cannot write.
    torch.onnx.export(model, tuple(inputs.values()), str(onnx_path), dynamo=False,
                      input_names=list(inputs), output_names=output_names, opset_version=opset)
    np.savez(input_path, **{k: v.numpy() for k, v in inputs.items()})
    return onnx_path, input_path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET)
    parser.add_argument("model", nargs="?")
    parser.add_argument("outdir", nargs="?")
    args = parser.parse_args()
    if args.list:
        for name, (description, *_) in MODELS.items():
            print(f"{name:18} {description}")
        return 0
    if args.model not in MODELS or not args.outdir:
        parser.error(f"a model ({', '.join(MODELS)}) and an output directory are needed")
    for path in export(args.model, args.outdir, args.opset):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
