"""Is the installed `kernels` one that Transformers will actually use?

Transformers only turns its kernel decorators on when `kernels` lies inside a version window it
declares (`KERNELS_MIN_VERSION <= v < KERNELS_MAX_VERSION`). Outside it, `use_kernels=True` silently
runs PyTorch. This module reads that window from the installed Transformers rather than hard-coding
it, so the check stays right when either package moves.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from kernel_explorer._backend.transformers_window import kernels_window
from kernel_explorer.errors import IncompatibleVersionsError

# The window this project is tested with; used to name the fix when the pair is incompatible.
SUPPORTED_TRANSFORMERS = ">=5.22,<5.26"
SUPPORTED_KERNELS = ">=0.17.2,<0.20"


@dataclass(frozen=True)
class Compatibility:
    """Whether the installed kernels/Transformers pair works, and the window Transformers demands."""

    kernels_version: str | None
    transformers_version: str | None
    kernels_min: str | None
    kernels_max: str | None
    ok: bool
    message: str


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_compatibility(
    kernels_version: str | None = None,
    transformers_version: str | None = None,
    window: tuple[str | None, str | None] | None = None,
) -> Compatibility:
    """Compare the kernels version with the window Transformers accepts.

    Arguments default to what is installed; pass them to ask about another pair.
    """
    kv = kernels_version if kernels_version is not None else _installed("kernels")
    tv = transformers_version if transformers_version is not None else _installed("transformers")
    fix = f"pip install 'kernels{SUPPORTED_KERNELS}' 'transformers{SUPPORTED_TRANSFORMERS}'"
    if window is not None:
        lo, hi = window
    else:
        installed = kernels_window()
        lo, hi = (None, None) if installed is None else (installed.minimum, installed.maximum)
        if installed is not None and not installed.readable and tv is not None and kv is not None:
            # Transformers moved the names that declare its window: say so, never a silent "ok".
            ok = Version(tv) in SpecifierSet(SUPPORTED_TRANSFORMERS) and Version(kv) in SpecifierSet(
                SUPPORTED_KERNELS
            )
            return Compatibility(
                kv,
                tv,
                None,
                None,
                ok,
                f"could not read the kernels version window from Transformers {tv} "
                "(KERNELS_MIN_VERSION/KERNELS_MAX_VERSION moved); "
                + ("the pair is inside the window this project is tested with" if ok else f"fix: {fix}"),
            )
    if kv is None:
        return Compatibility(kv, tv, lo, hi, False, f"`kernels` is not installed; fix: {fix}")
    if tv is None:
        return Compatibility(kv, tv, lo, hi, True, "Transformers is not installed (kernels alone works)")
    if lo is None and hi is None:
        return Compatibility(kv, tv, lo, hi, True, "this Transformers declares no kernels version window")
    too_old = lo is not None and Version(kv) < Version(lo)
    too_new = hi is not None and Version(kv) >= Version(hi)
    if too_old or too_new:
        return Compatibility(
            kv,
            tv,
            lo,
            hi,
            False,
            f"kernels {kv} is outside the range Transformers {tv} accepts "
            f"(>={lo}, <{hi}): use_kernels=True silently runs PyTorch; fix: {fix}",
        )
    return Compatibility(kv, tv, lo, hi, True, f"kernels {kv} is inside Transformers {tv}'s range")


def require_compatible() -> Compatibility:
    """Raise `IncompatibleVersionsError` (with the fix) unless the installed pair works."""
    compat = check_compatibility()
    if not compat.ok:
        raise IncompatibleVersionsError(compat.message)
    return compat
