"""Each ATen op Kiln converts, against PyTorch eager: forward, and where the op is
differentiable the backward too. Every case must run wholly in Kiln (no node left to PyTorch),
so that it tests Kiln's conversion and not PyTorch's own op."""

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_close, kiln_compile

torch.manual_seed(0)


def rand(*shape):
    return torch.randn(*shape)


# (name, function, inputs): inputs that are floating tensors get gradients.
CASES = [
    ("unary", lambda x: torch.exp(x) + torch.tanh(x) * torch.sigmoid(x) - torch.abs(x).sqrt()
     + torch.erf(x) + torch.sin(x) * torch.cos(x) - torch.neg(x).relu(), [rand(3, 5)]),
    ("unary_rounding", lambda x: torch.floor(x) + torch.ceil(x) + torch.sign(x)
     + torch.round(x * 3), [rand(4, 6)]),
    ("log_rsqrt_reciprocal", lambda x: torch.log(x) + torch.rsqrt(x) + torch.reciprocal(x),
     [rand(3, 4).abs() + 0.5]),
    ("binary_broadcast", lambda a, b: (a + b) * (a - 2 * b) / (b * b + 1) + a * 3.5 - 1,
     [rand(2, 3, 4), rand(3, 1)]),
    ("pow_max_min_clamp", lambda a, b: a.pow(2) + a.abs().pow(b.abs()) + torch.maximum(a, b)
     - torch.minimum(a, b) + a.clamp(-0.5, 0.7) + a.clamp(min=0.1), [rand(4, 5), rand(4, 5)]),
    ("compare_where", lambda a, b: torch.where((a > b) & ~(a < 0.2) | (a == b), a, b * 2)
     + torch.where(a >= 0.5, 1.0, 0.0) + torch.where(a != b, a, -1.0)
     + (a <= b).float(), [rand(3, 7), rand(3, 7)]),
    ("activations", lambda x: F.relu6(x * 4) + F.hardtanh(x, -0.5, 0.25) + F.leaky_relu(x, 0.1)
     + F.hardswish(x) + F.silu(x), [rand(4, 9)]),
    ("gelu_forms", lambda x: F.gelu(x) + F.gelu(x, approximate="tanh"), [rand(4, 8)]),
    ("reductions", lambda x: x.sum(dim=1, keepdim=True) + x.mean(dim=(0, 2)).sum()
     + x.amax(dim=-1, keepdim=True) - x.amin(dim=2, keepdim=True) + x.var(dim=1).sum()
     + x.sum(), [rand(2, 3, 5)]),
    ("views", lambda x: x.view(6, 4).t().reshape(2, 12).unsqueeze(0).squeeze(0)
     .permute(1, 0).transpose(0, 1).contiguous().expand(3, 2, 12).sum(0), [rand(2, 3, 4)]),
    ("slices_cat_split", lambda x: torch.cat([x[:, 1:3], x[:, ::2], x[-1:, :2]], dim=0)
     .split([2, 5], dim=0)[1] + x.select(0, 1).sum(), [rand(3, 4)]),
    ("softmax", lambda x: F.softmax(x, dim=-1) + F.log_softmax(x, dim=1), [rand(4, 10)]),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (16,), w, b, eps=1e-5)
     + F.layer_norm(x, (16,)), [rand(2, 3, 16), rand(16), rand(16)]),
    ("matmuls", lambda a, b, c, bias: torch.mm(a, b) + F.linear(a, b.t(), bias)
     + torch.bmm(c, c.transpose(1, 2)).sum(0)[:3, :5],
     [rand(3, 4), rand(4, 5), rand(2, 6, 4), rand(5)]),
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1)
     + F.conv2d(x, w, None, stride=2, padding=1, dilation=1),
     [rand(2, 3, 9, 9), rand(4, 3, 3, 3), rand(4)]),
    ("grouped_conv", lambda x, w: F.conv2d(x, w, groups=2, padding=1),
     [rand(1, 4, 6, 6), rand(6, 2, 3, 3)]),
    ("pad", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), [rand(2, 3, 4)]),
    ("pools", lambda x: torch.cat([
        F.max_pool2d(x, 3, 2, 1).flatten(), F.max_pool2d(F.relu(x), 2).flatten(),
        F.avg_pool2d(x, 3, 2, 1).flatten(),
        F.avg_pool2d(x, 3, 2, 1, count_include_pad=False).flatten(),
        F.adaptive_avg_pool2d(x, 1).flatten()]), [rand(2, 3, 9, 9)]),
    ("attention", lambda q, k, v: F.scaled_dot_product_attention(q, k, v)
     + F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
     [rand(2, 3, 5, 8), rand(2, 3, 7, 8), rand(2, 3, 7, 8)]),
    ("attention_masks", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)
     + F.scaled_dot_product_attention(q, k, v, attn_mask=(m > 0) | torch.eye(5, 7, dtype=bool)),
     [rand(2, 3, 5, 8), rand(2, 3, 7, 8), rand(2, 3, 7, 8), rand(5, 7)]),
    ("cross_entropy", lambda x, y: F.cross_entropy(x, y) + F.cross_entropy(x, y, reduction="sum"),
     [rand(6, 5), torch.randint(0, 5, (6,))]),
    ("batch_norm_training", lambda x, w, b: F.batch_norm(
        x, torch.zeros(3), torch.ones(3), w, b, training=True, momentum=0.1, eps=1e-5),
     [rand(4, 3, 5, 5), rand(3), rand(3)]),
]


@pytest.mark.parametrize("name,fn,inputs", CASES, ids=[c[0] for c in CASES])
def test_op_forward_and_backward(name, fn, inputs):
    compiled, report = kiln_compile(fn)
    eager_inputs = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    kiln_inputs = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    expected = fn(*eager_inputs)
    actual = compiled(*kiln_inputs)
    assert_close(actual, expected, what=name)
    seed = torch.randn_like(expected)
    (expected * seed).sum().backward()
    (actual * seed).sum().backward()
    for i, (a, e) in enumerate(zip(kiln_inputs, eager_inputs)):
        if e.grad is not None:
            assert_close(a.grad, e.grad, rtol=1e-4, what=f"{name}: gradient of input {i}")
    assert report.graphs, f"{name}: Kiln compiled nothing"
    assert not report.fallbacks, f"{name}: left to PyTorch: {report.fallbacks}"


def test_integer_and_bool_ops_forward():
    def fn(i, x):
        mask = i > 2
        return torch.where(mask, x, x * 2) + i.to(torch.float32) + (i * 2 + 1).sum()

    compiled, report = kiln_compile(fn)
    i = torch.randint(0, 5, (4, 6))
    x = rand(4, 6)
    assert_close(compiled(i, x), fn(i, x))
    assert not report.fallbacks, report.fallbacks


def test_embedding_forward_and_backward():
    weight = rand(10, 4)
    indices = torch.tensor([[1, 0, 3], [9, 3, 0]])

    def fn(w, idx):
        return F.embedding(idx, w, padding_idx=0) * 2

    compiled, report = kiln_compile(fn)
    we = weight.clone().requires_grad_()
    wk = weight.clone().requires_grad_()
    assert_close(compiled(wk, indices), fn(we, indices))
    fn(we, indices).sum().backward()
    compiled(wk, indices).sum().backward()
    assert_close(wk.grad, we.grad, what="embedding gradient")
    assert not report.fallbacks, report.fallbacks
