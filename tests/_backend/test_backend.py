"""The one module that touches kernels' internals: modes, mappings, origins."""

from __future__ import annotations

import pytest
from kernels import CUDAProperties, Device, LayerRepository, Mode

from kernel_explorer._backend.layer_forwards import kernel_origin
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

    from kernel_explorer._backend.function_layers import kernel_functions
    from kernel_explorer._backend.internals import ATTRIBUTES, missing_attributes
    from kernel_explorer.loading import tiny_llama

    hub_repo = LayerRepository("org/repo", layer_name="X", version=1)
    local = LocalLayerRepository(repo_path=Path("."), layer_name="X")
    model = tiny_llama()
    attention = model.model.layers[0].self_attn
    from kernels import use_kernel_mapping

    from kernel_explorer._backend.internals import internal

    with use_kernel_mapping({"X": {"cpu": hub_repo}}, inherit_mapping=False):
        cpu_repos = internal("kernels.layer.globals", "_KERNEL_MAPPING").get()["X"]["cpu"]
    objects = {
        "kernels' CPU device repos": (cpu_repos, True),
        "kernels.LayerRepository": (hub_repo, False),
        "kernels.LocalLayerRepository": (local, False),
        "use_kernelized_func holders": (attention, True),
        "transformers.PretrainedConfig": (attention.config, False),
        "transformers.PreTrainedModel": (type(model), False),
    }
    assert objects.keys() == ATTRIBUTES.keys()  # every listed owner is checked on a real object
    missing = [
        line for owner, (obj, own) in objects.items() for line in missing_attributes(owner, obj, own=own)
    ]
    assert missing == []
    assert kernel_functions(attention)  # the rotary function layer, read through the accessor


def test_a_missing_private_attribute_is_named_with_the_installed_version() -> None:
    from kernel_explorer._backend.internals import missing_attributes

    line, *_ = missing_attributes("transformers.PreTrainedModel", object)  # one line per attribute
    assert line.startswith("transformers.PreTrainedModel._can_set_attn_implementation: attribute missing")
    assert "tested with transformers 5.22.2 and 5.25.0" in line and "_backend" in line


def test_a_moved_internal_is_named_with_the_installed_version(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from kernels import __version__

    from kernel_explorer._backend.internals import missing_internals, module_for

    location = module_for("kernels.layer.repos")
    monkeypatch.delattr(importlib.import_module(location), "_MODE_FALLBACK_PRIORITY")
    (line,) = missing_internals()
    assert line.startswith(f"{location}._MODE_FALLBACK_PRIORITY: name missing in kernels {__version__}")
    assert "tested with kernels 0.17.2 and 0.19.1" in line and "_backend" in line


@pytest.mark.parametrize(
    ("version", "module", "location"),
    [
        ("0.17.2", "kernels.layer.globals", "kernels.layer.globals"),
        ("0.17.2", "kernels.variants", "kernels.variants"),
        ("0.18.3", "kernels.layer.globals", "kernels._internals.layer.globals"),
        ("0.19.1", "kernels.variants", "kernels._internals.variants"),
        ("0.19.1", "kernels.hf_hub", "kernels._internals.hf_hub"),
        ("0.19.1", "kernels._rust", "kernels._rust"),  # the compiled module stayed
        ("0.19.1", "transformers.modeling_utils", "transformers.modeling_utils"),
    ],
)
def test_internals_are_looked_up_where_each_kernels_release_keeps_them(
    version: str, module: str, location: str
) -> None:
    from kernel_explorer._backend.internals import module_for

    assert module_for(module, version) == location


def test_every_internal_imports_through_the_lookup() -> None:
    from kernel_explorer._backend.internals import INTERNALS, internal

    for _, module, attribute in INTERNALS:
        assert internal(module, attribute) is not None, f"{module}.{attribute}"


def _library_uses(source: str, where: str) -> list[str]:
    """`kernels`/Transformers internals that `source` uses: submodule imports of kernels, `_`-names
    imported from either library, any name `_backend/internals.py` lists imported, and its private or
    capitalised names reached as attributes or strings."""
    import ast

    from kernel_explorer._backend.internals import ATTRIBUTES, INTERNALS

    listed = {name for names in ATTRIBUTES.values() for name in names} | {a for _, _, a in INTERNALS}
    # reached as an attribute: the private and capitalised ones (a plain `is_kernel` is also ours)
    distinctive = {name for name in listed if name.startswith("_") or not name.islower()}
    internal_modules = {m for _, m, _ in INTERNALS}
    found = []
    for node in ast.walk(ast.parse(source)):
        at = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            names = [a.name for a in node.names]
            if root in ("kernels", "transformers"):
                private = [n for n in names if n.startswith("_") or n in listed]
                internal = (
                    node.module in internal_modules
                    or any(f"{node.module}.{n}" in internal_modules for n in names)
                    or (root == "kernels" and node.module != "kernels")
                )
                if private or internal:
                    found.append(f"{at} from {node.module} import {names}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in internal_modules or alias.name.startswith("kernels."):
                    found.append(f"{at} import {alias.name}")
        elif isinstance(node, ast.Attribute) and node.attr in distinctive:
            found.append(f"{at} .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in distinctive:
            found.append(f"{at} {node.value!r}")
    return found


def _library_uses_outside_backend() -> list[str]:
    """Every use of a library internal in the package outside `_backend`."""
    from pathlib import Path

    import kernel_explorer

    package = Path(kernel_explorer.__file__).parent
    return [
        use
        for path in package.rglob("*.py")
        if "_backend" not in path.parts
        for use in _library_uses(path.read_text(), str(path.relative_to(package)))
    ]


@pytest.mark.parametrize(
    "source",
    [
        "from kernels.layer.kernelize import _find_device",
        "import kernels.layer.repos",
        "from transformers.utils.import_utils import KERNELS_MIN_VERSION",
        "from transformers.integrations import hub_kernels",
        "model.config._attn_implementation",
        "getattr(repo, '_repo_id')",
        "from kernels import _private",
        "import_utils.KERNELS_MAX_VERSION",
        "from transformers.integrations.hub_kernels import is_kernel",
    ],
)
def test_the_scan_finds_each_way_of_reaching_an_internal(source: str) -> None:
    assert _library_uses(source, "x.py")


def test_the_scan_lets_public_names_through() -> None:
    source = (
        "from kernels import Mode, get_local_kernel\nfrom transformers import PreTrainedModel\nimport kernels"
    )
    assert _library_uses(source, "x.py") == []


def test_nothing_outside_the_backend_touches_library_internals() -> None:
    assert _library_uses_outside_backend() == []
