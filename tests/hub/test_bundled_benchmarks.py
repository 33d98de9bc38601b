"""The bundled repositories ship kernel-builder's benchmarks/ and tests/: `kernels benchmark` runs
them on the built repositories and their verification passes; their own tests pass there too."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_explorer.build.builder import BUNDLED_REPOS, build_repo


@pytest.mark.parametrize("name", BUNDLED_REPOS)
def test_kernels_benchmark_runs_and_verifies(hub: dict, name: str) -> None:
    from kernel_explorer._backend.internals import internal

    run_benchmark_script = internal("kernels.cli.benchmark", "run_benchmark_script")  # kernels' own runner

    built = build_repo(name, progress=False)
    scripts = sorted((built.repo_path / "benchmarks").glob("benchmark*.py"))
    assert scripts, "the built repository carries benchmarks/"
    results, sha = run_benchmark_script(
        scripts[0], iterations=3, warmup=1, cwd=built.repo_path, repo_id=str(built.repo_path),
        is_local=True, revision="local",
    )  # fmt: skip
    assert len(results) >= 3 and all(timing.verified for timing in results.values())
    assert built.kernel_id.endswith(sha)


@pytest.mark.slow
def test_kernels_benchmark_command(hub: dict) -> None:
    """The real `kernels benchmark ./<built repo>` command (it needs `tabulate`, from kernels[benchmark])."""
    if importlib.util.find_spec("tabulate") is None:
        pytest.skip("`kernels benchmark` needs tabulate (pip install 'kernels[benchmark]')")
    built = build_repo("rmsnorm", progress=False)
    kernels_cli = str(Path(sys.executable).parent / "kernels")
    result = subprocess.run(
        [kernels_cli, "benchmark", str(built.repo_path), "--iterations", "3", "--warmup", "1"],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout + result.stderr
    rows = [line for line in out.splitlines() if line.startswith("│ RmsNormBenchmark")]  # the table
    assert any("prefill_bf16" in row for row in rows), out[-2000:]
    assert all("✓" in row for row in rows), out[-2000:]  # the Match column: verify_* passed


@pytest.mark.slow
def test_the_repositories_own_tests_pass_on_the_built_copies(hub: dict) -> None:
    folders = [str(build_repo(name, progress=False).repo_path / "tests") for name in BUNDLED_REPOS]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *folders],
        capture_output=True, text=True, cwd=Path(folders[0]).parent, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout
