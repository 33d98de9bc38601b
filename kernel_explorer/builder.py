"""Builds the bundled kernel repositories (`hub/<repo>/`) into `build/<variant>/` for this machine.

The output is laid out exactly as kernel-builder lays out a Hub kernel repository, so the real
`kernels` loader (`get_local_kernel`, `LocalLayerRepository`, and the Hub path) loads it unchanged:
`metadata.json`, the Python package files, a generated `_ops.py`, and `<id>.abi3.so`, which registers
its ops under the metadata id.

Each C++ kernel source is compiled once per instruction set (AVX-512 with and without the BF16
conversions, AVX2 and portable on x86-64; portable elsewhere) and the library chooses at run time,
so one build runs on any CPU of the architecture. Builds go into the cache, keyed by a hash of the
sources, torch, the compiler and the flags; a finished build carries a stamp with the library's
checksum, so a half-written or corrupt build is detected and rebuilt, never loaded.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from kernel_explorer.bundled import BUNDLED_REPOS, bundled_repo_path
from kernel_explorer.cache import writable_cache_dir
from kernel_explorer.errors import BuildError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


def _hub_sources() -> Path:
    """The bundled repositories' sources: `hub/` beside this package in a checkout, else package data.

    The checkout comes first: an editable install maps `kernel_explorer.hub` to the checkout it was
    installed from, so a second checkout (a git worktree) on PYTHONPATH would otherwise build the
    first one's C++ sources.
    """
    from importlib import resources

    checkout = Path(__file__).resolve().parent.parent / "hub"
    if (checkout / "common" / "csrc" / "kx_dispatch.h").is_file():
        return checkout
    try:
        return Path(str(resources.files("kernel_explorer.hub")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "hub"


HUB_SOURCES = _hub_sources()
_STAMP = ".kx-build.json"
# Bump when the build recipe changes, so every cached build is redone.
_RECIPE_VERSION = 2

# The flags ATen itself uses for each CPU_CAPABILITY, so `at::vec::Vectorized` takes the same path.
_ISA_FLAGS: dict[str, list[str]] = {
    "avx512bf16": [
        "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma",
        "-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512",
    ],
    "avx512": [
        "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma",
        "-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512",
    ],
    "avx2": ["-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"],
    "portable": ["-DCPU_CAPABILITY=DEFAULT"],
}  # fmt: skip
# -ffp-contract=off: no fused multiply-adds the eager kernels don't use (keeps results bitwise).
_COMMON_FLAGS = ["-O3", "-std=c++17", "-fPIC", "-fopenmp", "-ffp-contract=off", "-fvisibility=hidden"]


@dataclass(frozen=True)
class BuiltRepo:
    """A built kernel repository: `repo_path` is what `get_local_kernel` / `LocalLayerRepository` take."""

    name: str
    repo_path: Path
    variant: str
    kernel_id: str
    isas: tuple[str, ...]
    reused: bool

    @property
    def variant_path(self) -> Path:
        return self.repo_path / "build" / self.variant


def isas_for_this_machine() -> tuple[str, ...]:
    """Code paths compiled into each library: all x86-64 ones on x86-64, portable elsewhere."""
    return (
        ("avx512bf16", "avx512", "avx2", "portable")
        if platform.machine() in ("x86_64", "AMD64")
        else ("portable",)
    )


def build_variant() -> str:
    """The variant directory name, chosen by `kernels`' resolver among the CPU variants it accepts.

    kernel-builder names Linux builds with the C++ ABI tag, so the tagged form is preferred.
    """
    from kernel_explorer.hardware import accepted_variants

    accepted, _ = accepted_variants("cpu")
    arch = [v for v in accepted if not v.startswith("torch-")]
    if not arch:
        raise BuildError("kernels accepts no CPU arch variant on this machine; cannot build the bundled hub")
    tagged = [v for v in arch if "-cxx11-" in v or "-cxx98-" in v]
    return (tagged or arch)[0]


def _compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx or not shutil.which(cxx):
        raise BuildError(
            "no C++ compiler found (looked for $CXX, g++, c++); install one, e.g. `apt-get install g++`"
        )
    return cxx


def _include_dirs(repo_src: Path, extra: list[str]) -> list[Path]:
    from torch.utils.cpp_extension import include_paths

    python_include = Path(sysconfig.get_paths()["include"])
    if not (python_include / "Python.h").is_file():
        raise BuildError(
            f"Python headers are missing ({python_include}/Python.h); install them, "
            f"e.g. `apt-get install python{sys.version_info.major}.{sys.version_info.minor}-dev`"
        )
    torch_includes = [Path(p) for p in include_paths()]
    if not (torch_includes[0] / "torch" / "library.h").is_file():
        raise BuildError("torch's C++ headers are missing; reinstall torch: `pip install torch==2.13.0`")
    return [repo_src / "csrc", *[(repo_src / e).resolve() for e in extra], python_include, *torch_includes]


def _read_config(repo_src: Path) -> dict:
    config_path = repo_src / "build.toml"
    if not config_path.is_file():
        raise BuildError(f"{repo_src} has no build.toml; is it a kernel repository?")
    return tomllib.loads(config_path.read_text())


def _source_files(repo_src: Path, config: dict) -> list[Path]:
    files = [repo_src / "build.toml"]
    for pattern_root in ("csrc", "torch-ext"):
        files += sorted(p for p in (repo_src / pattern_root).rglob("*") if p.is_file())
    for extra in config.get("kernel", {}).get(repo_src.name, {}).get("include", []):
        files += sorted(p for p in (repo_src / extra).rglob("*") if p.is_file())
    return [p for p in files if "__pycache__" not in p.parts]


@functools.cache
def _compiler_version(cxx: str) -> str:
    """Part of every build's fingerprint; asked once per process, not once per repository."""
    return subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout


def _fingerprint(repo_src: Path, config: dict, cxx: str, isas: tuple[str, ...]) -> str:
    import torch

    digest = hashlib.sha256()
    for path in _source_files(repo_src, config):
        digest.update(str(path.relative_to(repo_src.parent)).encode())
        digest.update(path.read_bytes())
    compiler_version = _compiler_version(cxx)
    digest.update(
        json.dumps(
            [torch.__version__, compiler_version, isas, _ISA_FLAGS, _COMMON_FLAGS, _RECIPE_VERSION]
        ).encode()
    )
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_build(variant_path: Path, fingerprint: str | None = None) -> str | None:
    """Why `variant_path` must not be loaded (incomplete, corrupt, stale), or None if it is sound."""
    stamp_path = variant_path / _STAMP
    if not stamp_path.is_file():
        return "no build stamp (the build never finished)"
    try:
        stamp = json.loads(stamp_path.read_text())
    except ValueError:
        return "unreadable build stamp"
    if fingerprint is not None and stamp.get("fingerprint") != fingerprint:
        return "sources, torch or compiler changed since this build"
    for name, checksum in stamp.get("files", {}).items():
        path = variant_path / name
        if not path.is_file():
            return f"{name} is missing"
        if _sha256(path) != checksum:
            return f"{name} does not match its checksum (corrupt or modified)"
    return None


def _compile(cxx: str, source: Path, obj: Path, flags: list[str], log: Path) -> None:
    cmd = [cxx, *flags, "-c", str(source), "-o", str(obj)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        log.write_text(" ".join(cmd) + "\n\n" + result.stderr)
        first_error = next((ln for ln in result.stderr.splitlines() if "error" in ln), result.stderr[:300])
        raise BuildError(f"compiling {source.name} failed: {first_error.strip()} (full log: {log})")


def _ops_py(kernel_id: str) -> str:
    return (
        '"""Generated by kernel_explorer.builder: loads the compiled library and names its ops."""\n\n'
        "import torch\n\n"
        f"from . import {kernel_id}  # noqa: F401  (registers the ops)\n\n"
        f"ops = torch.ops.{kernel_id}\n\n\n"
        "def add_op_namespace_prefix(op_name: str) -> str:\n"
        f'    return f"{kernel_id}::{{op_name}}"\n'
    )


def build_repo(
    name: str, *, force: bool = False, progress: bool = True, source_root: Path | None = None
) -> BuiltRepo:
    """Build (or reuse) the bundled repository `name` into the cache and return where it lies."""
    import torch

    repo_src = (source_root or HUB_SOURCES) / name
    if not repo_src.is_dir():
        raise BuildError(f"no kernel repository sources at {repo_src}")
    config = _read_config(repo_src)
    general = config.get("general", {})
    kernel_name = general.get("name", name)
    cxx = _compiler()
    isas = isas_for_this_machine()
    fingerprint = _fingerprint(repo_src, config, cxx, isas)
    kernel_id = f"_{kernel_name.replace('-', '_')}_cpu_{fingerprint[:10]}"
    variant = build_variant()
    writable_cache_dir("hub")
    repo_path = bundled_repo_path(name)
    variant_path = repo_path / "build" / variant

    if not force and variant_path.is_dir() and check_build(variant_path, fingerprint) is None:
        return BuiltRepo(name, repo_path, variant, kernel_id, isas, reused=True)

    kernel_cfg = config.get("kernel", {}).get(name, {})
    includes = _include_dirs(repo_src, kernel_cfg.get("include", []))
    abi = int(torch.compiled_with_cxx11_abi())
    base_flags = [*_COMMON_FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *(f"-I{p}" for p in includes)]
    base_flags += [f"-DKX_OPS_NS={kernel_id}", "-DPy_LIMITED_API=0x03090000"]
    base_flags += [f"-DKX_HAVE_{isa.upper()}" for isa in isas if isa != "portable"]

    staging = repo_path / "build" / f".{variant}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    objects_dir = staging / "obj"
    objects_dir.mkdir(parents=True)
    jobs: list[tuple[Path, Path, list[str]]] = []
    for src in kernel_cfg.get("src", []):
        if src.endswith(".cpp"):
            for isa in isas:
                obj = objects_dir / f"{Path(src).stem}.{isa}.o"
                jobs.append((repo_src / src, obj, [*base_flags, *_ISA_FLAGS[isa], f"-DKX_ISA={isa}"]))
    for src in config.get("torch", {}).get("src", []):
        jobs.append((repo_src / src, objects_dir / f"{Path(src).stem}.o", base_flags))

    bar = _progress(len(jobs) + 1, f"building {name}", progress)
    log = objects_dir / "build.log"
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            futures = [pool.submit(_compile, cxx, src, obj, flags, log) for src, obj, flags in jobs]
            for future in concurrent.futures.as_completed(futures):
                future.result()
                bar.update(1)
        library = staging / f"{kernel_id}.abi3.so"
        _link(cxx, [obj for _, obj, _ in jobs], library, log)
        bar.update(1)
    finally:
        bar.close()

    package_src = repo_src / "torch-ext" / kernel_name.replace("-", "_")
    for py in sorted(package_src.glob("*.py")):
        shutil.copy2(py, staging / py.name)
    (staging / "_ops.py").write_text(_ops_py(kernel_id))
    metadata = {
        "id": kernel_id,
        "name": kernel_name,
        "version": int(general.get("version", 1)),
        "license": general.get("license", "Apache-2.0"),
        "python-depends": [],
        "backend": {"type": "cpu"},
    }
    (staging / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    shutil.rmtree(objects_dir)
    files = {p.name: _sha256(p) for p in sorted(staging.iterdir()) if p.is_file()}
    (staging / _STAMP).write_text(
        json.dumps({"fingerprint": fingerprint, "isas": isas, "files": files}, indent=2)
    )
    shutil.rmtree(variant_path, ignore_errors=True)
    staging.rename(variant_path)
    return BuiltRepo(name, repo_path, variant, kernel_id, isas, reused=False)


def _link(cxx: str, objects: list[Path], library: Path, log: Path) -> None:
    from torch.utils.cpp_extension import library_paths

    lib_flags = [f"-L{p}" for p in library_paths()] + [f"-Wl,-rpath,{p}" for p in library_paths()]
    cmd = [cxx, "-shared", "-fopenmp", *map(str, objects), "-o", str(library), *lib_flags,
           "-lc10", "-ltorch_cpu", "-ltorch"]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        log.write_text(" ".join(cmd) + "\n\n" + result.stderr)
        raise BuildError(f"linking {library.name} failed: {result.stderr.strip()[:300]} (full log: {log})")


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, desc: str, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step")


def build_hub(
    names: tuple[str, ...] = BUNDLED_REPOS, *, force: bool = False, progress: bool = True
) -> list[BuiltRepo]:
    """Build every bundled repository (reusing sound cached builds)."""
    return [build_repo(name, force=force, progress=progress) for name in names]
