"""The `kernels` version window the installed Transformers accepts (outside it, its decorators are off)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelsWindow:
    """`KERNELS_MIN_VERSION <= kernels < KERNELS_MAX_VERSION`, as Transformers declares it.

    `readable` is False when Transformers is installed but the names moved: the window is unknown,
    which is not the same as "no window".
    """

    minimum: str | None
    maximum: str | None
    readable: bool


def kernels_window() -> KernelsWindow | None:
    """The window of the installed Transformers; None when Transformers is not installed."""
    try:
        from transformers.utils import import_utils
    except ImportError:
        return None
    lo = getattr(import_utils, "KERNELS_MIN_VERSION", None)
    hi = getattr(import_utils, "KERNELS_MAX_VERSION", None)
    return KernelsWindow(lo, hi, readable=lo is not None or hi is not None)
