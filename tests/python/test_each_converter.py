"""Every ATen overload Kiln converts, called on its own: traced by make_fx without
decompositions (so the graph holds exactly that overload), compiled by Kiln and compared with
PyTorch running the same call. A converter without a case here fails the last test, so each
one the importer lists is checked against PyTorch itself."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import kiln
from conftest import assert_close
from kiln.backend import KilnGraph

aten = torch.ops.aten
torch.manual_seed(0)


def r(*shape):
    return torch.randn(*shape)


def pos(*shape):
    return torch.rand(*shape) + 0.5


def idx(high, *shape):
    return torch.randint(0, high, shape)


X = r(3, 4)
IMG = r(2, 3, 6, 6)
Q, K, V = r(2, 2, 5, 8), r(2, 2, 6, 8), r(2, 2, 6, 8)

# overload -> (function of the inputs calling it, inputs)
DIRECT = {
    "aten._embedding_bag.default": (
        lambda w, i, o: aten._embedding_bag(w, i, o, False, 1, False, None, False, 4),
        [r(10, 3), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0]), torch.tensor([0, 4, 4, 7])]),
    "aten._embedding_bag_backward.default": (
        lambda g, w, i, o: aten._embedding_bag_backward(
            g, i, o, *aten._embedding_bag(w, i, o, False, 1, False, None, False, 4)[1:], 10,
            False, 1, False, None, 4),
        [r(4, 3), r(10, 3), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0]), torch.tensor([0, 4, 4, 7])]),
    "aten._embedding_bag_forward_only.default": (
        lambda w, i, o, s: aten._embedding_bag_forward_only(w, i, o, False, 0, False, s),
        [r(10, 3), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0]), torch.tensor([0, 4, 4, 7]),
         pos(9)]),
    "aten._log_softmax.default": (lambda x: aten._log_softmax(x, 1, False), [X]),
    "aten._native_batch_norm_legit_functional.default": (
        lambda x, w, b, m, v: aten._native_batch_norm_legit_functional(x, w, b, m, v, True, 0.1,
                                                                         1e-5),
        [IMG, r(3), r(3), r(3), pos(3)]),
    "aten._scaled_dot_product_flash_attention_for_cpu.default": (
        lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=True),
        [Q, K, V]),
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default": (
        lambda g, q, k, v: aten._scaled_dot_product_flash_attention_for_cpu_backward(
            g, q, k, v, *aten._scaled_dot_product_flash_attention_for_cpu(q, k, v), 0.0, False),
        [r(2, 2, 5, 8), Q, K, V]),
    "aten._softmax.default": (lambda x: aten._softmax(x, 0, False), [X]),
    "aten._to_copy.default": (lambda x: aten._to_copy(x, dtype=torch.float64), [X]),
    "aten._unsafe_view.default": (lambda x: aten._unsafe_view(x, [4, 3]), [X]),
    "aten.abs.default": (lambda x: aten.abs(x), [X]),
    "aten.add.Scalar": (lambda x: aten.add.Scalar(x, 2.5, alpha=2), [X]),
    "aten.add.Tensor": (lambda x, y: aten.add.Tensor(x, y, alpha=0.5), [X, r(4)]),
    "aten.addmm.default": (lambda b, x, w: aten.addmm(b, x, w, beta=0.5, alpha=2),
                           [r(5), X, r(4, 5)]),
    "aten.alias.default": (lambda x: aten.alias(x) * 1, [X]),
    "aten.amax.default": (lambda x: aten.amax(x, [1], True), [X]),
    "aten.amin.default": (lambda x: aten.amin(x, [0]), [X]),
    "aten.any.dim": (lambda x: aten.any.dim(x > 1, 1), [X]),
    "aten.arange.default": (lambda x: x + aten.arange(4, dtype=torch.float32), [X]),
    "aten.arange.start": (lambda x: x + aten.arange(2, 6, dtype=torch.float32), [X]),
    "aten.arange.start_step": (lambda x: x + aten.arange(1, 9, 2, dtype=torch.float32), [X]),
    "aten.avg_pool2d.default": (lambda x: aten.avg_pool2d(x, [3, 3], [2, 2], [1, 1], False, False),
                                [IMG]),
    "aten.avg_pool2d_backward.default": (
        lambda g, x: aten.avg_pool2d_backward(g, x, [3, 3], [2, 2], [1, 1], False, True, None),
        [r(2, 3, 3, 3), IMG]),
    "aten.bitwise_and.Tensor": (lambda x, y: aten.bitwise_and(x > 0, y > 0), [X, r(3, 4)]),
    "aten.bitwise_not.default": (lambda x: aten.bitwise_not(x > 0), [X]),
    "aten.bitwise_or.Tensor": (lambda x, y: aten.bitwise_or(x > 0, y > 0), [X, r(3, 4)]),
    "aten.bitwise_xor.Tensor": (lambda x, y: aten.bitwise_xor(x > 0, y > 0), [X, r(3, 4)]),
    "aten.bmm.default": (lambda a, b: aten.bmm(a, b), [r(2, 3, 4), r(2, 4, 5)]),
    "aten.cat.default": (lambda x, y: aten.cat([x, y], 1), [X, r(3, 2)]),
    "aten.ceil.default": (lambda x: aten.ceil(x), [X]),
    "aten.clamp.default": (lambda x: aten.clamp(x, -0.5, 0.5), [X]),
    "aten.clone.default": (lambda x: aten.clone(x) * 1, [X]),
    "aten.constant_pad_nd.default": (lambda x: aten.constant_pad_nd(x, [1, -1, 2, 0], 0.5), [X]),
    "aten.convolution.default": (
        lambda x, w, b: aten.convolution(x, w, b, [2, 1], [1, 0], [1, 1], False, [0, 0], 1),
        [IMG, r(4, 3, 3, 3), r(4)]),
    "aten.convolution_backward.default": (
        lambda g, x, w: aten.convolution_backward(g, x, w, [4], [1, 1], [1, 1], [1, 1], False,
                                                  [0, 0], 1, [True, True, True]),
        [r(2, 4, 6, 6), IMG, r(4, 3, 3, 3)]),
    "aten.cos.default": (lambda x: aten.cos(x), [X]),
    "aten.cumsum.default": (lambda x: aten.cumsum(x, 1), [X]),
    "aten.div.Scalar": (lambda x: aten.div.Scalar(x, 3), [X]),
    "aten.div.Tensor": (lambda x, y: aten.div.Tensor(x, y), [X, pos(3, 4)]),
    "aten.elu.default": (lambda x: aten.elu(x, 0.7, 1.05, 0.5), [X]),
    "aten.elu_backward.default": (
        lambda g, x: aten.elu_backward(g, 0.7, 1.05, 0.5, False, x), [r(3, 4), X]),
    "aten.embedding.default": (lambda w, i: aten.embedding(w, i), [r(10, 4), idx(10, 2, 3)]),
    "aten.embedding_dense_backward.default": (
        lambda g, i: aten.embedding_dense_backward(g, i, 10, 0, False),
        [r(2, 3, 4), torch.tensor([[1, 0, 3], [9, 3, 0]])]),
    # An empty tensor's contents are unspecified: only where it is not chosen is it compared.
    "aten.empty.memory_format": (lambda x: aten.where(x > 99, aten.empty([3, 4]), x), [X]),
    "aten.empty_permuted.default": (
        lambda x: aten.where(x > 99, aten.empty_permuted([3, 4], [1, 0]), x), [X]),
    "aten.eq.Scalar": (lambda x: aten.eq.Scalar(x.round(), 1), [X]),
    "aten.eq.Tensor": (lambda x, y: aten.eq.Tensor(x.round(), y.round()), [X, r(3, 4)]),
    "aten.erf.default": (lambda x: aten.erf(x), [X]),
    "aten.exp.default": (lambda x: aten.exp(x), [X]),
    "aten.expand.default": (lambda x: aten.expand(x, [2, -1, -1]) * 1, [X]),
    "aten.expm1.default": (lambda x: aten.expm1(x), [X]),
    "aten.flip.default": (lambda x: aten.flip(x, [1]), [X]),
    "aten.floor.default": (lambda x: aten.floor(x), [X]),
    "aten.full.default": (lambda x: x + aten.full([3, 4], 1.5), [X]),
    "aten.full_like.default": (lambda x: x + aten.full_like(x, 2.0), [X]),
    "aten.gather.default": (lambda x, i: aten.gather(x, 1, i), [X, idx(4, 3, 2)]),
    "aten.ge.Scalar": (lambda x: aten.ge.Scalar(x, 0.5), [X]),
    "aten.ge.Tensor": (lambda x, y: aten.ge.Tensor(x, y), [X, r(4)]),
    "aten.gelu.default": (lambda x: aten.gelu(x, approximate="tanh"), [X]),
    "aten.gelu_backward.default": (lambda g, x: aten.gelu_backward(g, x), [r(3, 4), X]),
    "aten.gt.Scalar": (lambda x: aten.gt.Scalar(x, 0), [X]),
    "aten.gt.Tensor": (lambda x, y: aten.gt.Tensor(x, y), [X, r(3, 4)]),
    "aten.hardtanh.default": (lambda x: aten.hardtanh(x, -0.5, 0.25), [X]),
    "aten.hardtanh_backward.default": (lambda g, x: aten.hardtanh_backward(g, x, -0.5, 0.25),
                                       [r(3, 4), X]),
    "aten.index.Tensor": (lambda x, i, j: aten.index.Tensor(x, [i, None, j]),
                          [IMG, idx(2, 3, 1), idx(6, 4)]),
    "aten.index_add.default": (lambda x, i, s: aten.index_add(x, 0, i, s, alpha=2),
                               [X, torch.tensor([2, 0, 2]), r(3, 4)]),
    "aten.index_put.default": (lambda x, i, v: aten.index_put(x, [i], v, True),
                               [r(5, 4), torch.tensor([0, 2, 0]), r(3, 4)]),
    "aten.index_select.default": (lambda x, i: aten.index_select(x, 1, i),
                                  [X, torch.tensor([3, 0, 3])]),
    "aten.le.Scalar": (lambda x: aten.le.Scalar(x, 0), [X]),
    "aten.le.Tensor": (lambda x, y: aten.le.Tensor(x, y), [X, r(3, 4)]),
    "aten.leaky_relu.default": (lambda x: aten.leaky_relu(x, 0.2), [X]),
    "aten.leaky_relu_backward.default": (
        lambda g, x: aten.leaky_relu_backward(g, x, 0.2, False), [r(3, 4), X]),
    "aten.lift_fresh_copy.default": (lambda x: aten.lift_fresh_copy(x) * 1, [X]),
    "aten.log.default": (lambda x: aten.log(x), [pos(3, 4)]),
    "aten.log1p.default": (lambda x: aten.log1p(x), [pos(3, 4) - 0.9]),
    "aten.logical_and.default": (lambda x, y: aten.logical_and(x, y), [X, r(3, 4)]),
    "aten.logical_not.default": (lambda x: aten.logical_not(x), [X]),
    "aten.logical_or.default": (lambda x, y: aten.logical_or(x > 0, y), [X, r(3, 4)]),
    "aten.logical_xor.default": (lambda x, y: aten.logical_xor(x > 0, y > 0), [X, r(3, 4)]),
    "aten.lt.Scalar": (lambda x: aten.lt.Scalar(x, 0), [X]),
    "aten.lt.Tensor": (lambda x, y: aten.lt.Tensor(x, y), [X, r(3, 4)]),
    "aten.max_pool2d_with_indices.default": (
        lambda x: aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1]), [IMG]),
    "aten.max_pool2d_with_indices_backward.default": (
        lambda g, x: aten.max_pool2d_with_indices_backward(
            g, x, [3, 3], [2, 2], [1, 1], [1, 1], False,
            aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])[1]),
        [r(2, 3, 3, 3), IMG]),
    "aten.maximum.default": (lambda x, y: aten.maximum(x, y), [X, r(3, 4)]),
    "aten.mean.default": (lambda x: aten.mean(x), [X]),
    "aten.mean.dim": (lambda x: aten.mean.dim(x, [0], True), [X]),
    "aten.minimum.default": (lambda x, y: aten.minimum(x, y), [X, r(3, 4)]),
    "aten.mm.default": (lambda a, b: aten.mm(a, b), [X, r(4, 2)]),
    "aten.mul.Scalar": (lambda x: aten.mul.Scalar(x, -1.5), [X]),
    "aten.mul.Tensor": (lambda x, y: aten.mul.Tensor(x, y), [X, r(3, 1)]),
    "aten.native_layer_norm.default": (
        lambda x, w, b: aten.native_layer_norm(x, [4], w, b, 1e-5), [X, r(4), r(4)]),
    "aten.ne.Scalar": (lambda x: aten.ne.Scalar(x.round(), 0), [X]),
    "aten.ne.Tensor": (lambda x, y: aten.ne.Tensor(x.round(), y.round()), [X, r(3, 4)]),
    # Outside training, and its mask's backward: what does not draw (test_dropout.py checks the
    # draws).
    "aten.native_dropout.default": (lambda x: aten.native_dropout(x, 0.5, False), [X]),
    "aten.native_dropout_backward.default": (
        lambda g, x: aten.native_dropout_backward(g, x > 0, 2.0), [r(3, 4), X]),
    "aten.neg.default": (lambda x: aten.neg(x), [X]),
    "aten.permute.default": (lambda x: aten.permute(x, [1, 0]) * 1, [X]),
    "aten.pow.Tensor_Scalar": (lambda x: aten.pow.Tensor_Scalar(x, 3), [X]),
    "aten.pow.Tensor_Tensor": (lambda x, y: aten.pow.Tensor_Tensor(x, y), [pos(3, 4), X]),
    "aten.reciprocal.default": (lambda x: aten.reciprocal(x), [pos(3, 4)]),
    "aten.relu.default": (lambda x: aten.relu(x), [X]),
    "aten.round.default": (lambda x: aten.round(x * 3), [X]),
    "aten.rsqrt.default": (lambda x: aten.rsqrt(x), [pos(3, 4)]),
    "aten.scalar_tensor.default": (lambda x: x + aten.scalar_tensor(2.5), [X]),
    "aten.scatter.src": (lambda x, i, s: aten.scatter.src(x, 1, i, s),
                          [X, torch.tensor([[3, 0], [1, 2], [0, 3]]), r(3, 2)]),
    "aten.scatter.value": (lambda x, i: aten.scatter.value(x, 1, i, -2.0), [X, idx(4, 3, 2)]),
    "aten.scatter_add.default": (lambda x, i, s: aten.scatter_add(x, 1, i, s),
                                 [X, idx(4, 3, 2), r(3, 3)]),
    "aten.select.int": (lambda x: aten.select(x, 1, -1) * 1, [X]),
    "aten.sigmoid.default": (lambda x: aten.sigmoid(x), [X]),
    "aten.sigmoid_backward.default": (lambda g, y: aten.sigmoid_backward(g, y),
                                      [r(3, 4), pos(3, 4) - 0.5]),
    "aten.sign.default": (lambda x: aten.sign(x), [X]),
    "aten.sin.default": (lambda x: aten.sin(x), [X]),
    "aten.slice.Tensor": (lambda x: aten.slice(x, 1, 1, 100, 2) * 1, [X]),
    "aten.slice_scatter.default": (lambda x, s: aten.slice_scatter(x, s, 1, 0, 4, 2),
                                   [X, r(3, 2)]),
    "aten.split.Tensor": (lambda x: aten.split.Tensor(x, 3, 1)[1] * 1, [X]),
    "aten.split_with_sizes.default": (lambda x: aten.split_with_sizes(x, [1, 3], 1)[1] * 1, [X]),
    "aten.sqrt.default": (lambda x: aten.sqrt(x), [pos(3, 4)]),
    "aten.squeeze.default": (lambda x: aten.squeeze.default(x) * 1, [r(3, 1, 4)]),
    "aten.squeeze.dim": (lambda x: aten.squeeze.dim(x, 1) * 1, [r(3, 1, 4)]),
    "aten.squeeze.dims": (lambda x: aten.squeeze.dims(x, [1]) * 1, [r(3, 1, 4)]),
    "aten.sub.Scalar": (lambda x: aten.sub.Scalar(x, 1.5, alpha=2), [X]),
    "aten.sub.Tensor": (lambda x, y: aten.sub.Tensor(x, y, alpha=3), [X, r(3, 4)]),
    "aten.sum.default": (lambda x: aten.sum.default(x), [X]),
    "aten.sum.dim_IntList": (lambda x: aten.sum.dim_IntList(x, [1], True), [X]),
    "aten.t.default": (lambda x: aten.t(x) * 1, [X]),
    "aten.tanh.default": (lambda x: aten.tanh(x), [X]),
    "aten.tanh_backward.default": (lambda g, y: aten.tanh_backward(g, y),
                                   [r(3, 4), pos(3, 4) - 1]),
    "aten.threshold_backward.default": (lambda g, x: aten.threshold_backward(g, x, 0.1),
                                        [r(3, 4), X]),
    "aten.topk.default": (lambda x: aten.topk(x, 3, 1, largest=False), [X]),
    "aten.transpose.int": (lambda x: aten.transpose.int(x, 0, 1) * 1, [X]),
    "aten.tril_indices.default": (lambda x: x + aten.tril_indices(3, 4, 1), [idx(5, 2, 9)]),
    "aten.triu_indices.default": (lambda x: x + aten.triu_indices(4, 3, -1), [idx(5, 2, 9)]),
    "aten.unsqueeze.default": (lambda x: aten.unsqueeze(x, -1) * 1, [X]),
    "aten.var.correction": (lambda x: aten.var.correction(x, [1], correction=1), [X]),
    "aten.view.default": (lambda x: aten.view(x, [4, 3]) * 1, [X]),
    "aten.where.self": (lambda c, x, y: aten.where.self(c > 0, x, y), [X, r(3, 4), r(3, 4)]),
}


def outputs_of(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


@pytest.mark.parametrize("overload", sorted(DIRECT))
def test_converter_against_pytorch(overload):
    fn, inputs = DIRECT[overload]
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert overload in targets, f"the trace holds {sorted(targets)}, not {overload}"
    compiled = KilnGraph(gm, overload)
    for i, (actual, expected) in enumerate(zip(outputs_of(compiled(*inputs)),
                                               outputs_of(fn(*inputs)))):
        assert_close(actual, expected, rtol=1e-5, atol=1e-5, what=f"{overload} result {i}")


def test_every_converter_has_a_direct_case():
    assert sorted(set(kiln.supported_aten_ops()) - set(DIRECT)) == []
