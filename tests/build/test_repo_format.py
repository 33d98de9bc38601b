"""Reading kernel-builder's build.toml: what is built here, what is skipped, and one line per bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_repos import write_noarch_repo, write_standard_repo

from kernel_explorer.build import repo_format
from kernel_explorer.build.builder import HUB_SOURCES, build_path
from kernel_explorer.build.repo_format import missing_features, read_plan
from kernel_explorer.errors import BuildError


def test_standard_repo_plan_builds_the_cpu_sections_and_skips_cuda(tmp_path: Path) -> None:
    plan = read_plan(write_standard_repo(tmp_path / "peer"))
    assert [s.name for s in plan.kernels] == ["rms_norm_cpu", "rms_norm_avx2"]
    assert plan.kernels[1].cxx_flags == ("-mavx2", "-mfma")
    assert plan.torch is not None and plan.torch.sources == ("torch-ext/torch_binding.cpp",)
    assert plan.skipped == (
        "[kernel.rms_norm_cuda] skipped: backend 'cuda' cannot be built on this CPU-only machine",
    )
    assert plan.python_name == "peer_rmsnorm" and not plan.noarch


def test_bundled_repos_have_one_section_per_isa() -> None:
    plan = read_plan(HUB_SOURCES / "rmsnorm")
    assert [s.name for s in plan.kernels] == [
        f"rmsnorm_{isa}" for isa in ("avx512bf16", "avx512", "avx2", "portable")
    ]
    assert all("-ffp-contract=off" in s.cxx_flags for s in plan.kernels)


def test_noarch_repo(tmp_path: Path) -> None:
    plan = read_plan(write_noarch_repo(tmp_path / "py"))
    assert plan.noarch and plan.kernels == () and plan.license == "MIT"


def _one_line(exc: pytest.ExceptionInfo[BuildError]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_folder_without_build_toml(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as exc:
        read_plan(tmp_path)
    assert "has no build.toml" in _one_line(exc)


def test_malformed_build_toml_names_the_place(tmp_path: Path) -> None:
    (tmp_path / "build.toml").write_text('[general]\nname = "x\n')
    with pytest.raises(BuildError) as exc:
        read_plan(tmp_path)
    assert "is not valid TOML" in _one_line(exc) and "line 2" in str(exc.value)


def test_no_cpu_backend(tmp_path: Path) -> None:
    root = write_standard_repo(tmp_path / "peer")
    text = (root / "build.toml").read_text().replace('backend = "cpu"', 'backend = "rocm"')
    (root / "build.toml").write_text(text)
    with pytest.raises(BuildError) as exc:
        read_plan(root)
    assert "no CPU backend in this repository" in _one_line(exc)


def test_noarch_for_gpus_only_has_no_cpu_backend(tmp_path: Path) -> None:
    root = write_noarch_repo(tmp_path / "py")
    (root / "build.toml").write_text((root / "build.toml").read_text().replace('["cpu"]', '["cuda", "xpu"]'))
    with pytest.raises(BuildError, match="no CPU backend in this repository"):
        read_plan(root)


def test_isa_flags_this_cpu_lacks_are_built_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An AVX2-only CPU given the bundled AVX-512 sections: built, and said not to be dispatched to."""
    avx2_only = {"sse2", "avx", "avx2", "fma", "f16c"}
    monkeypatch.setattr(repo_format, "cpu_features", lambda: avx2_only)
    plan = read_plan(HUB_SOURCES / "rotary")
    assert len(plan.kernels) == 4  # every section is still built
    assert len(plan.warnings) == 2 and all("must not dispatch" in w for w in plan.warnings)
    assert "avx512_bf16" in plan.warnings[0] and "\n" not in plan.warnings[0]
    assert missing_features(("-mavx2", "-mfma"), avx2_only) == []


def test_build_path_refuses_bad_inputs_without_writing(tmp_path: Path, fresh_cache: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(BuildError, match=r"has no build\.toml"):
        build_path(tmp_path / "empty", progress=False)
    with pytest.raises(BuildError, match="is not a folder"):
        build_path(tmp_path / "missing", progress=False)
    assert not (fresh_cache / "repos").exists() or not any((fresh_cache / "repos").rglob("*.so"))


def test_a_dependency_this_machine_lacks_is_one_line(tmp_path: Path) -> None:
    root = write_standard_repo(tmp_path / "peer")
    text = (
        (root / "build.toml").read_text().replace('depends = ["torch"]', 'depends = ["torch", "onednn"]', 1)
    )
    (root / "build.toml").write_text(text)
    with pytest.raises(BuildError) as exc:
        read_plan(root)
    assert "depends on onednn, which this machine lacks" in _one_line(exc)
