"""Rows for quantization methods that load their kernels from the Hub: which repository, and what
runs on this machine instead.

A model loaded with a GGUF file, an MXFP4, FBGEMM FP8, EETQ, Metal, fine-grained FP8 or NVFP4 config
keeps that config (`model.config.quantization_config`). Its quantizer loads a Hub kernel where the
device has one; on a CPU most of them dequantize the weights at load or refuse the model. GGUF is
read from the file's header: only the architectures of Transformers' packed-weights path ask for
`ggml-org/ggml-quantization`; any other (the default model, a Llama) is dequantized by the legacy
loader and asks for no kernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend import quantization_kernels as backend
from kernel_explorer.catalog.door_row import QUANTIZATION, DoorRow

if TYPE_CHECKING:
    from torch import nn


def _revision(method: backend.HubQuantization) -> str:
    if method.revision:
        return method.revision
    return f"v{method.version}" if method.version is not None else ""


def gguf_plan(path: str | Path) -> str:
    """What Transformers does with the GGUF file at `path`, in one sentence (reads its header)."""
    architecture = backend.gguf_architecture(path)
    if backend.gguf_kernel_path(architecture):
        return (
            f"{architecture}: weights kept packed; Transformers asks the Hub for ggml-org/ggml-quantization "
            "(v1) at load and dequantizes the whole model when it cannot load it"
        )
    kept = ", ".join(backend.gguf_kernel_architectures())
    return (
        f"{architecture}: not one of the architectures Transformers keeps packed ({kept}); the legacy "
        "loader dequantizes every weight at load and asks for no kernel"
    )


def _gguf_path(config: Any, model: nn.Module) -> Path | None:
    """The model's GGUF file: as named, or beside the folder it was loaded from (`gguf_file=name`)."""
    named = backend.gguf_file(config)
    if named is None:
        return None
    folder = str(getattr(getattr(model, "config", None), "name_or_path", "") or "")
    for path in (Path(named), Path(folder) / named):
        if path.is_file():
            return path
    return None


def _gguf_row(method: backend.HubQuantization, config: Any, model: nn.Module) -> DoorRow:
    revision = _revision(method)
    path = _gguf_path(config, model)
    if path is None:
        why = f"its GGUF file is not found ({backend.gguf_file(config) or 'not named'}); {method.on_cpu}"
        return DoorRow(QUANTIZATION, method.title, "unknown", why, method.repository, revision)
    reason = gguf_plan(path)
    packed = backend.gguf_kernel_path(backend.gguf_architecture(path))
    if not packed or backend.dequantized(config):
        runs = "PyTorch on dequantized weights"
    elif backend.gguf_kernel_loaded(model):
        runs = f"{method.repository}@{revision}"
    else:
        runs = "PyTorch, unpacking the blocks at every forward"
    return DoorRow(QUANTIZATION, method.title, runs, reason, method.repository if packed else "", revision)


def quantization_rows(model: nn.Module, device: str) -> list[DoorRow]:
    """The row of the model's quantization method, when it loads a Hub kernel (else none)."""
    config = backend.quantization_config(model)
    if config is None:
        return []
    name = backend.quant_method(config)
    method = next((m for m in backend.methods() if m.method == name), None)
    if method is None:
        return []
    if method.method == "gguf":
        return [_gguf_row(method, config, model)]
    revision = _revision(method)
    target = f"{method.repository}@{revision}" if revision else method.repository
    if backend.dequantized(config):
        runs, reason = "PyTorch on dequantized weights", f"the config says dequantize=True; {method.on_cpu}"
    elif method.devices and device not in method.devices:
        devices = ", ".join(method.devices)
        reason = f"Transformers uses {target} on {devices} only; on {device}: {method.on_cpu}"
        runs = "no kernel here"
    else:
        runs, reason = target, f"Transformers loads it with kernels.get_kernel on {device}"
    return [DoorRow(QUANTIZATION, method.title, runs, reason, method.repository, revision)]
