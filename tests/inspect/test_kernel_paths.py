"""kernel_paths: which code path each bundled kernel runs here and why, as the hardware panel shows."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from isa_paths import runnable_isas

from kernel_explorer.build.bundled import BUNDLED_REPOS
from kernel_explorer.inspect.hardware import KernelPath, detect_hardware
from kernel_explorer.inspect.kernel_paths import bundled_kernel_paths, kernel_path


def test_every_built_bundled_repository_reports_its_path_and_why(hub: dict) -> None:
    found = {k.repo: k for k in bundled_kernel_paths()}
    assert set(found) == set(BUNDLED_REPOS)
    for info in found.values():
        assert info.paths == tuple(runnable_isas())
        assert info.isa in info.paths and info.reason.startswith(f"{info.isa}: ")


def test_a_module_that_says_nothing_or_fails_to_choose() -> None:
    assert kernel_path("peer", SimpleNamespace()) is None

    def refuses() -> str:
        raise RuntimeError(
            "rmsnorm: KERNEL_EXPLORER_ISA=avx1024 is not a code path this CPU runs; unset it\nmore"
        )

    info = kernel_path("rmsnorm", SimpleNamespace(isa=refuses))
    assert info == KernelPath(
        "rmsnorm", "?", (), "rmsnorm: KERNEL_EXPLORER_ISA=avx1024 is not a code path this CPU runs; unset it"
    )
    bare = kernel_path("peer", SimpleNamespace(isa=lambda: "avx2"))
    assert bare == KernelPath("peer", "avx2", (), "avx2: the path the kernel reports")


def test_the_hardware_panel_lists_them() -> None:
    snapshot = detect_hardware()
    assert snapshot.kernel_paths == () and "Bundled kernel paths" not in dict(snapshot.rows())
    paths = (
        KernelPath("flash_attn", "avx2", ("avx512", "avx2"), "avx2: 1.90x [1.80, 2.00] faster than avx512"),
    )
    shown = replace(snapshot, kernel_paths=paths)
    assert (
        dict(shown.rows())["Bundled kernel paths"]
        == "flash_attn: avx2: 1.90x [1.80, 2.00] faster than avx512"
    )
    assert "flash_attn: avx2: 1.90x" in str(shown) and "flash_attn: avx2: 1.90x" in shown._repr_html_()
