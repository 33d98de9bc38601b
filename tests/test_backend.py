"""The one module that touches kernels' internals: modes, mappings, origins."""

from __future__ import annotations

import pytest
from kernels import CUDAProperties, Device, LayerRepository, Mode

from kernel_explorer._backend.layers import kernel_origin
from kernel_explorer._backend.mappings import iter_mapping
from kernel_explorer._backend.modes import mode_name, mode_priority, parse_mode
from kernel_explorer.errors import KernelExplorerError


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
    with pytest.raises(KernelExplorerError, match=r"use 'inference', 'training' or 'torch\.compile'"):
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


def test_every_internal_relied_on_is_where_the_backend_expects_it() -> None:
    from kernel_explorer._backend.internals import missing_internals

    assert missing_internals() == []


def test_private_attributes_read_off_library_objects_exist(hub: dict) -> None:
    from pathlib import Path

    from kernels import LocalLayerRepository

    from kernel_explorer._backend.functions import kernel_functions
    from kernel_explorer._backend.internals import ATTRIBUTES
    from kernel_explorer.models import tiny_llama

    hub_repo = LayerRepository("org/repo", layer_name="X", version=1)
    local = LocalLayerRepository(repo_path=Path("."), layer_name="X")
    assert all(hasattr(hub_repo, name) for name in ATTRIBUTES["kernels.LayerRepository"])
    assert all(hasattr(local, name) for name in ATTRIBUTES["kernels.LocalLayerRepository"])
    attention = tiny_llama().model.layers[0].self_attn
    assert all(name in vars(attention) for name in ATTRIBUTES["use_kernelized_func holders"])
    assert kernel_functions(attention)  # the rotary function layer, read through the accessor
    assert all(hasattr(attention.config, name) for name in ATTRIBUTES["transformers.PretrainedConfig"])


def test_a_moved_internal_is_named_with_the_installed_version(monkeypatch: pytest.MonkeyPatch) -> None:
    import kernels.layer.repos

    from kernel_explorer._backend.internals import missing_internals

    monkeypatch.delattr(kernels.layer.repos, "_MODE_FALLBACK_PRIORITY")
    (line,) = missing_internals()
    assert line.startswith("kernels.layer.repos._MODE_FALLBACK_PRIORITY: name missing in kernels 0.17")
    assert "tested with kernels 0.17.2" in line and "_backend" in line


def _library_uses_outside_backend() -> list[str]:
    """`kernels`/Transformers submodule imports and private names used outside `_backend`."""
    import ast
    from pathlib import Path

    import kernel_explorer
    from kernel_explorer._backend.internals import ATTRIBUTES

    private_attributes = {name for names in ATTRIBUTES.values() for name in names}
    package = Path(kernel_explorer.__file__).parent
    found = []
    for path in package.rglob("*.py"):
        if "_backend" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(package)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and node.module:
                root = node.module.split(".")[0]
                if root in ("kernels", "transformers"):
                    private = [a.name for a in node.names if a.name.startswith("_")]
                    internal = root == "kernels" and node.module != "kernels"
                    if private or internal:
                        found.append(f"{where} from {node.module} import {[a.name for a in node.names]}")
            elif isinstance(node, ast.Attribute) and node.attr in private_attributes:
                found.append(f"{where} .{node.attr}")
            elif isinstance(node, ast.Constant) and node.value in private_attributes:
                found.append(f"{where} {node.value!r}")
    return found


def test_nothing_outside_the_backend_touches_library_internals() -> None:
    assert _library_uses_outside_backend() == []
