"""Finding kernel layers the way kernelize does, on real Transformers models."""

from __future__ import annotations

from torch import nn

from kernel_explorer.inspect.layer_groups import find_kernel_layers
from kernel_explorer.loading import tiny_gpt2, tiny_llama


def _by_name(model: nn.Module) -> dict:
    return {g.name: g for g in find_kernel_layers(model)}


def test_tiny_llama_layers() -> None:
    groups = _by_name(tiny_llama(num_layers=3))
    assert len(groups["RMSNorm"]) == 2 * 3 + 1  # two per block + the final norm
    assert len(groups["SiLU"]) == 3
    rotary = groups["rotary_pos_emb"]
    assert rotary.kind == "function" and rotary.original.endswith("apply_rotary_pos_emb")
    assert rotary.instances == tuple(f"model.layers.{i}.self_attn" for i in range(3))


def test_tiny_gpt2_gelu() -> None:
    groups = _by_name(tiny_gpt2(num_layers=2))
    assert set(groups) == {"NewGELU"}
    assert groups["NewGELU"].original.endswith("NewGELUActivation")


def test_plain_module_without_marks_has_no_layers() -> None:
    assert find_kernel_layers(nn.Sequential(nn.Linear(2, 2), nn.ReLU())) == []


def test_kernel_condition_false_is_skipped() -> None:
    from kernels import use_kernel_forward_from_hub

    @use_kernel_forward_from_hub("Doubler", condition=lambda m: m.enabled)
    class Doubler(nn.Module):
        def __init__(self, enabled: bool) -> None:
            super().__init__()
            self.enabled = enabled

        def forward(self, x):
            return 2 * x

    model = nn.Sequential(Doubler(True), Doubler(False))
    (group,) = find_kernel_layers(model)
    assert group.instances == ("0",)
