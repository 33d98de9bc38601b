"""How Transformers resolves the names `flash_attention_2`, `_3` and `_4`.

`model.set_attn_implementation("flash_attention_2")` (or `attn_implementation=` in `from_pretrained`)
runs the pip package `flash-attn` when it is installed for this device; when it is not, and
`kernels` is, Transformers quietly replaces the name by a Hub repository
(`FLASH_ATTN_KERNEL_FALLBACK`: `kernels-community/flash-attn2`, `vllm-flash-attn3`, `flash-attn4`,
`aiter-flash-attn` on ROCm) at the major version `FLASH_ATTN_KERNEL_VERSIONS` gives (a `v<N>` branch
of the repository), and the model's implementation then reads as that repository. Only a warning
says so; users who asked for the package got the Hub kernel. `FLASH_ATTN_KERNEL_DEVICES` lists the
devices each repository ships builds for. This module reads those tables and the package checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernel_explorer._backend.internals import internal

if TYPE_CHECKING:
    from torch import nn

_UTILS = "transformers.modeling_flash_attention_utils"
#: the distribution each name's package check looks for (Transformers' compatibility matrix)
PACKAGES: dict[str, str] = {
    "flash_attention_2": "flash-attn",
    "flash_attention_3": "flash-attn-3",
    "flash_attention_4": "flash-attn-4",
}


@dataclass(frozen=True)
class FlashName:
    """What one flash-attention name becomes in this process."""

    name: str  # flash_attention_2
    package: str  # the pip distribution the name stands for (flash-attn)
    package_available: bool  # Transformers' own check (installed, and for a device it supports)
    repository: str  # the Hub repository the name becomes without the package
    version: int | None  # the major version Transformers loads it at (a `v<N>` branch)
    devices: tuple[str, ...]  # devices the repository ships builds for, per Transformers ("": all)

    @property
    def revision(self) -> str:
        """The Hub revision the version selects (`v4`), or "" when Transformers gives no version."""
        return f"v{self.version}" if self.version is not None else ""


def _package_available(name: str) -> bool:
    from transformers.utils import import_utils

    check = getattr(import_utils, f"is_flash_attn_{name.rsplit('_', 1)[-1]}_available", None)
    if check is None:
        return False
    try:
        return bool(check())
    except Exception:  # a broken package install: Transformers' own call would fail the same way
        return False


def flash_names() -> list[FlashName]:
    """Every flash-attention name Transformers maps to a Hub repository, with its facts here."""
    fallback: dict[str, str] = internal(_UTILS, "FLASH_ATTN_KERNEL_FALLBACK")
    devices: dict[str, tuple[str, ...]] = internal(_UTILS, "FLASH_ATTN_KERNEL_DEVICES")
    version_of = internal("transformers.integrations.hub_kernels", "get_attn_kernel_version")
    return [
        FlashName(
            name=name,
            package=PACKAGES.get(str(name), str(name)),
            package_available=_package_available(name),
            repository=repo,
            version=version_of(repo),
            devices=tuple(devices.get(repo, ())),
        )
        for name, repo in fallback.items()
    ]


def supports_flash(model: nn.Module) -> bool:
    """Whether the model takes flash attention (Transformers refuses the names if not); a model
    that does not say is taken to (only Transformers' models declare it)."""
    return bool(getattr(model, "_supports_flash_attn", True))
