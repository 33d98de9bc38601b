"""Every bundled kernel's shared object, read instruction by instruction: code of one instruction
set stays in the functions of that set's path.

Each kernel source is compiled once per path (AVX-512 with BF16, AVX-512, AVX2, portable) into one
shared object, and the linker keeps one copy of every inline function or template the units share
(std::vector's members, say). A copy compiled for AVX-512 can then be the one the AVX2 path calls:
on an AVX2-only CPU the int8 GEMM died of SIGILL in `std::vector<float>::_M_fill_assign`, which
the avx512 unit had compiled with zmm stores. A CPU with AVX-512 never shows it, so this reads the
objects: a function that is not one path's own (its name carries no ISA) may use no AVX register,
and BF16 instructions appear only in the avx512bf16 path's functions.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

FUNCTION = re.compile(r"^[0-9a-f]+ <(.*)>:$")
AVX512_REGISTER = re.compile(r"%zmm\d|%k[1-7]\b")
AVX_REGISTER = re.compile(r"%ymm\d")
BF16_INSTRUCTION = re.compile(r"\s(vcvtne2ps2bf16|vcvtneps2bf16|vdpbf16ps)\s")


def shared_objects() -> list[Path]:
    from kernel_explorer.build.bundled import BUNDLED_REPOS, bundled_repo_path

    found = []
    for name in BUNDLED_REPOS:
        found += sorted((bundled_repo_path(name) / "build").glob("*/*.so"))
    return found


def misplaced(so: Path) -> list[str]:
    """'function: instruction' for each instruction outside the functions its ISA may run in."""
    listing = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", "-C", str(so)], capture_output=True, text=True, check=True
    ).stdout
    found, name = [], ""
    for line in listing.splitlines():
        head = FUNCTION.match(line)
        if head:
            name = head.group(1)
            continue
        lowered = name.lower()
        outside = (
            (AVX512_REGISTER.search(line) and "avx512" not in lowered)
            or (AVX_REGISTER.search(line) and not ("avx2" in lowered or "avx512" in lowered))
            or (BF16_INSTRUCTION.search(line) and "avx512bf16" not in lowered)
        )
        if outside:
            found.append(f"{name}: {line.strip()}")
    return found


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs binutils' objdump (it comes with gcc)")
def test_no_shared_function_carries_one_paths_instructions(hub: dict) -> None:
    objects = shared_objects()
    assert len(objects) >= 5, objects  # every bundled repository built here
    for so in objects:
        wrong = misplaced(so)
        assert not wrong, f"{so.name}: {len(wrong)} instructions outside their path, first: {wrong[:5]}"
