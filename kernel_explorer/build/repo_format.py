"""Reads a kernel-builder repository's `build.toml` into what the builder compiles on this CPU.

kernel-builder's format (huggingface/kernels, `kernel-builder/`): `[general]` (name, version,
license, backends, python-depends), `[torch]` (the binding sources, include, cxx-flags, pyext),
one `[kernel.<name>]` per backend or instruction set (backend, depends, src, include, cxx-flags),
or `[torch-noarch]` for a Python-only repository. Only the cpu sections can be built here; the
others are listed, with why, in `RepoPlan.skipped`. Nothing here compiles or writes.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass, field
from pathlib import Path

from kernel_explorer.errors import BuildError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

_NAME = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]$")
# cxx-flags that make the compiler emit instructions a CPU may lack -> the feature it needs
# (`__builtin_cpu_supports` names, as /proc/cpuinfo spells them but for avx512bf16).
_ISA_FLAG_FEATURE = {
    "-mavx512f": "avx512f", "-mavx512bw": "avx512bw", "-mavx512vl": "avx512vl",
    "-mavx512dq": "avx512dq", "-mavx512bf16": "avx512_bf16", "-mavx512fp16": "avx512_fp16",
    "-mavx512vnni": "avx512_vnni", "-mamx-tile": "amx_tile", "-mamx-bf16": "amx_bf16",
    "-mavx2": "avx2", "-mfma": "fma", "-mf16c": "f16c", "-mavx": "avx",
}  # fmt: skip
# What a cpu section may depend on here: torch's headers and libraries (and OpenMP, always linked).
_DEPENDS_HERE = {"torch", "openmp"}
_X86_ONLY = re.compile(r"^-m(avx|fma|f16c|amx|sse|bmi|popcnt|arch=(x86|skylake|znver|sapphire|haswell))")


@dataclass(frozen=True)
class Section:
    """One compiled unit list: a cpu `[kernel.*]` section, or the `[torch]` binding."""

    name: str
    src: tuple[str, ...]
    include: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()

    @property
    def sources(self) -> tuple[str, ...]:
        """The files compiled (headers listed in src are inputs of the hash, not compiled)."""
        return tuple(s for s in self.src if s.endswith((".cpp", ".cc", ".cxx", ".c")))


@dataclass(frozen=True)
class RepoPlan:
    """What building `root` on this machine means."""

    root: Path
    name: str
    version: int
    license: str
    python_depends: tuple[str, ...]
    torch: Section | None  # None: Python-only (noarch)
    kernels: tuple[Section, ...]
    pyext: tuple[str, ...] = ("py",)
    skipped: tuple[str, ...] = field(default=())  # one line per section not built here
    warnings: tuple[str, ...] = field(default=())  # one line per section this CPU must not run
    hub_repo_id: str | None = None  # [general.hub] repo-id: the Hub repository this one is

    @property
    def python_name(self) -> str:
        return self.name.replace("-", "_")

    @property
    def noarch(self) -> bool:
        return self.torch is None


def _strings(table: dict, key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BuildError(f"build.toml: {where}.{key} must be a list of strings, got {value!r}")
    return tuple(value)


def _section(name: str, table: dict, where: str) -> Section:
    return Section(name, _strings(table, "src", where), _strings(table, "include", where),
                   _strings(table, "cxx-flags", where))  # fmt: skip


def cpu_features() -> set[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is unreadable: then nothing is warned)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    flags = next((ln.split(":", 1)[1] for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(flags.split())


def missing_features(cxx_flags: tuple[str, ...], features: set[str]) -> list[str]:
    """The CPU features `cxx_flags` make the compiler use and this CPU lacks."""
    if not features:
        return []
    needed = {_ISA_FLAG_FEATURE[f] for f in cxx_flags if f in _ISA_FLAG_FEATURE}
    return sorted(n for n in needed if n not in features)


def read_plan(root: Path) -> RepoPlan:
    """Parse `root/build.toml`; a BuildError with one line for every input that cannot build."""
    config_path = root / "build.toml"
    if not root.is_dir():
        raise BuildError(f"{root} is not a folder; give the path of a kernel repository (with build.toml)")
    if not config_path.is_file():
        raise BuildError(f"{root} has no build.toml; is it a kernel repository? (kernel-builder's format)")
    try:
        config = tomllib.loads(config_path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BuildError(f"{config_path} is not valid TOML: {exc}; fix it and build again") from None
    general = config.get("general")
    if not isinstance(general, dict) or not isinstance(general.get("name"), str):
        raise BuildError(f"{config_path} has no [general] name; kernel-builder needs one")
    name = general["name"]
    if not _NAME.match(name):
        raise BuildError(f"{config_path}: name {name!r} must match {_NAME.pattern} (kernels refuses others)")
    backends = _strings(general, "backends", "general")
    kernels_table = config.get("kernel", {})
    if not isinstance(kernels_table, dict):
        raise BuildError(f"{config_path}: [kernel] must be a table of [kernel.<name>] sections")

    kernels: list[Section] = []
    skipped: list[str] = []
    warnings: list[str] = []
    features = cpu_features()
    x86 = platform.machine() in ("x86_64", "AMD64")
    for section_name, table in kernels_table.items():
        where = f"kernel.{section_name}"
        if not isinstance(table, dict):
            raise BuildError(f"{config_path}: [{where}] must be a table")
        backend = table.get("backend")
        if backend != "cpu":
            skipped.append(f"[{where}] skipped: backend {backend!r} cannot be built on this CPU-only machine")
            continue
        section = _section(section_name, table, where)
        lacking = [d for d in _strings(table, "depends", where) if d not in _DEPENDS_HERE]
        if lacking:
            raise BuildError(
                f"{config_path}: [{where}] depends on {', '.join(lacking)}, which this machine lacks "
                f"(the builder provides {', '.join(sorted(_DEPENDS_HERE))}); build it with kernel-builder"
            )
        if not section.src:
            raise BuildError(f"{config_path}: [{where}] has no src")
        if not x86 and any(_X86_ONLY.match(f) for f in section.cxx_flags):
            skipped.append(f"[{where}] skipped: its cxx-flags target x86-64, this is {platform.machine()}")
            continue
        missing = missing_features(section.cxx_flags, features)
        if missing:
            warnings.append(
                f"[{where}] built, but this CPU lacks {', '.join(missing)}: the repository must not "
                "dispatch to it here (it must choose its code path at run time)"
            )
        kernels.append(section)

    has_noarch = "torch-noarch" in config or "torch-universal" in config
    torch_table = config.get("torch")
    if torch_table is None and not kernels and not has_noarch:
        raise BuildError(
            f"{root}: no CPU backend in this repository (backends: {', '.join(backends) or 'none'})"
        )
    if not has_noarch and not kernels:
        raise BuildError(
            f"{root}: no CPU backend in this repository ({'; '.join(skipped) or 'no [kernel.*]'})"
        )
    if has_noarch and backends and "cpu" not in backends and "universal" not in backends:
        raise BuildError(f"{root}: no CPU backend in this repository (backends: {', '.join(backends)})")
    noarch_table = config.get("torch-noarch", {}) if has_noarch else {}
    pyext = _strings(noarch_table if has_noarch else (torch_table or {}), "pyext", "torch") or ("py",)
    torch = None if has_noarch else _section("torch", torch_table or {}, "torch")
    return RepoPlan(
        root=root.resolve(),
        name=name,
        version=int(general.get("version", 1)),
        license=str(general.get("license", "Apache-2.0")),
        python_depends=_strings(general, "python-depends", "general"),
        torch=torch,
        kernels=tuple(kernels),
        pyext=pyext,
        skipped=tuple(skipped),
        warnings=tuple(warnings),
        hub_repo_id=_hub_repo_id(general),
    )


def _hub_repo_id(general: dict) -> str | None:
    hub = general.get("hub")
    found = hub.get("repo-id") if isinstance(hub, dict) else None
    return found if isinstance(found, str) and found.strip() else None


def source_files(plan: RepoPlan) -> list[Path]:
    """Every file the build reads: the content hash covers them, so any change rebuilds."""
    root = plan.root
    files = [root / "build.toml"]
    package = root / "torch-ext"
    if package.is_dir():
        files += sorted(p for p in package.rglob("*") if p.is_file())
    for section in ([plan.torch] if plan.torch else []) + list(plan.kernels):
        files += [root / s for s in section.src]
        for inc in section.include:
            inc_dir = (root / inc).resolve()
            if inc_dir.is_dir():
                files += sorted(p for p in inc_dir.rglob("*") if p.is_file())
    for folder in ("csrc", *[s.split("/")[0] for sec in plan.kernels for s in sec.src if "/" in s]):
        if (root / folder).is_dir():
            files += sorted(p for p in (root / folder).rglob("*") if p.is_file())
    seen: dict[Path, None] = {}
    for path in files:
        if "__pycache__" not in path.parts and path.suffix not in (".pyc", ".so", ".o"):
            seen.setdefault(path.resolve(), None)
    missing = [p for p in seen if not p.is_file()]
    if missing:
        raise BuildError(f"{root}: build.toml lists {missing[0]}, which does not exist")
    return list(seen)
