import pytest
import torch


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens", [1, 17])
def test_apply_rotary_matches_eager(kernel, dtype, tokens):
    q = torch.randn(2, 9, tokens, 64, dtype=dtype)
    k = torch.randn(2, 3, tokens, 64, dtype=dtype)
    angles = torch.rand(2, tokens, 32) * 6.28
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    q_out, k_out = kernel.apply_rotary(q, k, cos, sin)
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    torch.testing.assert_close(q_out, q * c + rotate_half(q) * s)
    torch.testing.assert_close(k_out, k * c + rotate_half(k) * s)
