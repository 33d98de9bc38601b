import pytest
import torch
import torch.nn.functional as F

CASES = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_quick": lambda x: x * torch.sigmoid(1.702 * x),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unary_matches_eager(kernel, name, dtype):
    x = torch.randn(7, 300, dtype=dtype)
    torch.testing.assert_close(getattr(kernel, name)(x), CASES[name](x), atol=1e-5, rtol=1.6e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_silu_and_mul_matches_eager(kernel, dtype):
    x = torch.randn(5, 2 * 96, dtype=dtype)
    torch.testing.assert_close(kernel.silu_and_mul(x), F.silu(x[..., :96]) * x[..., 96:])
