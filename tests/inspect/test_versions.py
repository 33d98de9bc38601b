"""kernels/Transformers compatibility, read from the installed Transformers' own window."""

from __future__ import annotations

import pytest

from kernel_explorer.errors import IncompatibleVersionsError
from kernel_explorer.inspect.versions import check_compatibility, require_compatible


def test_installed_pair_is_compatible() -> None:
    compat = check_compatibility()
    assert compat.ok, compat.message
    assert compat.kernels_min is not None, "Transformers should declare its kernels window"


def test_kernels_below_window_is_flagged_with_the_fix() -> None:
    # The pair DESIGN.md warns about: Transformers 5.23 wants kernels >= 0.18.2.
    compat = check_compatibility("0.17.2", "5.23.0", window=("0.18.2", "0.19.0"))
    assert not compat.ok
    assert "silently runs PyTorch" in compat.message and "pip install" in compat.message


def test_kernels_above_window_is_flagged() -> None:
    assert not check_compatibility("0.18.0", "5.22.2", window=("0.17.2", "0.18.0")).ok


def test_missing_kernels_is_flagged() -> None:
    import kernels

    installed = kernels.__version__
    compat = check_compatibility(kernels_version=None, window=(installed, "99.0"))
    # None means "read the installed one"; the installed one exists and is inside, so it is OK.
    assert compat.ok and compat.kernels_version == installed


def test_the_installed_pair_is_one_of_the_tested_windows() -> None:
    compat = check_compatibility()
    assert compat.ok, compat.message


def test_require_compatible_raises_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers.utils.import_utils as iu

    monkeypatch.setattr(iu, "KERNELS_MIN_VERSION", "99.0")  # a future Transformers' window
    with pytest.raises(IncompatibleVersionsError) as info:
        require_compatible()
    assert "\n" not in str(info.value)


def test_a_window_transformers_no_longer_declares_is_not_a_silent_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers.utils.import_utils as iu

    monkeypatch.delattr(iu, "KERNELS_MIN_VERSION")
    monkeypatch.delattr(iu, "KERNELS_MAX_VERSION")
    compat = check_compatibility()
    assert "could not read the kernels version window" in compat.message
    assert compat.ok  # the installed pair is the tested one, and it says so
    moved = check_compatibility(transformers_version="5.30.0")
    assert not moved.ok and "pip install" in moved.message
