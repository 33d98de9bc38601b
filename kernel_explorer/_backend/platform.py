"""Which backend `kernels` selects here, which variant strings it accepts, and what a described
machine ("cuda 13.0, sm_90, torch 2.13") would accept: kernels' own resolver, given that machine."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kernel_explorer._backend.internals import internal
from kernel_explorer.errors import KernelExplorerError


def selected_backend(backend: str | None = None) -> str:
    """The backend variant string `kernels` selects (`"cpu"`, `"cu128"`, ...); None: the torch build's."""
    _select_backend = internal("kernels.backends", "_select_backend")

    return _select_backend(backend).variant_str


def accepted_of(candidates: list[str], backend: str | None = None) -> tuple[str, ...]:
    """The variant strings among `candidates` that `kernels`' resolver accepts, most preferred first."""
    VariantAccepted = internal("kernels.variants", "VariantAccepted")
    parse_variant = internal("kernels.variants", "parse_variant")
    resolve_variants = internal("kernels.variants", "resolve_variants")

    variants = [parse_variant(c) for c in dict.fromkeys(candidates)]
    _, trace = resolve_variants(variants, backend)
    return tuple(d.variant.variant_str for d in trace if isinstance(d, VariantAccepted))


def candidate_variants(torch_version: str, backend: str, cpu: str, os_name: str) -> list[str]:
    """Every variant string a repository could carry for this machine's torch/CPU/OS.

    Candidates deliberately include near-misses (the other C++ ABI tag); `kernels`' resolver then
    decides which it accepts and in which order, so the preference order is the loader's own.
    """
    major, minor = torch_version.split(".")[:2]
    minor_digits = re.match(r"\d+", minor)
    if minor_digits is None:
        raise ValueError(f"torch {torch_version!r} has no minor version number to name its builds by")
    tv = f"torch{major}{minor_digits.group(0)}"
    backends = [backend]
    cuda = re.fullmatch(r"cu(\d+?)(\d)", backend)
    if cuda:  # a CUDA x.y runtime accepts builds for x.0 .. x.y
        backends = [f"cu{cuda.group(1)}{m}" for m in range(int(cuda.group(2)), -1, -1)]
    candidates: list[str] = []
    for b in backends:
        candidates += [f"{tv}-cxx11-{b}-{cpu}-{os_name}", f"{tv}-cxx98-{b}-{cpu}-{os_name}"]
        candidates.append(f"{tv}-{b}-{cpu}-{os_name}")
    noarch = "npu" if backend.startswith("cann") else re.sub(r"\d+$", "", backend)
    noarch = {"cu": "cuda", "rocm": "rocm", "xpu": "xpu"}.get(noarch, noarch)
    candidates += [f"torch-{noarch}", "torch-universal"]
    return candidates


def system() -> tuple[str, str]:
    """CPU and OS as kernels' resolver names them."""
    import platform

    cpu = platform.machine()
    os_name = platform.system().lower()
    if os_name == "darwin" and cpu == "arm64":
        cpu = "aarch64"
    if os_name == "windows" and cpu == "AMD64":
        cpu = "x86_64"
    return cpu, os_name


def accepted_variants(backend: str | None = None) -> tuple[tuple[str, ...], str]:
    """Variant strings `kernels` accepts on this machine, most preferred first, and the backend.

    `backend=None` is what `kernelize` picks for the torch build; `"cpu"` is what it picks for
    `device="cpu"`.
    """
    import torch

    selected = selected_backend(backend)
    cpu, os_name = system()
    candidates = candidate_variants(torch.__version__, selected, cpu, os_name)
    return accepted_of(candidates, backend), selected


def ops_without_kernel(kernel_module: Any, dispatch_key: str = "CPU") -> list[str]:
    """Ops a loaded kernel registered (under its metadata id) that have no kernel for `dispatch_key`.

    A registered op with no kernel for a backend is visible without calling it: flash-attn2's CPU
    build defines `fwd` but implements only `varlen_fwd` for the CPU. Composite ops (implemented in
    terms of others) count as implemented.
    """
    import torch

    namespace = _namespace(kernel_module)
    if namespace is None:
        return []
    missing = []
    for qualname in torch._C._dispatch_get_all_op_names():
        if not qualname.startswith(f"{namespace}::"):
            continue
        keys = (dispatch_key, "CompositeImplicitAutograd", "CompositeExplicitAutograd")
        if not any(torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key) for key in keys):
            missing.append(qualname.split("::", 1)[1])
    return sorted(missing)


def _namespace(kernel_module: Any) -> str | None:
    """The op namespace of a loaded kernel module: its `ops` object's namespace, or its package name."""
    ops = getattr(getattr(kernel_module, "_ops", None), "ops", None)
    name = getattr(ops, "name", None)
    if isinstance(name, str) and name:
        return name.removeprefix("torch.ops.").split(".")[0]
    package = getattr(kernel_module, "__name__", "") or ""
    return package.split(".")[0] or None


def version_counter(tensor: Any) -> int:
    """A tensor's version counter (bumped by every in-place change): how the guard sees one."""
    return int(tensor._version)


# -- variants, in kernels' own words, for this machine or a described one ---------------------------

#: the forms `describe_platform` reads, for its one-line error
PLATFORM_FORMS = (
    "'cuda 13.0, sm_90, torch 2.13', 'rocm 7.0, gfx942, torch 2.13', 'metal, torch 2.13' or "
    "'cpu, x86_64, torch 2.13' (optional parts: python 3.12, linux/darwin/windows, cxx11/cxx98, "
    "macos 26.0, x86_64/aarch64, tvm-ffi 0.1, mlx)"
)


@dataclass(frozen=True)
class DescribedPlatform:
    """Another machine, as much of it as `kernels`' variant resolver looks at (and its GPU arch)."""

    text: str  # what the user wrote
    backend: str  # "cuda", "rocm", "metal" or "cpu"
    backend_version: str | None  # "13.0" for CUDA and ROCm
    gpu_arch: str | None  # CUDA capability "9.0" (from sm_90), or a ROCm arch "gfx942"
    cpu: str  # "x86_64", "aarch64"
    os: str  # "linux", "darwin", "windows"
    torch: str  # "2.13"
    cxx11_abi: bool | None
    python: str  # "3.11"
    macos: str | None
    tvm_ffi: str | None
    mlx: bool

    def __str__(self) -> str:
        backend = f"{self.backend} {self.backend_version}" if self.backend_version else self.backend
        parts = [backend]
        if self.gpu_arch:
            parts.append(f"sm_{self.gpu_arch.replace('.', '')}" if self.backend == "cuda" else self.gpu_arch)
        parts += [f"torch {self.torch}", f"python {self.python}", f"{self.cpu}-{self.os}"]
        if self.macos:
            parts.append(f"macos {self.macos}")
        return ", ".join(parts)


_VERSION = r"(\d+)\.(\d+)"


def describe_platform(text: str) -> DescribedPlatform:
    """Read a machine description ("cuda 13.0, sm_90, torch 2.13"); one-line error naming the forms."""
    import sys

    def refuse(why: str) -> KernelExplorerError:
        return KernelExplorerError(f"Cannot read the platform {text!r}: {why}. Write it as {PLATFORM_FORMS}.")

    parts = [p.strip().lower() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise refuse("it is empty")
    head = parts[0].split()
    backend, version = head[0], head[1] if len(head) > 1 else None
    if backend not in ("cuda", "rocm", "metal", "cpu") or len(head) > 2:
        raise refuse(f"it must start with the backend (cuda X.Y, rocm X.Y, metal or cpu), not {parts[0]!r}")
    if (backend in ("cuda", "rocm")) != (version is not None) or (
        version is not None and not re.fullmatch(_VERSION, version)
    ):
        raise refuse(f"{backend} takes {'a version X.Y' if backend in ('cuda', 'rocm') else 'no version'}")
    found: dict[str, Any] = {"cpu": "aarch64" if backend == "metal" else "x86_64"}
    found["os"] = "darwin" if backend == "metal" else "linux"
    for part in parts[1:]:
        words = part.split()
        if m := re.fullmatch(r"sm_?(\d+?)(\d)([af]?)", part):
            if backend != "cuda":
                raise refuse(f"{part!r} is a CUDA arch, for a cuda platform")
            found["gpu_arch"] = f"{m.group(1)}.{m.group(2)}{m.group(3)}"
        elif re.fullmatch(r"gfx[0-9a-f]+", part):
            if backend != "rocm":
                raise refuse(f"{part!r} is a ROCm arch, for a rocm platform")
            found["gpu_arch"] = part
        elif words[0] in ("torch", "python", "macos", "tvm-ffi") and len(words) == 2:
            if not re.fullmatch(_VERSION + r"(\.\d+)?", words[1]):
                raise refuse(f"{words[0]} takes a version X.Y, not {words[1]!r}")
            found[words[0].replace("-", "_")] = ".".join(words[1].split(".")[:2])
        elif part in ("x86_64", "aarch64", "arm64", "amd64"):
            found["cpu"] = {"arm64": "aarch64", "amd64": "x86_64"}.get(part, part)
        elif part in ("linux", "darwin", "macos", "windows"):
            found["os"] = "darwin" if part == "macos" else part
        elif part in ("cxx11", "cxx98"):
            found["cxx11_abi"] = part == "cxx11"
        elif part == "mlx":
            found["mlx"] = True
        else:
            raise refuse(f"{part!r} is not a part it knows")
    if "torch" not in found:
        raise refuse("it needs the torch version (torch X.Y)")
    if backend == "metal" and found["os"] == "darwin":
        found.setdefault("macos", "26.0")  # what kernels' Metal builds need; say "macos X.Y" otherwise
    return DescribedPlatform(
        text=str(text),
        backend=backend,
        backend_version=version,
        gpu_arch=found.get("gpu_arch"),
        cpu=found["cpu"],
        os=found["os"],
        torch=found["torch"],
        cxx11_abi=found.get("cxx11_abi", True if found["os"] == "linux" else None),
        python=found.get("python", f"{sys.version_info.major}.{sys.version_info.minor}"),
        macos=found.get("macos"),
        tvm_ffi=found.get("tvm_ffi"),
        mlx=bool(found.get("mlx", False)),
    )


@dataclass(frozen=True)
class VariantVerdict:
    """One build variant, accepted or rejected by `kernels`' resolver, with its reason when rejected."""

    variant: str
    accepted: bool
    reason: str = ""  # kernels' own words for a rejection

    def line(self, preferred: bool = False) -> str:
        if self.accepted:
            return f"{self.variant}: {'taken' if preferred else 'accepted'}"
        return f"{self.variant}: rejected, {self.reason}"


def variant_verdicts(
    names: Iterable[str], platform: DescribedPlatform | None = None, backend: str | None = None
) -> list[VariantVerdict]:
    """`kernels`' resolver on these variant names: accepted ones first (most preferred first), then
    the rejected ones with kernels' reason, then names this `kernels` cannot read.

    `platform=None` is this machine (with `backend` as `kernelize` would select it); a described
    platform runs the same resolver with that machine's backend, CPU, OS, torch and Python.
    """
    import importlib.metadata

    parse_variant = internal("kernels.variants", "parse_variant")
    VariantAccepted = internal("kernels.variants", "VariantAccepted")

    parsed, unreadable = [], []
    name_of: dict[int, str] = {}
    for name in dict.fromkeys(names):
        try:
            variant = parse_variant(name)
        except (ValueError, TypeError, AttributeError) as error:
            version = importlib.metadata.version("kernels")
            unreadable.append(
                VariantVerdict(name, False, f"kernels {version} cannot read this name ({error})")
            )
            continue
        parsed.append(variant)
        name_of[id(variant)] = name
    if not parsed:
        return unreadable
    if platform is None:
        resolve_variants = internal("kernels.variants", "resolve_variants")
        _, trace = resolve_variants(parsed, backend)
    else:
        trace = _resolve_for(parsed, platform)
    verdicts = [
        VariantVerdict(
            name_of.get(id(d.variant)) or str(d.variant.variant_str),
            isinstance(d, VariantAccepted),
            "" if isinstance(d, VariantAccepted) else str(d.reason),
        )
        for d in trace
    ]
    return verdicts + unreadable


def _resolve_for(variants: list[Any], platform: DescribedPlatform) -> list[Any]:
    """kernels' resolver with a described machine in place of this one (its explicit-system form)."""
    import inspect

    from packaging.version import Version

    resolve = internal("kernels.variants", "_resolve_variant_for_system")
    parse_backend = internal("kernels.backends", "parse_backend")

    legacy = platform.backend  # the legacy spelling both releases read: "cu130", "rocm70", "metal", "cpu"
    if platform.backend_version:
        major, minor = platform.backend_version.split(".")
        legacy = f"{'cu' if platform.backend == 'cuda' else platform.backend}{major}{minor}"
    takes_parts = next(iter(inspect.signature(parse_backend).parameters)) == "parts"  # kernels 0.19+
    selected = parse_backend([legacy]) if takes_parts else parse_backend(legacy)
    arguments: dict[str, Any] = {
        "variants": variants,
        "selected_backend": selected,
        "cpu": platform.cpu,
        "os": platform.os,
        "torch_version": Version(platform.torch),
        "torch_cxx11_abi": platform.cxx11_abi,
        "tvm_ffi_version": Version(platform.tvm_ffi) if platform.tvm_ffi else None,
        "macos_version": Version(platform.macos) if platform.macos else None,
        "python_version": Version(platform.python),  # kernels 0.19+
        "free_threaded": False,  # kernels 0.19+
        "has_mlx": platform.mlx,  # kernels 0.19+
    }
    accepted = inspect.signature(resolve).parameters
    _, trace = resolve(**{k: v for k, v in arguments.items() if k in accepted})
    return trace


def arch_refusal(archs: list[str] | None, platform: DescribedPlatform) -> str:
    """Why kernels would refuse, on load, a build declaring `archs` on the described GPU ("": it would not).

    kernels' `ArchValidator` checks a build's declared architectures against the device at load time
    (after the resolver chose the variant); this asks it about the described device instead.
    """
    if not archs or platform.gpu_arch is None:
        return ""
    if platform.backend == "cuda":
        supports = internal("kernels.archs", "_supports_cuda_capability")
        m = re.match(r"(\d+)\.(\d+)", platform.gpu_arch)
        if m is None or supports(list(archs), (int(m.group(1)), int(m.group(2)))):
            return ""
        return (
            f"its build declares CUDA archs {', '.join(archs)}, not sm_{m.group(1)}{m.group(2)}: "
            "kernels refuses it on load (check_arch=False to load it anyway)"
        )
    if platform.backend == "rocm" and platform.gpu_arch not in archs:
        return (
            f"its build declares ROCm archs {', '.join(archs)}, not {platform.gpu_arch}: "
            "kernels refuses it on load (check_arch=False to load it anyway)"
        )
    return ""
