"""One immutable snapshot of the machine, as the kernel loader sees it.

Which Hub kernel build a machine can use depends on the OS, the CPU, the torch build and its C++ ABI,
and the accelerator backend. `detect_hardware()` gathers all of that once, and asks `kernels`' own
resolver which build-variant strings it accepts, so that what the panel shows is exactly what
`kernelize` will pick, not a re-derivation that could drift from it.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import platform
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.platform import (
    VariantVerdict,
    accepted_variants,
    candidate_variants,
    selected_backend,
    system,
    variant_verdicts,
)
from kernel_explorer.inspect.versions import Compatibility, check_compatibility

if TYPE_CHECKING:
    from kernel_explorer.inspect.variants import VariantsReport

# ISA extensions that decide which code path a CPU kernel can take, in display order.
_X86_FLAGS = {
    "sse4_2": "SSE4.2",
    "avx": "AVX",
    "avx2": "AVX2",
    "fma": "FMA",
    "f16c": "F16C",
    "avx512f": "AVX-512F",
    "avx512bw": "AVX-512BW",
    "avx512vl": "AVX-512VL",
    "avx512_vnni": "AVX-512-VNNI",
    "avx512_bf16": "AVX-512-BF16",
    "avx512_fp16": "AVX-512-FP16",
    "amx_tile": "AMX-TILE",
    "amx_bf16": "AMX-BF16",
    "amx_int8": "AMX-INT8",
}
_ARM_FLAGS = {
    "asimd": "NEON",
    "asimdhp": "NEON-FP16",
    "bf16": "BF16",
    "i8mm": "I8MM",
    "sve": "SVE",
    "sve2": "SVE2",
    "sme": "SME",
}


@dataclass(frozen=True)
class Accelerator:
    """One accelerator device as torch reports it."""

    kind: str  # "cuda", "rocm", "mps" or "xpu"
    index: int
    name: str
    arch: str | None  # compute capability ("9.0") or gfx arch ("gfx942")
    memory_bytes: int | None
    driver_version: str | None
    runtime_version: str | None


@dataclass(frozen=True)
class CpuInfo:
    """The host CPU: what decides which CPU kernel code path runs."""

    model: str
    architecture: str
    logical_cores: int
    usable_cores: int
    isa: tuple[str, ...]
    torch_capability: str  # what ATen's own dispatch picked, e.g. "AVX512"


@dataclass(frozen=True)
class KernelPath:
    """Which compiled code path a CPU kernel repository runs on this machine, and why."""

    repo: str
    isa: str  # the path running: "avx512bf16", "avx512", "avx2" or "portable"
    paths: tuple[str, ...]  # the paths this CPU runs, widest first
    reason: str  # the repository's own words: measured ratios, forced, or the only path

    def line(self) -> str:
        return f"{self.repo}: {self.reason}"


@dataclass(frozen=True)
class HardwareSnapshot:
    """Everything that decides which kernel builds load here. Immutable; compare two to see a change."""

    os: str
    architecture: str
    cpu: CpuInfo
    memory_bytes: int | None
    python_version: str
    torch_version: str
    torch_build: str  # "cpu", "cuda 12.8", "rocm 6.3", "xpu ...", "mps"
    cxx11_abi: bool | None
    accelerators: tuple[Accelerator, ...]
    kernels_backend: str  # backend variant string `kernels` selects: "cpu", "cu128", "rocm63", ...
    accepted_variants: tuple[str, ...]  # for `kernels_backend`, most preferred first
    accepted_cpu_variants: tuple[str, ...]  # what `kernelize(..., device="cpu")` accepts
    stable_abi_note: str
    compatibility: Compatibility
    notes: tuple[str, ...] = field(default=())
    #: the code path each bundled kernel chose here (kernel_paths.py; empty in `detect_hardware()`'s
    #: snapshot, which loads no kernel)
    kernel_paths: tuple[KernelPath, ...] = field(default=())
    #: kernels' own verdict on each variant kind a repository may carry (the new kinds included):
    #: accepted here, or rejected with kernels' reason
    variant_verdicts: tuple[VariantVerdict, ...] = field(default=())
    #: what a described machine would take of each layer's candidates (`Explorer.hardware_for`)
    elsewhere: tuple[VariantsReport, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (JSON-ready)."""
        return asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) pairs shared by the text and HTML renderings."""
        cpu = self.cpu
        rows = [
            ("OS / arch", f"{self.os} / {self.architecture}"),
            ("CPU", f"{cpu.model} ({cpu.usable_cores} of {cpu.logical_cores} cores usable)"),
            ("ISA", ", ".join(cpu.isa) or "baseline only"),
            ("ATen CPU path", cpu.torch_capability),
            ("Memory", _gib(self.memory_bytes)),
            ("Python", self.python_version),
            ("torch", f"{self.torch_version} ({self.torch_build}, C++11 ABI: {self.cxx11_abi})"),
        ]
        if not self.accelerators:
            rows.append(("Accelerators", "none"))
        for acc in self.accelerators:
            rows.append(
                (
                    f"{acc.kind}:{acc.index}",
                    f"{acc.name}, arch {acc.arch or '?'}, {_gib(acc.memory_bytes)}, "
                    f"driver {acc.driver_version or '?'}, runtime {acc.runtime_version or '?'}",
                )
            )
        rows.append(("kernels backend", self.kernels_backend))
        rows.append(("Accepted variants", "\n".join(self.accepted_variants)))
        if self.accepted_cpu_variants != self.accepted_variants:
            rows.append(("Accepted CPU variants", "\n".join(self.accepted_cpu_variants)))
        rows.append(("Stable ABI", self.stable_abi_note))
        if self.variant_verdicts:
            rows.append(("Variants (kernels' word)", "\n".join(v.line() for v in self.variant_verdicts)))
        for report in self.elsewhere:
            rows.append((f"{report.layer} elsewhere", "\n".join(report.lines()[1:]).replace("  ", "", 1)))
        if self.kernel_paths:
            rows.append(("Bundled kernel paths", "\n".join(k.line() for k in self.kernel_paths)))
        c = self.compatibility
        rows.append(
            (
                "kernels / Transformers",
                f"{c.kernels_version} / {c.transformers_version}: {'OK' if c.ok else 'INCOMPATIBLE'}",
            )
        )
        return rows

    def __str__(self) -> str:
        width = max(len(label) for label, _ in self.rows())
        lines = ["Hardware snapshot"]
        for label, value in self.rows():
            first, *rest = value.split("\n") or [""]
            lines.append(f"  {label:<{width}}  {first}")
            lines.extend(f"  {'':<{width}}  {more}" for more in rest)
        if not self.compatibility.ok:
            lines.append(f"  WARNING: {self.compatibility.message}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(label)}</th>"
            f"<td style='text-align:left'>{html.escape(value).replace(chr(10), '<br>')}</td></tr>"
            for label, value in self.rows()
        )
        warning = ""
        if not self.compatibility.ok:
            warning = (
                "<div style='color:#b00;font-weight:bold;margin-top:.5em'>"
                f"⚠ {html.escape(self.compatibility.message)}</div>"
            )
        return f"<div class='kx-hardware'><table>{body}</table>{warning}</div>"


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def cpu_model() -> str:
    """The CPU's model name (what a record's provenance names)."""
    return _cpu_model_and_flags()[0] or platform.processor() or platform.machine()


def _cpu_model_and_flags() -> tuple[str, set[str]]:
    """CPU model name and feature flags, from /proc/cpuinfo where there is one."""
    text = _read_text("/proc/cpuinfo")
    model = ""
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return model or platform.processor() or platform.machine(), flags


def _isa(flags: set[str], architecture: str) -> tuple[str, ...]:
    table = _ARM_FLAGS if architecture in ("aarch64", "arm64") else _X86_FLAGS
    found = [label for flag, label in table.items() if flag in flags]
    if architecture == "arm64" and not found:  # macOS has no /proc/cpuinfo; NEON is baseline there
        found = ["NEON"]
    return tuple(found)


def _memory_bytes() -> int | None:
    match = re.search(r"MemTotal:\s+(\d+) kB", _read_text("/proc/meminfo"))
    if match:
        return int(match.group(1)) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _nvidia_driver_version() -> str | None:
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", _read_text("/proc/driver/nvidia/version"))
    return match.group(1) if match else None


def _torch_build(torch: Any) -> str:
    if torch.version.cuda is not None:
        return f"cuda {torch.version.cuda}"
    if torch.version.hip is not None:
        return f"rocm {torch.version.hip}"
    if getattr(torch.version, "xpu", None):
        return f"xpu {torch.version.xpu}"
    if torch.backends.mps.is_built():
        return "mps"
    return "cpu"


def _accelerators(torch: Any) -> tuple[Accelerator, ...]:
    """Every device torch can see, with what it reports about each."""
    found: list[Accelerator] = []
    if torch.cuda.is_available():
        is_rocm = torch.version.hip is not None
        driver = None if is_rocm else _nvidia_driver_version()
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            if is_rocm:
                arch = str(getattr(props, "gcnArchName", "")).split(":")[0] or None
            else:
                arch = f"{props.major}.{props.minor}"
            found.append(
                Accelerator(
                    kind="rocm" if is_rocm else "cuda",
                    index=i,
                    name=str(props.name),
                    arch=arch,
                    memory_bytes=int(props.total_memory),
                    driver_version=driver,
                    runtime_version=torch.version.hip if is_rocm else torch.version.cuda,
                )
            )
    if torch.backends.mps.is_available():
        memory = None
        with contextlib.suppress(AttributeError, RuntimeError):  # answers only on a real Metal device
            memory = int(torch.mps.recommended_max_memory())
        found.append(Accelerator("mps", 0, "Apple MPS", None, memory, None, platform.mac_ver()[0] or None))
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        for i in range(xpu.device_count()):
            props = xpu.get_device_properties(i)
            found.append(
                Accelerator(
                    kind="xpu",
                    index=i,
                    name=str(props.name),
                    arch=None,
                    memory_bytes=int(getattr(props, "total_memory", 0)) or None,
                    driver_version=str(getattr(props, "driver_version", "")) or None,
                    runtime_version=getattr(torch.version, "xpu", None),
                )
            )
    return tuple(found)


def _new_kind_variants(torch_version: str, backend: str, cpu: str, os_name: str) -> list[str]:
    """The variant kinds kernels 0.18+ added, for this machine's torch, backend, CPU and OS: stable ABI
    (any torch >= X.Y), tvm-ffi, the dotted arch form, noarch per backend, and MLX on Metal."""
    major, minor = torch_version.split(".")[:2]
    mm = f"{major}.{re.match(r'[0-9]+', minor).group(0)}"  # type: ignore[union-attr]
    cuda = re.fullmatch(r"cu(\d+?)(\d)", backend)
    rocm = re.fullmatch(r"rocm(\d)(\d+)", backend)
    dotted = (
        f"cuda-{cuda.group(1)}.{cuda.group(2)}"
        if cuda
        else f"rocm-{rocm.group(1)}.{rocm.group(2)}"
        if rocm
        else backend
    )
    system = f"cpython-3.9-abi3-{cpu}-{os_name}"
    return [
        f"torch-stable-abi-{mm}-{dotted}-{system}",
        f"torch-stable-abi-{major}.{int(mm.split('.')[1]) + 1}-{dotted}-{system}",  # too new for this torch
        f"torch-{mm}-{dotted}-{system}",
        f"tvm-ffi-0.1-{dotted}-{system}",
        "torch-cpu",
        "torch-cuda",
        "torch-rocm",
        "torch-metal",
        "mlx-metal",
    ]


def variant_kinds_here() -> tuple[VariantVerdict, ...]:
    """kernels' resolver on every variant kind a repository may carry for this machine (near misses
    and the kinds of kernels 0.18+ included): accepted, or rejected with kernels' reason. kernels
    0.17 cannot read the new kinds; each such name says so."""
    import torch

    selected = selected_backend()
    cpu, os_name = system()
    names = candidate_variants(torch.__version__, selected, cpu, os_name)
    names += _new_kind_variants(torch.__version__, selected, cpu, os_name)
    return tuple(variant_verdicts(names))


def detect_hardware() -> HardwareSnapshot:
    """Take one snapshot of this machine: CPU, memory, torch build, accelerators, accepted variants."""
    import torch

    architecture = platform.machine()
    model, flags = _cpu_model_and_flags()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    cpu = CpuInfo(
        model=model,
        architecture=architecture,
        logical_cores=os.cpu_count() or 1,
        usable_cores=usable,
        isa=_isa(flags, architecture),
        torch_capability=str(torch.backends.cpu.get_cpu_capability()),
    )
    os_name = platform.system().lower()
    variants, backend = accepted_variants()
    cpu_variants, _ = accepted_variants("cpu")
    torch_mm = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    notes = []
    compatibility = check_compatibility()
    if not variants:
        notes.append("kernels accepts no build variant here: every layer will stay on PyTorch.")
    return HardwareSnapshot(
        os=os_name,
        architecture=architecture,
        cpu=cpu,
        memory_bytes=_memory_bytes(),
        python_version=platform.python_version(),
        torch_version=torch.__version__,
        torch_build=_torch_build(torch),
        cxx11_abi=bool(torch.compiled_with_cxx11_abi()) if os_name == "linux" else None,
        accelerators=_accelerators(torch),
        kernels_backend=backend,
        accepted_variants=variants,
        accepted_cpu_variants=cpu_variants,
        stable_abi_note=(
            f"torch-stable-abi builds for ABI versions up to {torch_mm} are also accepted, "
            "and preferred over the variants above"
        ),
        compatibility=compatibility,
        notes=tuple(notes),
        variant_verdicts=variant_kinds_here(),
    )
