"""Building the bundled repositories: layout, reuse, and refusing broken builds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kernels import Metadata, get_local_kernel

from kernel_explorer.build.builder import (
    BUNDLED_REPOS,
    HUB_SOURCES,
    build_repo,
    build_variant,
    check_build,
)
from kernel_explorer.build.bundled import BUNDLED_ATTENTION
from kernel_explorer.errors import BuildError
from kernel_explorer.inspect.hardware import detect_hardware


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
    # and it loads, digest checked (in a fresh process: kernels 0.18+ refuses a second build of an
    # id this session already loaded, and the session's bundled rotary has this id)
    load = (
        f"from pathlib import Path; import kernels; kernels.get_local_kernel(Path({str(again.repo_path)!r}))"
    )
    done = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True)
    assert done.returncode == 0 and "digest" not in done.stderr, done.stderr


@pytest.mark.slow
def test_a_changed_metadata_json_makes_the_build_unsound(fresh_cache: Path, tmp_path: Path) -> None:
    root = _copy_sources(tmp_path, "rotary")
    built = build_repo("rotary", progress=False, source_root=root)
    metadata = built.variant_path / "metadata.json"
    data = json.loads(metadata.read_text())
    assert set(data["digest"]["files"]) >= {".kx-build.json", f"{built.kernel_id}.abi3.so", "layers.py"}
    data["digest"]["files"]["layers.py"] = "AAAA"
    metadata.write_text(json.dumps(data))
    assert "digest does not match" in check_build(built.variant_path)


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
    assert f"{second.kernel_id}.abi3.so" in stamp["files"]
    digest = json.loads((second.variant_path / "metadata.json").read_text())["digest"]["files"]
    assert {".kx-build.json", f"{second.kernel_id}.abi3.so"} <= set(digest)  # metadata covers the rest


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
def test_compile_error_points_at_the_log_and_leaves_nothing(fresh_cache: Path, tmp_path: Path) -> None:
    root = _copy_sources(tmp_path, "rotary")
    (root / "rotary" / "torch-ext" / "torch_binding.cpp").write_text("this is not C++;\n")
    with pytest.raises(
        BuildError, match=r"compiling torch_binding.cpp failed: .*error.* \(full log: "
    ) as info:
        build_repo("rotary", progress=False, source_root=root)
    assert "\n" not in str(info.value)
    log = Path(str(info.value).rsplit("full log: ", 1)[1].rstrip(")"))
    assert "this is not C++" in log.read_text() or "error" in log.read_text()
    built = fresh_cache / "hub" / "rotary"
    assert not list(built.rglob("*.so")) and not list(built.rglob("*.partial"))  # nothing half-written
    assert not (built / "build" / build_variant()).exists()


def test_bundled_repos_are_in_the_standard_format() -> None:
    """torch_binding.cpp registers through kernel-builder's registration.h, no private macro."""
    for name in BUNDLED_REPOS:
        binding = (HUB_SOURCES / name / "torch-ext" / "torch_binding.cpp").read_text()
        assert '#include "registration.h"' in binding
        assert "TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME" in binding
        assert "REGISTER_EXTENSION(TORCH_EXTENSION_NAME)" in binding
        assert "KX_OPS_NS" not in binding
        assert (HUB_SOURCES / name / "benchmarks" / "benchmark.py").is_file()
        assert list((HUB_SOURCES / name / "tests").glob("test_*.py"))


def test_cached_rebuild_of_the_hub_is_quick(hub: dict) -> None:
    """Nothing changed: every bundled repository is reused, without compiling (the 2 s target is
    checked in bench, not here: timings on this shared machine are no assertions)."""
    from kernel_explorer.build.builder import build_hub

    assert all(built.reused for built in build_hub(progress=False))


def test_noarch_repo_builds_to_torch_cpu_and_loads(fresh_cache: Path, tmp_path: Path) -> None:
    from kernel_repos import write_noarch_repo

    from kernel_explorer.build.builder import build_path

    root = write_noarch_repo(tmp_path / "py-rmsnorm")
    built = build_path(root, progress=False)
    assert built.variant == "torch-cpu" and not built.reused
    meta = json.loads((built.variant_path / "metadata.json").read_text())
    assert (
        meta["id"] == built.kernel_id
        and meta["id"].startswith("_py_rmsnorm_cpu_")
        and meta["license"] == "MIT"
    )
    assert "_py_rmsnorm_cpu_" in (built.variant_path / "_ops.py").read_text()
    module = get_local_kernel(built.repo_path)
    assert module.__name__ == built.kernel_id and hasattr(module.layers, "RMSNorm")
    assert build_path(root, progress=False).reused
    assert (
        build_path(built.repo_path, progress=False).repo_path == built.repo_path
    )  # a built path is taken as is


def test_builds_of_one_repository_at_once_do_not_write_into_each_other(
    fresh_cache: Path, tmp_path: Path
) -> None:
    """Two processes building one repository into one cache (a test run beside `make setup`) once
    failed with "can't create .../.partial/obj/...": each build now stages in a folder of its own,
    and the first finished build of the same sources is kept. Here: another process's staging
    folder, half written, stays untouched and the build beside it succeeds; eight threads building
    at once all get a sound build."""
    import concurrent.futures

    from kernel_repos import write_noarch_repo

    from kernel_explorer.build.builder import build_path, check_build

    root = write_noarch_repo(tmp_path / "py-rmsnorm")
    first = build_path(root, progress=False)
    other = first.repo_path / "build" / ".torch-cpu.partial-999999-1"  # another process, mid-build
    (other / "obj").mkdir(parents=True)
    (root / "torch-ext" / "py_rmsnorm" / "note.py").write_text("# a source change: a new build\n")
    again = build_path(root, progress=False)
    assert not again.reused and check_build(again.variant_path) is None
    assert (other / "obj").is_dir()  # not ours to remove
    (root / "torch-ext" / "py_rmsnorm" / "note.py").write_text("# another change\n")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        builds = list(pool.map(lambda _: build_path(root, progress=False), range(8)))
    assert {b.kernel_id for b in builds} == {builds[0].kernel_id}
    assert check_build(builds[0].variant_path) is None
    assert [p.name for p in (first.repo_path / "build").iterdir() if "partial" in p.name] == [other.name]
