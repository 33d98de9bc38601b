"""Binder, replayed: repo2docker cannot run here, so this does what it would do in a fresh venv.

Install `binder/requirements.txt` (from the repository root, as repo2docker does), run
`binder/postBuild`, then execute `notebooks/01-quickstart.ipynb` in that environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_binder_environment_runs_the_quickstart(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = dict(
        os.environ, PATH=f"{venv / 'bin'}:{os.environ['PATH']}", KERNEL_EXPLORER_CACHE=str(tmp_path / "cache")
    )
    env.pop("VIRTUAL_ENV", None)

    def run(*command: str) -> subprocess.CompletedProcess:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
        assert done.returncode == 0, (
            f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        return done

    run(str(venv / "bin" / "pip"), "install", "--quiet", "-r", "binder/requirements.txt")
    freeze = run(str(venv / "bin" / "pip"), "freeze").stdout
    assert "torch==2.13.0+cpu" in freeze and "nvidia" not in freeze  # the CPU build, no CUDA wheels
    assert "kernel_explorer" in freeze.replace("-", "_") and "-e " not in freeze  # installed, not linked
    built = run("bash", "binder/postBuild")
    assert "default model converted" in built.stdout
    out = tmp_path / "executed.ipynb"
    run(
        str(venv / "bin" / "jupyter"),
        "nbconvert",
        "--to",
        "notebook",
        "--execute",
        "--ExecutePreprocessor.timeout=600",
        "--output",
        str(out),
        "notebooks/01-quickstart.ipynb",
    )
    executed = out.read_text()
    assert "instances run kernels" in executed and "Error" not in executed.split('"outputs"')[0]
