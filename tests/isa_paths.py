"""The compiled code paths of the bundled kernels that this CPU runs (shared by conftest's `isa`
fixture and the tests that check the default choice; a module of its own, because `conftest` is
ambiguous to import with tests/browser/conftest.py beside it)."""

from __future__ import annotations

_ISA_NEEDS = {"avx512bf16": "AVX-512-BF16", "avx512": "AVX-512F", "avx2": "AVX2"}


def runnable_isas() -> list[str]:
    """The bundled kernels' compiled code paths that this CPU can run, best first."""
    from kernel_explorer.build.builder import isas_for_this_machine
    from kernel_explorer.inspect.hardware import detect_hardware

    isa_flags = detect_hardware().cpu.isa
    return [isa for isa in isas_for_this_machine() if _ISA_NEEDS.get(isa, "") in (*isa_flags, "")]
