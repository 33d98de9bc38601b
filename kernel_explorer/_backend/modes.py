"""`kernels`' `Mode` from and to the names a user types, and the order `kernelize` falls back in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel_explorer._backend.internals import internal
from kernel_explorer.errors import KernelExplorerError

if TYPE_CHECKING:
    from kernels import Mode

MODE_NAMES: tuple[str, ...] = ("inference", "training", "inference+torch.compile", "training+torch.compile")


def parse_mode(mode: str | Mode) -> Mode:
    """`Mode` from the names a user types ("inference", "training", "torch.compile", ...)."""
    from kernels import Mode

    if isinstance(mode, Mode):
        return mode
    key = str(mode).strip().lower().replace(" ", "")
    aliases = {
        "inference": Mode.INFERENCE,
        "training": Mode.TRAINING,
        "torch.compile": Mode.INFERENCE | Mode.TORCH_COMPILE,
        "compile": Mode.INFERENCE | Mode.TORCH_COMPILE,
        "inference+torch.compile": Mode.INFERENCE | Mode.TORCH_COMPILE,
        "training+torch.compile": Mode.TRAINING | Mode.TORCH_COMPILE,
    }
    if key not in aliases:
        raise KernelExplorerError(
            f"Unknown mode {mode!r}: use 'inference', 'training' or 'torch.compile' "
            "(or 'training+torch.compile' for both)."
        )
    return aliases[key]


def mode_name(mode: Mode) -> str:
    """Readable name of a `Mode`, as used in tables ("any mode" for a plain mapping entry)."""
    from kernels import Mode

    if mode == Mode.FALLBACK:
        return "any mode"
    parts = [
        name for name, flag in (("inference", Mode.INFERENCE), ("training", Mode.TRAINING)) if flag in mode
    ]
    if Mode.TORCH_COMPILE in mode:
        parts.append("torch.compile")
    return "+".join(parts)


def mode_priority(mode: Mode) -> list[Mode]:
    """The registered modes `kernelize` would accept for `mode`, most preferred first."""
    _MODE_FALLBACK_PRIORITY = internal("kernels.layer.repos", "_MODE_FALLBACK_PRIORITY")

    return list(_MODE_FALLBACK_PRIORITY[mode])


def compiles(mode: Mode) -> bool:
    """Whether `mode` asks for torch.compile (kernels' `Mode.TORCH_COMPILE` flag)."""
    from kernels import Mode

    return Mode.TORCH_COMPILE in mode
