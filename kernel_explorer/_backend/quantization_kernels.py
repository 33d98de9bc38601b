"""Quantization methods whose kernels Transformers loads from the Hub, and what a CPU gets instead.

Transformers' quantizers fetch their compute kernels with `kernels.get_kernel` (GGUF, MXFP4, EETQ,
Metal, FBGEMM FP8 on XPU) or lazily through its `_HUB_KERNEL_MAPPING` (fine-grained FP8, NVFP4).
The repository ids are literals in each integration module: `METHODS` copies them, with the module
that holds each (`tests/catalog/test_quantization_kernels.py` reads those sources, so a renamed repository
fails a test instead of a row going stale), and what each quantizer does on a machine without the
device its kernel needs (read in Transformers 5.25's `quantizers/quantizer_*.py`; 5.22's are the
same). GGUF takes a kernel only for the architectures of its packed-weights path
(`integrations/gguf`: lfm2, qwen35, qwen35moe in 5.25); every other GGUF file is dequantized by the
legacy loader at load time and asks for no kernel at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.internals import internal

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class HubQuantization:
    """One quantization method that loads its kernel from the Hub."""

    method: str  # the config's quant_method ("gguf", "mxfp4", "fp8", ...)
    title: str  # what people call it
    repository: str
    version: int | None
    revision: str | None
    devices: tuple[str, ...]  # where Transformers uses the kernel (): wherever the repository has a build
    source: str  # the Transformers module that loads it (where the id is written)
    on_cpu: str  # what a CPU-only machine gets instead


def _lazy(name: str) -> tuple[str, int | None, str | None]:
    """(repository, version, revision) of a kernel Transformers loads lazily by name."""
    entry = internal("transformers.integrations.hub_kernels", "_HUB_KERNEL_MAPPING")[name]
    return str(entry["repo_id"]), entry.get("version"), entry.get("revision")


def methods() -> list[HubQuantization]:
    """Every method that loads a Hub kernel, in Transformers' words where it has them."""
    fp8 = _lazy("finegrained-fp8")
    nvfp4 = _lazy("nvfp4")
    return [
        HubQuantization(
            "gguf", "GGUF", "ggml-org/ggml-quantization", 1, None, (),
            "transformers.integrations.gguf.kernels",
            "the weights are dequantized: at load by the legacy loader for architectures outside the "
            "packed-weights path, else the whole model when no kernel loads",
        ),
        HubQuantization(
            "mxfp4", "MXFP4", "kernels-community/gpt-oss-triton-kernels", 1, None, ("cuda", "xpu", "cpu"),
            "transformers.integrations.mxfp4",
            "the Triton kernels need triton >= 3.5 on a CPU; without it the model is dequantized to bf16",
        ),
        HubQuantization(
            "fbgemm_fp8", "FBGEMM FP8", "kernels-community/fp8-fbgemm", 1, None, ("xpu",),
            "transformers.integrations.fbgemm_fp8",
            "nothing: Transformers refuses it without a GPU or XPU (CUDA uses the fbgemm-gpu package)",
        ),
        HubQuantization(
            "eetq", "EETQ", "kernels-community/quantization-eetq", 1, None, ("cuda",),
            "transformers.integrations.eetq",
            "nothing: Transformers refuses to load it without a CUDA GPU",
        ),
        HubQuantization(
            "metal", "Metal", "kernels-community/mlx-quantization-metal-kernels", 1, None, ("mps",),
            "transformers.integrations.metal_quantization",
            "a pre-quantized checkpoint is dequantized to its original dtype; quantizing needs MPS",
        ),
        HubQuantization(
            "fp8", "fine-grained FP8", fp8[0], fp8[1], fp8[2], ("cuda", "xpu"),
            "transformers.integrations.finegrained_fp8",
            "a pre-quantized checkpoint is dequantized to bf16; quantizing needs a GPU or XPU",
        ),
        HubQuantization(
            "nvfp4", "NVFP4", nvfp4[0], nvfp4[1], nvfp4[2], ("cuda",),
            "transformers.integrations.nvfp4",
            "nothing: Transformers refuses it without a Blackwell (sm100+) CUDA GPU",
        ),
    ]  # fmt: skip


def quantization_config(model: nn.Module) -> Any | None:
    """The model's quantization config (a `QuantizationConfigMixin`), or None."""
    return getattr(getattr(model, "config", None), "quantization_config", None)


def quant_method(config: Any) -> str:
    """The config's method as a plain string ("gguf", "fp8", ...)."""
    method = config.get("quant_method") if isinstance(config, dict) else getattr(config, "quant_method", "")
    return str(getattr(method, "value", method) or "")


def dequantized(config: Any) -> bool | None:
    """Whether the config says the weights were unpacked at load (None: the method has no such flag)."""
    value = config.get("dequantize") if isinstance(config, dict) else getattr(config, "dequantize", None)
    return None if value is None else bool(value)


def gguf_file(config: Any) -> str | None:
    """The GGUF file a config names (from `from_pretrained(..., gguf_file=)`), or None."""
    value = config.get("gguf_file") if isinstance(config, dict) else getattr(config, "gguf_file", None)
    return str(value) if value else None


def gguf_architecture(path: str | Path) -> str:
    """The `general.architecture` a GGUF file's header names (reads the header only)."""
    read = internal("transformers.integrations.gguf.reader", "read_gguf_metadata")
    metadata, _ = read(str(path))
    return str(metadata["general.architecture"])


def gguf_kernel_path(architecture: str) -> bool:
    """Whether Transformers keeps this architecture's GGUF weights packed (and asks for a kernel)."""
    return bool(internal("transformers.integrations.gguf.utils", "is_gguf_arch_supported")(architecture))


def gguf_kernel_architectures() -> tuple[str, ...]:
    """The architectures of Transformers' packed-weights GGUF path."""
    return tuple(sorted(internal("transformers.integrations.gguf.gguf_conversion_mapping", "GGUF_ARCHS")))


def gguf_kernel_loaded(model: nn.Module) -> bool | None:
    """Whether the model's GGUF quantizer holds a loaded kernel (None: no such quantizer here)."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None or not hasattr(quantizer, "kernel"):
        return None
    return bool(quantizer.kernel)
