"""Building the bundled repositories: layout, reuse, and refusing broken builds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from kernels import Metadata, get_local_kernel

from kernel_explorer.builder import BUNDLED_REPOS, HUB_SOURCES, build_repo, build_variant, check_build
from kernel_explorer.bundled import BUNDLED_ATTENTION
from kernel_explorer.errors import BuildError
from kernel_explorer.hardware import detect_hardware


def test_variant_is_one_kernels_accepts_here() -> None:
    variant = build_variant()
    assert variant in detect_hardware().accepted_cpu_variants
    assert "-cpu-" in variant


@pytest.mark.parametrize("name", BUNDLED_REPOS)
def test_layout_is_kernel_builders(hub: dict, name: str) -> None:
    built = build_repo(name, progress=False)
    assert built.reused  # the session's hub fixture built it already
    files = {p.name for p in built.variant_path.iterdir()}
    expected = {"metadata.json", "__init__.py", "_ops.py", f"{built.kernel_id}.abi3.so"}
    if name != BUNDLED_ATTENTION:  # attention enters through Transformers, not kernelize layers
        expected.add("layers.py")
    assert expected <= files
    metadata = Metadata.read_from_file(built.variant_path / "metadata.json")
    assert metadata.id == built.kernel_id and metadata.name.python_name == name
    assert hub[name].__name__ == built.kernel_id  # kernels imported it under the metadata id


def _copy_sources(tmp_path: Path, name: str) -> Path:
    root = tmp_path / "hub"
    shutil.copytree(HUB_SOURCES / name, root / name)
    shutil.copytree(HUB_SOURCES / "common", root / "common")
    return root


@pytest.mark.slow
def test_corrupt_library_is_detected_and_rebuilt(fresh_cache: Path, tmp_path: Path) -> None:
    root = _copy_sources(tmp_path, "rotary")
    first = build_repo("rotary", progress=False, source_root=root)
    library = first.variant_path / f"{first.kernel_id}.abi3.so"
    library.write_bytes(library.read_bytes()[:1000])  # truncated, as by a full disk
    assert "checksum" in check_build(first.variant_path)
    again = build_repo("rotary", progress=False, source_root=root)
    assert not again.reused and check_build(again.variant_path) is None
    get_local_kernel(again.repo_path)  # and it loads


@pytest.mark.slow
def test_half_written_build_is_never_loaded(fresh_cache: Path, tmp_path: Path) -> None:
    root = _copy_sources(tmp_path, "rotary")
    built = build_repo("rotary", progress=False, source_root=root)
    (built.variant_path / ".kx-build.json").unlink()  # a build that died before its stamp
    assert "never finished" in check_build(built.variant_path)
    assert not build_repo("rotary", progress=False, source_root=root).reused


@pytest.mark.slow
def test_source_change_rebuilds_with_a_new_id(fresh_cache: Path, tmp_path: Path) -> None:
    root = _copy_sources(tmp_path, "rotary")
    first = build_repo("rotary", progress=False, source_root=root)
    with (root / "rotary" / "torch-ext" / "rotary" / "layers.py").open("a") as f:
        f.write("\n# changed\n")
    second = build_repo("rotary", progress=False, source_root=root)
    assert not second.reused and second.kernel_id != first.kernel_id
    stamp = json.loads((second.variant_path / ".kx-build.json").read_text())
    assert set(stamp["files"]) >= {"metadata.json", f"{second.kernel_id}.abi3.so"}


def test_missing_compiler_says_what_to_install(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(BuildError, match=r"no C.. compiler found.*apt-get install g\+\+"):
        build_repo("rotary", progress=False)


def test_missing_python_headers_say_what_to_install(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sysconfig

    paths = {**sysconfig.get_paths(), "include": str(tmp_path / "no-headers")}
    monkeypatch.setattr(sysconfig, "get_paths", lambda: paths)
    with pytest.raises(BuildError, match=r"Python headers are missing.*-dev"):
        build_repo("rotary", progress=False)


@pytest.mark.slow
def test_compile_error_points_at_the_log(fresh_cache: Path, tmp_path: Path) -> None:
    root = _copy_sources(tmp_path, "rotary")
    (root / "rotary" / "csrc" / "rotary_ops.cpp").write_text("this is not C++;\n")
    with pytest.raises(BuildError, match=r"compiling rotary_ops.cpp failed.*full log"):
        build_repo("rotary", progress=False, source_root=root)
