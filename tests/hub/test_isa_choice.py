"""The bundled repositories' code paths chosen by measurement (hub/common/csrc/kx_choice.h).

Each op at each dtype times the paths this CPU runs (and its forms, where it has several) at its
first use, keeps the fastest, caches the choice per machine, build and torch under the
kernel-explorer cache, and says why; quantized_linear keeps one choice for all its ops. Fresh
processes are used where the choice is made at first use (it is made once per process).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from isa_paths import runnable_isas

from kernel_explorer.build.bundled import bundled_repo_path

REPOS = ["activation", "rmsnorm", "rotary", "flash_attn", "quantized_linear"]


def _in_fresh_process(
    repo: str, cache: Path, forced: str | None = None, code: str = "", choices: bool = False
) -> list[str]:
    """isa(), then isa_reason() (then isa_choices()' lines), of `repo` loaded in a new process
    with this cache root."""
    script = (
        "from pathlib import Path; from kernels import get_local_kernel\n"
        f"m = get_local_kernel(Path({str(bundled_repo_path(repo))!r}))\n"
        f"{code}\n"
        "print(m.isa()); print(m.isa_reason())\n" + ("print(*m.isa_choices(), sep='\\n')" if choices else "")
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


def _simd() -> list[str]:
    simd = [isa for isa in runnable_isas() if isa != "portable"]
    if len(simd) < 2:
        pytest.skip("this CPU runs one SIMD path: nothing to choose between")
    return simd


RMSNORM_OPS = ["rms_norm float32", "rms_norm bfloat16", "rms_norm float16"]


def test_measured_choice_names_the_other_paths_and_is_cached_per_op(tmp_path: Path) -> None:
    simd = _simd()
    isa, reason, *choices = _in_fresh_process("rmsnorm", tmp_path, choices=True)
    assert isa in simd
    # "avx512bf16: 2 of 3 ops run it (rms_norm float32: 1.72x [1.58, 1.83] faster than avx2, ...)"
    assert re.match(rf"{isa}: [123] of 3 ops run it \(rms_norm (float32|bfloat16|float16): ", reason)
    for other in (
        p for p in simd if p != isa
    ):  # "1.72x [1.58, 1.83] faster than avx2" or "level with avx512 (...)"
        assert re.search(rf"(\d+\.\d\dx \[\d+\.\d\d, \d+\.\d\d\] faster than|level with) {other}\b", reason)
    assert "portable" not in reason and "interleaved rounds" in reason and "cached" not in reason
    # one line per op, each its own measurement
    assert [line.split(": ")[0] for line in choices] == RMSNORM_OPS
    for op, line in zip(RMSNORM_OPS, choices, strict=True):
        assert re.match(rf"{op}: ({'|'.join(simd)}): .*interleaved rounds of {op}'s workload", line), line
    (file,) = (tmp_path / "isa-choice").glob("rmsnorm-*.txt")
    rows = [line.split("\t") for line in file.read_text().splitlines()]
    assert sorted(row[0] for row in rows) == sorted(RMSNORM_OPS)
    assert {row[0]: row[1] for row in rows} == {line.split(": ")[0]: line.split(": ")[1] for line in choices}
    again = _in_fresh_process("rmsnorm", tmp_path)
    assert again == [isa, f"{reason}; measured once on this machine, cached in {file}"]


def _plant(file: Path, op: str, path: str, comparisons: str = "planted", forms: str = "0,0,0,0") -> None:
    """Replaces op's line in a cache file (what a machine of this key measured): the candidate it
    runs, the faster form on each path (avx512bf16, avx512, avx2, portable), the comparisons."""
    rows = [line.split("\t") for line in file.read_text().splitlines()]
    rows = [row for row in rows if row[0] != op] + [[op, path, forms, comparisons, "here (planted)"]]
    file.write_text("".join("\t".join(row) + "\n" for row in rows))


def test_a_cached_choice_is_obeyed_and_a_stale_one_measured_again(tmp_path: Path) -> None:
    simd = _simd()
    _in_fresh_process("rotary", tmp_path)
    (file,) = (tmp_path / "isa-choice").glob("rotary-*.txt")
    _plant(file, "rotary bfloat16", simd[-1])
    choices = _in_fresh_process("rotary", tmp_path, choices=True)[2:]
    assert f"rotary bfloat16: {simd[-1]}: planted here (planted); measured once on this machine" in "\n".join(
        choices
    )
    _plant(file, "rotary bfloat16", "avx1024", "no such path")
    choices = _in_fresh_process("rotary", tmp_path, choices=True)[2:]
    (line,) = (c for c in choices if c.startswith("rotary bfloat16: "))
    assert "interleaved rounds of rotary bfloat16's workload" in line and "cached" not in line
    rows = {row.split("\t")[0]: row.split("\t")[1] for row in file.read_text().splitlines()}
    assert rows["rotary bfloat16"] in simd and len(rows) == 3


def test_two_ops_of_one_repository_run_different_paths_and_the_reason_says_so(tmp_path: Path) -> None:
    simd = _simd()
    _in_fresh_process("activation", tmp_path)
    (file,) = (tmp_path / "isa-choice").glob("activation-*.txt")
    majority, other = simd[0], simd[1]
    for row in file.read_text().splitlines():  # every op on one path but two
        op, path = row.split("\t")[:2]
        _plant(file, op, " ".join([majority, *path.split()[1:]]), "planted")
    faster = f"1.04x [1.01, 1.06] faster than {majority}"
    _plant(file, "gelu float32", other, f"{faster} | level with x (1.00x [0.9, 1.1])")
    _plant(file, "silu bfloat16", f"{other} formula", f"1.50x [1.40, 1.60] faster than {majority} lookup")
    _plant(file, "gelu bfloat16", f"{majority} formula", "planted", forms="1,1,1,1")
    isa, reason, *choices = _in_fresh_process("activation", tmp_path, choices=True)
    assert isa == majority
    assert f"; gelu float32 runs {other} (1.04x [1.01, 1.06] faster than {majority})" in reason
    assert (
        f"; silu bfloat16 runs {other} formula (1.50x [1.40, 1.60] faster than {majority} lookup)" in reason
    )
    assert f"gelu float32: {other}: 1.04x" in "\n".join(choices)
    assert f"silu bfloat16: {other} formula: 1.50x" in "\n".join(choices)
    # set_isa pins every op, and reset_isa gives each its own path back
    code = f"m.set_isa({majority!r}); print(*m.isa_choices(), sep='|'); m.reset_isa()"
    pinned, isa_after, reason_after, *_ = _in_fresh_process("activation", tmp_path, code=code, choices=True)
    assert all(line.split(": ")[1].split()[0] == majority for line in pinned.split("|"))
    # a pinned path keeps each op's faster form there where measured: lookup for silu (planted 0),
    # the formula for gelu (planted 1 on every path)
    assert f"silu bfloat16: {majority} lookup ({majority}: set by set_isa())" in pinned.split("|")
    assert f"gelu bfloat16: {majority} formula ({majority}: set by set_isa())" in pinned.split("|")
    assert (isa_after, reason_after) == (isa, reason)


def test_formula_and_lookup_forms_give_the_same_bits(hub: dict) -> None:
    """A 16-bit activation's table holds its formula's outputs, so choosing the faster form never
    changes a result: every input bit pattern, every path, both forms."""
    act = hub["activation"]
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    try:
        for dtype in (torch.bfloat16, torch.float16):
            x = bits.view(dtype).reshape(256, 256)
            for path in runnable_isas():
                for name in ("silu", "gelu", "gelu_tanh", "gelu_new", "gelu_fast", "gelu_quick"):
                    act.set_isa(f"{path} lookup")
                    looked_up = getattr(act, name)(x)
                    act.set_isa(f"{path} formula")
                    computed = getattr(act, name)(x)
                    assert torch.equal(looked_up.view(torch.int16), computed.view(torch.int16)), (
                        dtype,
                        path,
                        name,
                    )
        with pytest.raises(RuntimeError, match="no op of rmsnorm has a form 'formula'"):
            hub["rmsnorm"].set_isa(f"{runnable_isas()[0]} formula")
    finally:
        act.reset_isa()


def test_the_cache_key_holds_the_build(tmp_path: Path) -> None:
    """A rebuilt library (here: its file's time moved) measures again instead of reading the choice
    made for the build before it."""
    _simd()  # one SIMD path: nothing is measured, so nothing is cached
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
        module.reset_isa()
    assert module.isa() == before


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
    _simd()  # one SIMD path: there is no measurement to check
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


def test_a_large_input_has_its_own_form_where_the_forms_ran_close(tmp_path: Path) -> None:
    """A 16-bit activation from 4 M elements (its output streams past the cache) measures its own
    form only where its op's two forms ran close (the order flipped there for GELU-tanh)."""
    simd = _simd()
    _in_fresh_process("activation", tmp_path)
    (file,) = (tmp_path / "isa-choice").glob("activation-*.txt")
    _plant(file, "silu bfloat16", f"{simd[0]} formula", "planted", forms="1,1,1,1,1.50")
    _plant(file, "gelu bfloat16", f"{simd[0]} lookup", "planted", forms="0,0,0,0,1.05")
    rows = [line for line in file.read_text().splitlines() if not line.startswith("gelu bfloat16 large\t")]
    file.write_text("".join(row + "\n" for row in rows))
    choices = _in_fresh_process("activation", tmp_path, choices=True)[2:]
    assert f"silu bfloat16 large: {simd[0]} formula: as silu bfloat16 (its other form 1.50x slower there" in (
        "\n".join(choices)
    )
    (gelu,) = (line for line in choices if line.startswith("gelu bfloat16 large: "))
    measured = rf"gelu bfloat16 large: {simd[0]} (lookup|formula): .*rounds of gelu bfloat16 large's"
    assert re.match(measured, gelu)
