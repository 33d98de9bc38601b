"""Builds a kernel-builder repository's CPU backend (bundled or anyone's) into `build/<variant>/`.

The output is laid out exactly as kernel-builder lays out a Hub kernel repository, so the real
`kernels` loader (`get_local_kernel`, `LocalLayerRepository`, and the Hub path) loads it unchanged:
`metadata.json`, the package's Python files, the generated `_ops.py`, and `<ops name>.abi3.so`,
whose ops register under `_<name>_cpu_<hash>` (kernel-builder's `_<name>_<backend>_<unique id>`;
the unique id here is the content hash, not a git revision). Python-only repositories
(`[torch-noarch]`) go to `build/torch-cpu/`.

Every cpu `[kernel.*]` section is compiled with its own cxx-flags (the bundled repositories have
one section per instruction set and choose among them at run time); cuda, rocm, xpu and metal
sections are skipped with a line saying so (`repo_format`). Builds go into the cache, keyed by a
hash of the sources, torch, the compiler and the flags; a finished build carries a stamp with each
file's checksum, so a half-written or corrupt build is detected and rebuilt, never loaded, and a
failed build leaves nothing behind but its log.
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import json
import os
import platform
import shutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from kernel_explorer.build import compile_steps as cc
from kernel_explorer.build.bundled import BUNDLED_REPOS, bundled_repo_path, hub_sources
from kernel_explorer.build.cache import cache_root, writable_cache_dir
from kernel_explorer.build.repo_format import RepoPlan, read_plan, source_files
from kernel_explorer.errors import BuildError

__all__ = ["BUNDLED_REPOS", "HUB_SOURCES", "BuiltRepo", "build_hub", "build_path", "build_repo",
           "build_variant", "check_build", "isas_for_this_machine"]  # fmt: skip


HUB_SOURCES = hub_sources()
_STAMP = ".kx-build.json"
# Bump when the build recipe changes, so every cached build is redone.
_RECIPE_VERSION = 4  # 4: metadata.json records each file's digest (kernels 0.18+ checks it)
NOARCH_VARIANT = "torch-cpu"
# What a built repository carries besides build/: `kernels benchmark <repo>` runs benchmarks/.
_REPO_EXTRAS = ("benchmarks", "tests", "README.md")  # not build.toml: a built path is taken as it is


@dataclass(frozen=True)
class BuiltRepo:
    """A built kernel repository: `repo_path` is what `get_local_kernel` / `LocalLayerRepository` take."""

    name: str
    repo_path: Path
    variant: str
    kernel_id: str
    isas: tuple[str, ...]  # the cpu [kernel.*] sections compiled in (one per ISA for the bundled repos)
    reused: bool
    notes: tuple[str, ...] = ()  # sections skipped or not runnable on this CPU, one line each

    @property
    def variant_path(self) -> Path:
        return self.repo_path / "build" / self.variant


def isas_for_this_machine() -> tuple[str, ...]:
    """Code paths the bundled kernels carry here: all x86-64 ones on x86-64, portable elsewhere."""
    return (
        ("avx512bf16", "avx512", "avx2", "portable")
        if platform.machine() in ("x86_64", "AMD64")
        else ("portable",)
    )


def build_variant() -> str:
    """The variant directory name, chosen by `kernels`' resolver among the CPU variants it accepts.

    kernel-builder names Linux builds with the C++ ABI tag, so the tagged form is preferred.
    """
    from kernel_explorer._backend.platform import accepted_variants

    accepted, _ = accepted_variants("cpu")
    arch = [v for v in accepted if not v.startswith("torch-")]
    if not arch:
        raise BuildError("kernels accepts no CPU arch variant on this machine; cannot build a kernel here")
    tagged = [v for v in arch if "-cxx11-" in v or "-cxx98-" in v]
    return (tagged or arch)[0]


def _fingerprint(plan: RepoPlan, cxx: str | None) -> str:
    import torch

    digest = hashlib.sha256()
    for path in source_files(plan):
        digest.update(os.path.relpath(path, plan.root).encode())
        digest.update(path.read_bytes())
    toolchain = [torch.__version__, cc.compiler_version(cxx) if cxx else None, cc.COMMON_FLAGS]
    units = [
        (s.name, s.src, s.include, s.cxx_flags)
        for s in (*plan.kernels, *([plan.torch] if plan.torch else []))
    ]
    digest.update(json.dumps([*toolchain, units, plan.skipped, _RECIPE_VERSION]).encode())
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_build(variant_path: Path, fingerprint: str | None = None) -> str | None:
    """Why `variant_path` must not be loaded (incomplete, corrupt, stale), or None if it is sound.

    Another process may replace a stale build while this one reads it: a file that vanishes
    mid-check makes the build unsound for this look, never an exception.
    """
    stamp_path = variant_path / _STAMP
    try:
        stamp = json.loads(stamp_path.read_text())
    except FileNotFoundError:
        return "no build stamp (the build never finished)"
    except (OSError, ValueError):
        return "unreadable build stamp"
    if fingerprint is not None and stamp.get("fingerprint") != fingerprint:
        return "sources, torch or compiler changed since this build"
    for name, checksum in stamp.get("files", {}).items():
        try:
            if _sha256(variant_path / name) != checksum:
                return f"{name} does not match its checksum (corrupt or modified)"
        except OSError:
            return f"{name} is missing"
    try:  # written last, over every other file: its digest is what kernels 0.18+ checks on load
        recorded = json.loads((variant_path / "metadata.json").read_text()).get("digest")
        if recorded != variant_digest(variant_path):
            return "metadata.json's digest does not match the build's files (corrupt or modified)"
    except (OSError, ValueError, AttributeError):
        return "metadata.json is missing or unreadable"
    return None


def build_repo(
    name: str, *, force: bool = False, progress: bool = True, source_root: Path | None = None
) -> BuiltRepo:
    """Build (or reuse) the bundled repository `name` into the cache and return where it lies."""
    repo_src = (source_root or HUB_SOURCES) / name
    if not repo_src.is_dir():
        raise BuildError(f"no kernel repository sources at {repo_src}")
    plan = read_plan(repo_src)
    return _build(plan, bundled_repo_path(name), force=force, progress=progress)


def build_path(path: str | Path, *, force: bool = False, progress: bool = True) -> BuiltRepo:
    """Build (or reuse) the kernel-builder repository at `path` (its CPU backend) into the cache.

    A path that is already a built repository (`build/<variant>/metadata.json`, no build.toml)
    is returned as it is, for `get_local_kernel`.
    """
    root = Path(path).expanduser().resolve()
    if not (root / "build.toml").is_file() and any((root / "build").glob("*/metadata.json")):
        variant = next((v for v in _accepted() if (root / "build" / v / "metadata.json").is_file()), None)
        if variant is None:
            found = ", ".join(sorted(p.parent.name for p in (root / "build").glob("*/metadata.json")))
            raise BuildError(
                f"{root} holds builds for {found}, none of which this machine accepts; build its sources"
            )
        meta = json.loads((root / "build" / variant / "metadata.json").read_text())
        return BuiltRepo(meta.get("name", root.name), root, variant, meta.get("id", ""), (), reused=True)
    plan = read_plan(root)
    where = cache_root() / "repos" / f"{plan.name}-{hashlib.sha256(str(root).encode()).hexdigest()[:8]}"
    return _build(plan, where, force=force, progress=progress)


def _accepted() -> list[str]:
    from kernel_explorer._backend.platform import accepted_variants

    accepted, _ = accepted_variants("cpu")
    return list(accepted)


def _build(plan: RepoPlan, repo_path: Path, *, force: bool, progress: bool) -> BuiltRepo:
    notes = (*plan.skipped, *plan.warnings)
    cxx = None if plan.noarch else cc.compiler()
    fingerprint = _fingerprint(plan, cxx)
    kernel_id = f"_{plan.python_name}_cpu_{fingerprint[:10]}"
    variant = NOARCH_VARIANT if plan.noarch else build_variant()
    writable_cache_dir()
    variant_path = repo_path / "build" / variant
    sections = tuple(s.name for s in plan.kernels)
    if not force and variant_path.is_dir() and check_build(variant_path, fingerprint) is None:
        if _extras_differ(plan, repo_path):  # a changed benchmark or test needs no recompile
            _copy_extras(plan, repo_path)
        return BuiltRepo(plan.name, repo_path, variant, kernel_id, sections, reused=True, notes=notes)
    if progress:
        for line in notes:
            print(f"{plan.name}: {line}", file=sys.stderr)

    # one staging folder per process: two builds of one repository into one cache (a test run
    # beside `make setup`, two notebooks) must not write into each other's objects
    staging = repo_path / "build" / f".{variant}.partial-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    log = cache_root() / "logs" / f"{plan.name}-{kernel_id}.log"
    try:
        if cxx is not None:  # None: a noarch repository, nothing to compile
            _compile_and_link(plan, cxx, kernel_id, staging, log, progress)
        _write_package(plan, staging, kernel_id, fingerprint)
        _copy_extras(plan, repo_path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _publish(staging, variant_path, fingerprint)
    return BuiltRepo(plan.name, repo_path, variant, kernel_id, sections, reused=False, notes=notes)


def _publish(staging: Path, variant_path: Path, fingerprint: str) -> None:
    """Move a finished build into place.

    A sound build of the same sources that another process (or thread) finished first is kept (it
    may be loading it) and ours dropped; a stale or broken one is first renamed aside, so only one
    builder removes it and no builder ever deletes a sound build another just published.
    """
    for _ in range(8):
        if check_build(variant_path, fingerprint) is None:
            shutil.rmtree(staging, ignore_errors=True)
            return
        try:
            staging.rename(variant_path)  # atomic; fails while anything lies at variant_path
            return
        except OSError:
            pass
        aside = variant_path.with_name(f".{variant_path.name}.old-{os.getpid()}-{threading.get_ident()}")
        try:
            variant_path.rename(aside)
        except OSError:  # another builder moved it first
            continue
        if check_build(aside, fingerprint) is None:  # a sound build landed between our looks: back
            try:
                aside.rename(variant_path)
            except OSError:
                pass  # something else is there now; the next look decides
            else:
                continue
        shutil.rmtree(aside, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)
    raise BuildError(
        f"could not put the build into {variant_path}: other builds kept replacing it; build again"
    )


def _compile_and_link(
    plan: RepoPlan, cxx: str, kernel_id: str, staging: Path, log: Path, progress: bool
) -> None:
    generated = staging / "generated"
    generated.mkdir()
    (generated / "registration.h").write_text(cc.REGISTRATION_H)
    flags = cc.base_flags(kernel_id, generated, plan.root)
    jobs: list[tuple[Path, Path, list[str]]] = []
    objects = staging / "obj"
    objects.mkdir()
    assert plan.torch is not None
    for section in (*plan.kernels, plan.torch):
        includes = [f"-I{(plan.root / inc).resolve()}" for inc in section.include]
        for src in section.sources:
            obj = objects / f"{section.name}.{Path(src).stem}.o"
            jobs.append((plan.root / src, obj, [*includes, *flags, *section.cxx_flags]))
    if not jobs:
        raise BuildError(f"{plan.root}: the cpu sections list no C++ source to compile")
    bar = _progress(len(jobs) + 1, f"building {plan.name}", progress)
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            futures = [pool.submit(cc.compile_one, cxx, src, obj, fl, log) for src, obj, fl in jobs]
            for future in concurrent.futures.as_completed(futures):
                future.result()
                bar.update(1)
        cc.link(cxx, [obj for _, obj, _ in jobs], staging / f"{kernel_id}.abi3.so", log)
        bar.update(1)
    finally:
        bar.close()
    shutil.rmtree(objects)
    shutil.rmtree(generated)


def _write_package(plan: RepoPlan, staging: Path, kernel_id: str, fingerprint: str) -> None:
    package_src = plan.root / "torch-ext" / plan.python_name
    if not (package_src / "__init__.py").is_file():
        raise BuildError(
            f"{plan.root}: torch-ext/{plan.python_name}/__init__.py is missing (the kernel's package)"
        )
    for ext in plan.pyext:
        for path in sorted(package_src.rglob(f"*.{ext}")):
            if "__pycache__" in path.parts or path.name == "_ops.py":
                continue
            target = staging / path.relative_to(package_src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    ops = cc.noarch_ops_py(plan.python_name, fingerprint[:10]) if plan.noarch else cc.ops_py(kernel_id)
    (staging / "_ops.py").write_text(ops)
    metadata = {
        "id": kernel_id,
        "name": plan.name,
        "version": plan.version,
        "license": plan.license,
        "python-depends": list(plan.python_depends),
        "backend": {"type": "cpu"},
    }
    files = {str(p.relative_to(staging)): _sha256(p) for p in sorted(staging.rglob("*")) if p.is_file()}
    stamp = {"fingerprint": fingerprint, "sections": [s.name for s in plan.kernels], "files": files}
    (staging / _STAMP).write_text(json.dumps(stamp, indent=2))
    # Last, so the digest covers every other file (the stamp included), as kernel-builder's does.
    metadata["digest"] = variant_digest(staging)
    (staging / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")


# Files kernels leaves out of a variant's digest: the metadata that holds it, its signature, caches.
_NOT_DIGESTED = ("metadata.json", "metadata.json.sigstore")


def variant_digest(variant_path: Path) -> dict[str, object]:
    """The `digest` entry of a variant's metadata.json: each file's SHA-256, base64, by relative path.

    kernels 0.18+ hashes a variant's files on load and refuses one whose files differ from this
    record (an older kernels ignores the entry); without it, every load warns that the build's
    integrity cannot be verified.
    """
    files = {
        path.relative_to(variant_path).as_posix(): base64.b64encode(
            hashlib.sha256(path.read_bytes()).digest()
        ).decode()
        for path in sorted(variant_path.rglob("*"))
        if path.is_file() and path.name not in _NOT_DIGESTED and "__pycache__" not in path.parts
    }
    return {"algorithm": "sha256", "files": files}


def _copy_extras(plan: RepoPlan, repo_path: Path) -> None:
    """benchmarks/, tests/ and the README beside build/, so `kernels benchmark <repo_path>` runs them."""
    for name in _REPO_EXTRAS:
        src, dst = plan.root / name, repo_path / name
        if not src.exists():
            continue
        partial = repo_path / f".{name}.partial-{os.getpid()}-{threading.get_ident()}"
        shutil.rmtree(partial, ignore_errors=True)
        if src.is_dir():
            shutil.copytree(src, partial, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, partial)
        if dst.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
        try:
            partial.replace(dst)
        except OSError:  # another process's copy of the same files got there first
            shutil.rmtree(partial, ignore_errors=True)


def _files(path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {"": path.read_bytes()}
    if not path.is_dir():
        return {}
    found = sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return {str(p.relative_to(path)): p.read_bytes() for p in found}


def _extras_differ(plan: RepoPlan, repo_path: Path) -> bool:
    return any(_files(plan.root / name) != _files(repo_path / name) for name in _REPO_EXTRAS)


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
