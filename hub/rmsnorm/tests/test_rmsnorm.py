import pytest
import torch


def reference(x, weight, eps):
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(1, 576), (3, 7, 64), (33, 100)])
def test_rms_norm_matches_eager(kernel, dtype, shape):
    x = torch.randn(shape, dtype=dtype)
    weight = torch.randn(shape[-1], dtype=dtype)
    torch.testing.assert_close(kernel.rms_norm(x, weight, 1e-6), reference(x, weight, 1e-6))


def test_out_form_writes_into_out(kernel):
    x, weight = torch.randn(4, 64), torch.randn(64)
    out = torch.empty_like(x)
    assert kernel.rms_norm(x, weight, 1e-5, out=out) is out
    torch.testing.assert_close(out, reference(x, weight, 1e-5))


def test_layer(kernel):
    layer = kernel.layers.RMSNorm()
    layer.weight = torch.nn.Parameter(torch.randn(64))
    layer.variance_epsilon = 1e-6
    x = torch.randn(2, 5, 64)
    torch.testing.assert_close(layer(x), reference(x, layer.weight.detach(), 1e-6))
