"""Binder: the environment files a real repo2docker build reads, and a replay of that build here.

repo2docker cannot run here, so the replay does what it would do in a fresh venv: install
`binder/requirements.txt` from the repository root, run `binder/postBuild`, then execute every
tutorial in that environment, metering the peak memory of each step against Binder's limit.
The fast tests check what a real build relies on and this machine cannot show (PyTorch's CPU
index is unreachable here; this machine's registry serves the CPU torch build under its name).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10, where pytest itself depends on tomli
    import tomli as tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from peak_memory import GiB, run_metered

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Binder's public service gives a session about 2 GB; a notebook over this is killed mid-run.
BINDER_MEMORY = 2 * GiB
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))
CUDA_PACKAGES = re.compile(r"^(nvidia-|triton\b|cuda-)", re.IGNORECASE)


def _requirement_lines() -> tuple[list[str], list[Requirement]]:
    """(pip option lines, requirements) of binder/requirements.txt; the local `.[...]` line is left out."""
    options, requirements = [], []
    for raw in (BINDER / "requirements.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("."):
            continue
        if line.startswith("-"):
            options.append(line)
        else:
            requirements.append(Requirement(line))
    return options, requirements


def _runtime_python() -> str:
    """The `major.minor` Python that runtime.txt pins (repo2docker's `python-X.Y` form)."""
    text = (BINDER / "runtime.txt").read_text().strip()
    match = re.fullmatch(r"python-(3\.\d+)", text)
    assert match, f"binder/runtime.txt must read python-3.<minor>, not {text!r}"
    return match[1]


def test_requirements_take_torch_from_pytorchs_cpu_index() -> None:
    options, requirements = _requirement_lines()
    assert f"--extra-index-url {TORCH_CPU_INDEX}" in options, "the CPU torch build is only on PyTorch's index"
    torch = next(r for r in requirements if r.name == "torch")
    (pin,) = torch.specifier
    assert pin.operator == "==" and Version(pin.version).local == "cpu", f"pin a +cpu torch build: {torch}"
    assert not [r.name for r in requirements if CUDA_PACKAGES.match(r.name)], "no CUDA wheels in a CPU image"


def test_requirements_pin_every_version_inside_the_package_ranges() -> None:
    _, requirements = _requirement_lines()
    loose = [str(r) for r in requirements if [s.operator for s in r.specifier] != ["=="]]
    assert not loose, f"pin exact versions, or the Binder image changes under the project: {loose}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + [
        d for extra in project["optional-dependencies"].values() for d in extra
    ]
    ranges = {canonicalize_name(req.name): req for req in map(Requirement, declared)}
    for requirement in requirements:
        version = next(iter(requirement.specifier)).version
        allowed = ranges.get(canonicalize_name(requirement.name))
        if allowed is not None:
            assert allowed.specifier.contains(version, prereleases=True), (
                f"binder pins {requirement}, outside pyproject's {allowed}"
            )


def test_runtime_pins_a_python_the_package_supports() -> None:
    python = _runtime_python()
    assert Version(python) >= Version("3.10"), f"runtime.txt pins python-{python}; the package needs 3.10+"


def test_postbuild_keeps_no_pip_cache_and_pins_what_it_installs() -> None:
    installs = [ln for ln in (BINDER / "postBuild").read_text().splitlines() if ln.startswith("pip install")]
    assert installs, "postBuild installs the default model's carrier package"
    for line in installs:
        assert "--no-cache-dir" in line, f"a pip cache would stay in the image: {line}"
        packages = [word for word in line.split()[2:] if not word.startswith("-")]
        assert all("==" in word for word in packages), f"unpinned install in postBuild: {line}"


def _badge_module():
    spec = importlib.util.spec_from_file_location("binder_badge", BINDER / "badge.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_badge_launches_the_repository_set_in_pyproject() -> None:
    badge = _badge_module()
    repo = badge.repository()
    assert badge.readme_badge() == badge.badge(repo), "README's Binder badge is stale: `make binder-badge`"
    assert f"/v2/gh/{repo}/" in badge.readme_badge()


def test_badge_setting_rejects_a_non_github_repository(tmp_path: Path) -> None:
    badge = _badge_module()
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n[project.urls]\nRepository = "https://example.org/x"\n')
    with pytest.raises(ValueError, match=r"Repository must be https://github.com/<owner>/<name>"):
        badge.repository(pyproject)
    pyproject.write_text('[project]\nname = "x"\n[project.urls]\nRepository = "https://github.com/o/n.git"\n')
    assert badge.repository(pyproject) == "o/n"


def test_meter_counts_a_grandchilds_memory() -> None:
    """The kernel is nbconvert's child: memory the command's descendants use must be counted."""
    grandchild = "import time; block = b'x' * (300 << 20); time.sleep(0.3)"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}], check=True)"
    done = run_metered([sys.executable, "-c", parent], cwd=ROOT, env=dict(os.environ), timeout=60)
    assert done.returncode == 0, done.stderr
    assert 300 * 2**20 <= done.peak_bytes < GiB, f"peak {done.peak_bytes / 2**20:.0f} MiB"


class BinderReplay:
    """A fresh venv built from binder/ as repo2docker would, and what each step cost."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.venv = root / "venv"
        self.env = dict(
            os.environ,
            PATH=f"{self.venv / 'bin'}:{os.environ['PATH']}",
            KERNEL_EXPLORER_CACHE=str(root / "cache"),
        )
        # a real Binder image has neither: a PYTHONPATH to the source tree (as a developer's shell
        # may set) would make the notebooks import the checkout instead of what pip installed
        self.env.pop("VIRTUAL_ENV", None)
        self.env.pop("PYTHONPATH", None)
        self.steps: dict[str, tuple[float, int]] = {}  # name -> (seconds, peak bytes)

    def run(self, name: str, *command: str, extra_env: dict[str, str] | None = None) -> str:
        """Run one build or notebook step, metered; its stdout, or a failure with both streams' ends."""
        done = run_metered(list(command), cwd=ROOT, env={**self.env, **(extra_env or {})}, timeout=1500)
        assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        self.steps[name] = (done.seconds, done.peak_bytes)
        return done.stdout

    def execute(self, notebook: Path) -> str:
        """Execute `notebook` in the Binder environment (as the badge's user would) and return it."""
        out = self.root / f"executed-{notebook.name}"
        self.run(
            notebook.name,
            str(self.venv / "bin" / "jupyter"),
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--ExecutePreprocessor.timeout=600",
            "--output",
            str(out),
            str(notebook.relative_to(ROOT)),
        )
        executed = out.read_text()
        assert '"output_type": "error"' not in executed, f"{notebook.name} raised"
        return executed

    def report(self) -> None:
        """Print each step's time and peak memory, then fail if any went over Binder's limit."""
        print(
            f"\n{'step':<36} {'seconds':>8} {'peak MiB':>9}   (Binder limit {BINDER_MEMORY / 2**20:.0f} MiB)"
        )
        for name, (seconds, peak) in self.steps.items():
            print(f"{name:<36} {seconds:>8.1f} {peak / 2**20:>9.0f}")
        over = [name for name, (_, peak) in self.steps.items() if peak >= BINDER_MEMORY]
        assert not over, f"over Binder's {BINDER_MEMORY / GiB:.0f} GiB: {over}"


@pytest.fixture(scope="module")
def binder(tmp_path_factory: pytest.TempPathFactory) -> BinderReplay:
    """The Binder environment, installed from binder/requirements.txt; postBuild is the test's to run."""
    runtime = _runtime_python()
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if here != runtime:
        pytest.skip(
            f"binder/runtime.txt pins Python {runtime}, this is {here}: the replay would not be faithful"
        )
    replay = BinderReplay(tmp_path_factory.mktemp("binder"))
    subprocess.run([sys.executable, "-m", "venv", str(replay.venv)], check=True)
    # The same file repo2docker installs. PyTorch's index cannot answer here: pip goes on with the
    # other indexes. No retries and a short timeout keep that from costing minutes; set through the
    # environment, not flags, so they also reach the pip that installs the package's build backend.
    fail_fast = {"PIP_RETRIES": "0", "PIP_TIMEOUT": "3", "PIP_DEFAULT_TIMEOUT": "3"}
    pip = str(replay.venv / "bin" / "pip")
    replay.run("pip install", pip, "install", "-q", "-r", "binder/requirements.txt", extra_env=fail_fast)
    return replay


@pytest.mark.slow
def test_binder_build_installs_the_pinned_cpu_environment_and_runs_the_quickstart(
    binder: BinderReplay,
) -> None:
    freeze = binder.run("pip freeze", str(binder.venv / "bin" / "pip"), "freeze")
    installed = {
        canonicalize_name(name): version
        for name, version in (line.split("==", 1) for line in freeze.splitlines() if "==" in line)
    }
    assert installed.get("torch") == "2.13.0+cpu", "the CPU build of torch"
    assert not [name for name in installed if CUDA_PACKAGES.match(name)], f"CUDA wheels: {freeze}"
    for requirement in _requirement_lines()[1]:
        version = installed.get(canonicalize_name(requirement.name))
        assert version and requirement.specifier.contains(version), f"{requirement}: got {version}"
    assert "kernel_explorer" in freeze.replace("-", "_") and "-e " not in freeze  # installed, not linked

    built = binder.run("postBuild", "bash", "binder/postBuild")
    assert "default model converted" in built
    assert "instances run kernels" in binder.execute(ROOT / "notebooks" / "01-quickstart.ipynb")
    binder.report()


@pytest.mark.slow
def test_every_tutorial_runs_within_binder_memory(binder: BinderReplay) -> None:
    """Binder's sessions have about 2 GB: each tutorial (and postBuild) must peak under that."""
    if "postBuild" not in binder.steps:  # the build test was deselected
        binder.run("postBuild", "bash", "binder/postBuild")
    for notebook in NOTEBOOKS:
        if notebook.name not in binder.steps:
            binder.execute(notebook)
    assert {nb.name for nb in NOTEBOOKS} <= binder.steps.keys()
    binder.report()
