"""The one module that touches kernels' internals: modes, mappings, origins."""

from __future__ import annotations

import pytest
from kernels import CUDAProperties, Device, LayerRepository, Mode

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.kernels_bridge import iter_mapping, kernel_origin, mode_name, mode_priority, parse_mode


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("inference", Mode.INFERENCE),
        ("Training", Mode.TRAINING),
        ("torch.compile", Mode.INFERENCE | Mode.TORCH_COMPILE),
        ("training + torch.compile", Mode.TRAINING | Mode.TORCH_COMPILE),
    ],
)
def test_parse_mode(text: str, mode: Mode) -> None:
    assert parse_mode(text) == mode
    assert parse_mode(mode) is mode


def test_unknown_mode_names_the_choices() -> None:
    with pytest.raises(KernelExplorerError, match="Use one of: inference, training"):
        parse_mode("eval")


def test_mode_names_and_priority() -> None:
    assert mode_name(Mode.FALLBACK) == "any mode"
    assert mode_name(Mode.TRAINING | Mode.TORCH_COMPILE) == "training+torch.compile"
    assert mode_priority(Mode.TRAINING) == [Mode.TRAINING, Mode.TRAINING | Mode.TORCH_COMPILE, Mode.FALLBACK]


def test_iter_mapping_flattens_devices_and_modes() -> None:
    repo = LayerRepository("org/repo", layer_name="X", version=1)
    device = Device(type="cuda", properties=CUDAProperties(min_capability=75, max_capability=89))
    entries = list(iter_mapping({"X": {"cpu": repo, device: {Mode.TRAINING: repo, Mode.INFERENCE: repo}}}))
    assert [(e.device, e.properties, e.mode) for e in entries] == [
        ("cpu", None, Mode.FALLBACK),
        ("cuda", "capability 75-89", Mode.TRAINING),
        ("cuda", "capability 75-89", Mode.INFERENCE),
    ]


def test_kernel_origin_of_plain_code_is_none() -> None:
    assert kernel_origin(test_kernel_origin_of_plain_code_is_none) is None


def test_kernel_origin_of_a_loaded_kernel(hub: dict) -> None:
    rmsnorm = hub["rmsnorm"]
    origin = kernel_origin(rmsnorm.layers.RMSNorm.forward)
    assert origin is not None and origin.kernel_id == rmsnorm.__name__
    assert origin.variant == "torch213-cxx11-cpu-x86_64-linux" and origin.repository.endswith("rmsnorm")
