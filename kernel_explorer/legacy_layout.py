"""Builds repositories still in this project's old layout, during their conversion to kernel-builder's.

The old layout (before issue 17): one `[kernel.<repo>]` section without cxx-flags whose sources
the builder compiled once per instruction set, and a `[torch]` unit that registers under the
`KX_OPS_NS` macro. Here such a plan is rewritten into the standard one (a section per ISA with
ATen's flags, `KX_OPS_NS` defined as kernel-builder's `TORCH_EXTENSION_NAME`), so one builder path
serves both. Remove this module once every repository in hub/ is converted (DESIGN.md, "Where to add").
"""

from __future__ import annotations

import dataclasses

from kernel_explorer.repo_format import RepoPlan, Section

# The flags ATen itself uses for each CPU_CAPABILITY, so `at::vec::Vectorized` takes the same path.
ISA_FLAGS: dict[str, tuple[str, ...]] = {
    "avx512bf16": ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma",
                   "-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512"),
    "avx512": ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma",
               "-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512"),
    "avx2": ("-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"),
    "portable": ("-DCPU_CAPABILITY=DEFAULT",),
}  # fmt: skip


def is_legacy(plan: RepoPlan) -> bool:
    """True for a repository whose binding registers under KX_OPS_NS."""
    if plan.torch is None:
        return False
    return any("KX_OPS_NS" in (plan.root / s).read_text(errors="replace") for s in plan.torch.sources)


def adapt(plan: RepoPlan, isas: tuple[str, ...]) -> RepoPlan:
    """The standard plan that builds an old-layout repository as the old builder did; others unchanged."""
    if not is_legacy(plan):
        return plan
    assert plan.torch is not None
    common = ("-ffp-contract=off",)
    have = tuple(f"-DKX_HAVE_{isa.upper()}" for isa in isas if isa != "portable")  # as the old builder
    kernels: list[Section] = []
    includes = ("csrc",)
    for section in plan.kernels:
        includes += section.include
        if section.cxx_flags:
            kernels.append(section)
            continue
        for isa in isas:
            flags = (*ISA_FLAGS[isa], f"-DKX_ISA={isa}", *common)
            kernels.append(dataclasses.replace(section, name=f"{section.name}_{isa}", cxx_flags=flags))
    torch = dataclasses.replace(
        plan.torch,
        include=(*plan.torch.include, *includes),
        cxx_flags=(*plan.torch.cxx_flags, "-DKX_OPS_NS=TORCH_EXTENSION_NAME", *common, *have),
    )
    kernels = [dataclasses.replace(k, include=(*k.include, "csrc")) for k in kernels]
    return dataclasses.replace(plan, torch=torch, kernels=tuple(kernels))
