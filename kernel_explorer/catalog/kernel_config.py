"""A Transformers `KernelConfig` read as a kernel mapping, so `Explorer(model, mapping=config)` takes
the form Transformers users already write for `from_pretrained(..., kernel_config=config)`.

`KernelConfig.kernel_mapping` names a layer's kernel as "org/repo:Layer" (or, with
`use_local_kernel`, "/abs/path:Layer"), alone or per device, optionally as a tuple with
`{"revision"|"version"|"trust_remote_code": ...}`. This turns each into the `LayerRepository` or
`LocalLayerRepository` `kernels.use_kernel_mapping` takes, the way Transformers' own
`add_to_mapping` does. Where Transformers itself would refuse the config (5.22 takes only the
devices in `KERNELS_SUPPORTED_DEVICE_TYPES`, not "cpu"; fused tuple keys need its Layout classes)
one warning line says so, and the explorer explores the rest anyway.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from kernel_explorer.errors import KernelExplorerError

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
        if not isinstance(layer, str):  # ("gate_proj", "up_proj"): fusion through a Layout class
            refused.append(f"{layer} (fusion of sibling modules: not explored)")
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
            UserWarning,
            stacklevel=3,
        )
    return mapping
