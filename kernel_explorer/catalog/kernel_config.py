"""A Transformers `KernelConfig` read as a kernel mapping, so `Explorer(model, mapping=config)` takes
the form Transformers users already write for `from_pretrained(..., kernel_config=config)`.

`KernelConfig.kernel_mapping` names a layer's kernel as "org/repo:Layer" (or, with
`use_local_kernel`, "/abs/path:Layer"), alone or per device, optionally as a tuple with
`{"revision"|"version"|"trust_remote_code": ...}`. This turns each into the `LayerRepository` or
`LocalLayerRepository` `kernels.use_kernel_mapping` takes, the way Transformers' own
`add_to_mapping` does. Where Transformers itself would refuse the config (it takes only the
devices in `KERNELS_SUPPORTED_DEVICE_TYPES`, not "cpu") one warning line says so, and the explorer
explores the rest anyway.

Two things a mapping cannot hold become inventory rows instead (`kernel_config_rows`): a tuple key,
which fuses sibling modules into one kernel layer through the repository's `<Layer>Layout` class
while `from_pretrained` builds the model (Transformers' `register_kernel_replacements_and_fusions`),
and `inherit_mapping=False` (or `use_local_kernel`), which hides every other mapping from
Transformers' `kernelize`.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer.catalog.door_row import KERNEL_CONFIG, DoorRow
from kernel_explorer.errors import KernelExplorerError, KernelExplorerWarning

if TYPE_CHECKING:
    from torch import nn

_FORM = "'org/repo:Layer', ('org/repo:Layer', {'revision': ...}) or {device: one of those}"


def is_kernel_config(value: object) -> bool:
    """A Transformers `KernelConfig` (checked by shape: importing Transformers to ask costs seconds)."""
    return type(value).__name__ == "KernelConfig" and isinstance(getattr(value, "kernel_mapping", None), dict)


def _transformers_devices() -> tuple[str, ...]:
    from transformers.utils import kernel_config

    return tuple(getattr(kernel_config, "KERNELS_SUPPORTED_DEVICE_TYPES", ()))


def _repository(layer: str, spec: Any, local: bool) -> Any:
    from kernels import LayerRepository, LocalLayerRepository

    options: dict[str, Any] = {}
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], dict):
        spec, options = spec
    if not isinstance(spec, str) or ":" not in spec or ("/" not in spec and not local):
        raise KernelExplorerError(f"KernelConfig entry {layer!r}: {spec!r} is not of the form {_FORM}")
    source, layer_name = spec.rsplit(":", 1)
    if local:
        return LocalLayerRepository(Path(source), layer_name=layer_name)
    unknown = set(options) - {"revision", "version", "trust_remote_code"}
    if unknown:
        raise KernelExplorerError(f"KernelConfig entry {layer!r}: unknown options {sorted(unknown)}")
    if "revision" not in options and "version" not in options:
        options["version"] = 1  # Transformers' add_to_mapping default
    return LayerRepository(source, layer_name=layer_name, **options)


def mapping_from_kernel_config(config: Any, device: str) -> dict[str, dict[str, Any]]:
    """The kernel mapping of `config` (a plain entry applies to `device`, the model's), with one
    warning for what Transformers would refuse."""
    accepted = _transformers_devices()
    mapping: dict[str, dict[str, Any]] = {}
    refused: list[str] = []
    for layer, value in config.kernel_mapping.items():
        if not isinstance(layer, str):  # a fusion through a Layout class: a row (kernel_config_rows)
            continue
        per_device = value if isinstance(value, dict) else {device: value}
        for where, spec in per_device.items():
            mapping.setdefault(layer, {})[where] = _repository(layer, spec, bool(config.use_local_kernel))
            if accepted and where not in accepted:
                refused.append(f"{layer} on {where!r}")
    if refused:
        warnings.warn(
            "Transformers would refuse this KernelConfig in from_pretrained: "
            + ", ".join(refused)
            + f" (its devices: {', '.join(accepted)}); the explorer explores the mapping anyway",
            KernelExplorerWarning,
            stacklevel=3,
        )
    return mapping


_FUSION_FORM = "((name, 'model.layers.*.child'), (name, 'model.layers.*.other'), ...)"


def _spec_text(value: Any) -> str:
    """The "org/repo:Layer" a config entry names (the first, when it names one per device)."""
    if isinstance(value, dict):
        value = next(iter(value.values()), "")
    if isinstance(value, tuple):
        value = value[0] if value else ""
    return str(value)


def _fusion_row(key: tuple[Any, ...], value: Any, model: nn.Module, device: str) -> DoorRow:
    spec = _spec_text(value)
    layer = spec.rsplit(":", 1)[-1] if ":" in spec else spec
    patterns = [item[1] for item in key if isinstance(item, tuple) and len(item) == 2]
    if len(patterns) != len(key) or not all(isinstance(p, str) and "." in p for p in patterns):
        why = f"Transformers reads a fused key as {_FUSION_FORM}; this one is {key!r}"
        return DoorRow(KERNEL_CONFIG, repr(key), "refused by Transformers", why, spec.split(":")[0])
    parents = {p.rsplit(".", 1)[0] for p in patterns}
    children = [p.rsplit(".", 1)[1] for p in patterns]
    name = f"{sorted(parents)[0]}.{{{', '.join(children)}}}"
    if len(parents) != 1:
        listed = ", ".join(sorted(parents))
        why = f"Transformers fuses siblings only: the modules have different parents ({listed})"
        return DoorRow(KERNEL_CONFIG, name, "refused by Transformers", why, spec.split(":")[0])
    parent = re.compile(next(iter(parents)).replace("*", r"\w+"))
    matched = [path for path, module in model.named_modules() if parent.fullmatch(path)]
    lacking = [
        f"{path}.{child}"
        for path in matched
        for child in children
        if not hasattr(model.get_submodule(path), child)
    ]
    identity = ", ".join(children[1:]) or "none"
    reasons = [
        f"from_pretrained(use_kernels=True, kernel_config=...) would build each matching module with "
        f"{spec}'s {layer}Layout in place of {children[0]} and nn.Identity for {identity}"
        f" ({len(matched)} module{'s' if len(matched) != 1 else ''} of this model match)",
        "a fusion changes the model before it is built: the explorer switches built modules only",
    ]
    if lacking:
        reasons.append(f"Transformers would refuse it: {', '.join(lacking[:3])} missing")
    elif not matched:
        reasons.append("Transformers would refuse it: no module of this model matches")
    accepted = _transformers_devices()
    if accepted and device not in accepted:
        reasons.append(f"and Transformers' KernelConfig refuses {device!r} (it takes {', '.join(accepted)})")
    runs = "not fused here" if matched else "no module matches"
    return DoorRow(KERNEL_CONFIG, name, runs, "; ".join(reasons), spec.split(":")[0], instances=len(matched))


def kernel_config_rows(config: Any, model: nn.Module, device: str) -> list[DoorRow]:
    """A row per fused (tuple) key of `config`, and one when it hides every other mapping."""
    rows = [
        _fusion_row(key, value, model, device)
        for key, value in config.kernel_mapping.items()
        if isinstance(key, tuple)
    ]
    local = bool(getattr(config, "use_local_kernel", False))
    if not getattr(config, "inherit_mapping", True) or local:
        layers = sum(1 for key in config.kernel_mapping if isinstance(key, str))
        inherit = getattr(config, "inherit_mapping", True)
        why = "inherit_mapping=False" if not inherit else "use_local_kernel=True"
        rows.append(
            DoorRow(
                KERNEL_CONFIG,
                "inherit_mapping=False",
                f"only this config's {layers} layer{'s' if layers != 1 else ''}",
                f"{why}: Transformers' kernelize sees this config's mapping alone; its own default mapping "
                "and every mapping registered with kernels are hidden (the explorer still lists their "
                "candidates)",
            )
        )
    return rows
