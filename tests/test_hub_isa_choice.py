"""The bundled repositories' code path chosen by measurement (hub/common/csrc/kx_choice.h).

Each repository times the paths this CPU runs at first use, keeps the fastest, caches the choice
per machine, build and torch under the kernel-explorer cache, and says why. Fresh processes are
used where the choice is made at first use (it is made once per process).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from isa_paths import runnable_isas

from kernel_explorer.bundled import bundled_repo_path

REPOS = ["activation", "rmsnorm", "rotary", "flash_attn", "quantized_linear"]


def _in_fresh_process(repo: str, cache: Path, forced: str | None = None, code: str = "") -> list[str]:
    """isa(), then isa_reason(), of `repo` loaded in a new process with this cache root."""
    script = (
        "from pathlib import Path; from kernels import get_local_kernel\n"
        f"m = get_local_kernel(Path({str(bundled_repo_path(repo))!r}))\n"
        f"{code}\n"
        "print(m.isa()); print(m.isa_reason())"
    )
    env = {**os.environ, "KERNEL_EXPLORER_CACHE": str(cache)}
    env.pop("KERNEL_EXPLORER_ISA", None)
    if forced is not None:
        env["KERNEL_EXPLORER_ISA"] = forced
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.splitlines()


def test_every_repository_runs_a_path_this_cpu_runs_and_says_why(hub: dict) -> None:
    expected = runnable_isas()
    for name in REPOS:
        module = hub[name]
        assert module.isa_paths() == expected, name
        assert module.isa() in expected, name
        reason = module.isa_reason()
        assert reason.startswith(f"{module.isa()}: "), (name, reason)


def test_measured_choice_names_the_other_paths_and_is_cached(tmp_path: Path) -> None:
    simd = [isa for isa in runnable_isas() if isa != "portable"]
    if len(simd) < 2:
        pytest.skip("this CPU runs one SIMD path: nothing to choose between")
    isa, reason = _in_fresh_process("rmsnorm", tmp_path)
    assert isa in simd
    others = [p for p in simd if p != isa]
    for other in others:  # "1.72x [1.58, 1.83] faster than avx2" or "level with avx512 (...)"
        assert re.search(rf"(\d+\.\d\dx \[\d+\.\d\d, \d+\.\d\d\] faster than|level with) {other}\b", reason)
    assert "portable" not in reason and "interleaved rounds" in reason and "cached" not in reason
    (file,) = (tmp_path / "isa-choice").glob("rmsnorm-*.txt")
    assert file.read_text().splitlines() == [isa, reason]
    again = _in_fresh_process("rmsnorm", tmp_path)
    assert again == [isa, f"{reason}; measured once on this machine, cached in {file}"]


def test_a_cached_choice_is_obeyed_and_a_stale_one_measured_again(tmp_path: Path) -> None:
    simd = [isa for isa in runnable_isas() if isa != "portable"]
    if len(simd) < 2:
        pytest.skip("this CPU runs one SIMD path: nothing to choose between")
    _in_fresh_process("rotary", tmp_path)
    (file,) = (tmp_path / "isa-choice").glob("rotary-*.txt")
    file.write_text(f"{simd[-1]}\n{simd[-1]}: planted\n")  # what a slower machine of this key measured
    assert _in_fresh_process("rotary", tmp_path)[0] == simd[-1]
    file.write_text("avx1024\nno such path\n")
    isa, reason = _in_fresh_process("rotary", tmp_path)
    assert isa in simd and "interleaved rounds" in reason
    assert file.read_text().splitlines()[0] == isa


def test_the_cache_key_holds_the_build(tmp_path: Path) -> None:
    """A rebuilt library (here: its file's time moved) measures again instead of reading the choice
    made for the build before it."""
    (library,) = bundled_repo_path("rmsnorm").rglob("*.so")
    stat = library.stat()
    _in_fresh_process("rmsnorm", tmp_path)
    try:
        os.utime(library, (stat.st_atime, stat.st_mtime + 1000))
        _in_fresh_process("rmsnorm", tmp_path)
    finally:
        os.utime(library, (stat.st_atime, stat.st_mtime))
    assert len(list((tmp_path / "isa-choice").glob("rmsnorm-*.txt"))) == 2


def test_environment_forces_a_path_and_refuses_one_this_cpu_lacks(tmp_path: Path) -> None:
    forced = runnable_isas()[-1]
    assert _in_fresh_process("activation", tmp_path, forced) == [
        forced,
        f"{forced}: forced by KERNEL_EXPLORER_ISA",
    ]
    assert not (tmp_path / "isa-choice").exists()  # nothing measured, nothing cached
    script_env = {**os.environ, "KERNEL_EXPLORER_CACHE": str(tmp_path), "KERNEL_EXPLORER_ISA": "avx1024"}
    code = (
        "from pathlib import Path; from kernels import get_local_kernel\n"
        f"m = get_local_kernel(Path({str(bundled_repo_path('activation'))!r}))\n"
        "m.isa()"
    )
    out = subprocess.run([sys.executable, "-c", code], env=script_env, capture_output=True, text=True)
    assert out.returncode != 0
    assert (
        "KERNEL_EXPLORER_ISA=avx1024 is not a code path this CPU runs; unset it or use one of" in out.stderr
    )


def test_set_isa_switches_and_says_so(hub: dict) -> None:
    module = hub["rmsnorm"]
    before = module.isa()
    try:
        for isa in runnable_isas():
            assert module.set_isa(isa) == isa and module.isa() == isa
            assert module.isa_reason() == f"{isa}: set by set_isa()"
        with pytest.raises(
            RuntimeError, match="unknown ISA 'avx1024'; use avx512bf16, avx512, avx2 or portable"
        ):
            module.set_isa("avx1024")
    finally:
        module.set_isa(before)


def test_reset_isa_gives_back_the_measured_path_and_its_reason(tmp_path: Path) -> None:
    chosen, reason = _in_fresh_process("activation", tmp_path)
    pinned = runnable_isas()[-1]
    code = f"m.isa(); assert m.set_isa({pinned!r}) == m.isa() == {pinned!r}; print(m.reset_isa())"
    back, isa, reason_after = _in_fresh_process("activation", tmp_path, code=code)
    assert back == isa == chosen
    assert reason_after.startswith(reason)  # the same measured words, now read from the cache
    forced = _in_fresh_process("activation", tmp_path, pinned, code=f"m.set_isa({chosen!r}); m.reset_isa()")
    assert forced == [pinned, f"{pinned}: forced by KERNEL_EXPLORER_ISA"]


def test_the_measurement_leaves_torchs_threads_and_random_state_alone(tmp_path: Path) -> None:
    """It runs on one thread and on inputs of its own (no draw from torch's generator)."""
    script = (
        "import torch; from pathlib import Path; from kernels import get_local_kernel\n"
        "torch.set_num_threads(2); torch.manual_seed(0); a = torch.rand(3)\n"
        f"m = get_local_kernel(Path({str(bundled_repo_path('flash_attn'))!r}))\n"
        "torch.manual_seed(0); m.isa(); assert torch.equal(torch.rand(3), a), 'the generator moved'\n"
        "assert torch.get_num_threads() == 2, torch.get_num_threads()\nprint('ok')"
    )
    env = {**os.environ, "KERNEL_EXPLORER_CACHE": str(tmp_path)}
    env.pop("KERNEL_EXPLORER_ISA", None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
    assert list((tmp_path / "isa-choice").glob("flash_attn-*.txt"))
