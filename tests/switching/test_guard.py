"""The module-state guard: it sees every way a kernel changes its module and undoes each exactly."""

from __future__ import annotations

import torch
from torch import nn

from kernel_explorer.switching.guard import ModuleGuard


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inner = nn.Linear(8, 8)
        self.scale = nn.Parameter(torch.rand(8))
        self.register_buffer("shift", torch.rand(8))
        self.eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) * self.scale + self.shift


def tensors(module: nn.Module) -> dict[str, tuple[int, torch.dtype, tuple[int, ...], int]]:
    return {
        name: (id(t), t.dtype, tuple(t.shape), t.data_ptr())
        for name, t in [*module.named_parameters(), *module.named_buffers()]
    }


def test_a_repack_with_a_dtype_change_is_seen_and_undone_exactly() -> None:
    block, x = Block(), torch.rand(3, 8)
    before, state = block(x), tensors(block)
    guard = ModuleGuard(block)
    assert guard.changes() == [] and guard.summary() == "" and guard.kept_bytes == 0
    block.inner.weight.data = block.inner.weight.data.t().contiguous().to(torch.bfloat16)  # megablocks' way
    block.packed = True
    block.eps = 1e-5
    assert guard.changes() == ["weight converted to bfloat16", "packed added", "eps set"]
    assert guard.summary().startswith("changes its module on first use (weight converted to bfloat16")
    assert guard.kept_bytes == 8 * 8 * 4  # the float32 original, kept alive by the guard alone
    torch.testing.assert_close(type(block).forward(guard.original(), x), before, rtol=0, atol=0)
    guard.restore()
    assert tensors(block) == state and "packed" not in block.__dict__ and block.eps == 1e-6
    assert torch.equal(block(x), before)


def test_a_replaced_or_removed_parameter_comes_back_as_the_same_object() -> None:
    block = Block()
    state = tensors(block)
    guard = ModuleGuard(block)
    block.scale = nn.Parameter(torch.zeros(8))
    del block.shift
    assert set(guard.changes()) == {"scale replaced", "shift removed"}
    guard.restore()
    assert tensors(block) == state


def test_an_in_place_change_needs_copies_and_is_undone_with_them() -> None:
    block, x = Block(), torch.rand(3, 8)
    before = block(x)
    aliased = ModuleGuard(block)
    copied = ModuleGuard(block, copy_tensors=True)
    with torch.no_grad():
        block.scale.mul_(2)
    assert aliased.in_place and "scale changed in place" in aliased.changes()
    assert copied.kept_bytes == sum(t.numel() * t.element_size() for t in copied.module.state_dict().values())
    copied.restore()
    assert torch.equal(block(x), before)


def test_the_original_keeps_a_module_s_empty_slots() -> None:
    linear, x = nn.Linear(8, 4, bias=False), torch.rand(2, 8)
    before = linear(x)
    guard = ModuleGuard(linear)
    linear.packed = linear.weight.detach().t().contiguous()  # a kernel's cache (bundled Q4_1 does this)
    linear.weight.data = linear.weight.data.to(torch.bfloat16)
    assert torch.equal(type(linear).forward(guard.original(), x), before)  # bias: None, as the original
