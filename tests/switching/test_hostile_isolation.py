"""Kernels written to misbehave, through every door a stranger's kernel comes in (issue 46).

Each is a real repository written here (tests/kernel_repos.py) whose code crashes (a null read,
an abort), hangs, runs 100 times slower, raises at import or raises on its Nth call. The trial of
such a candidate runs in the worker process (switching/isolation.py): the test process, which is
the notebook's here, must come through each one alive, with the row's words, the default choice
passing the candidate over, the model's logits those of PyTorch, and `off()` leaving the model's
tensors exactly as they were. A short trial limit keeps the hang's test short.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from attention_repos import FLASH_ATTN, write_attention_repo
from kernel_repos import write_repo
from kernels import LocalLayerRepository
from test_hub_like import state_of

from kernel_explorer import Explorer
from kernel_explorer.catalog.availability import State
from kernel_explorer.inspect.layer_groups import ATTENTION
from kernel_explorer.loading import tiny_llama
from kernel_explorer.switching import isolation

TIMEOUT = 3.0
TOKENS = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79]])

CRASH = "ctypes.string_at(0)  # a null read: SIGSEGV"
ABORT = "os.abort()"
HANG = "time.sleep(10**6)"
SLOW = "for _ in range(100):\n    hidden_states.float().pow(2).mean(-1).rsqrt()"  # 100x PyTorch's work
# its calls are counted from when the test arms it (the trials' own calls vary with what they check)
RAISE_THIRD = (
    'if os.environ.get("KX_HOSTILE_ARMED"):\n'
    "    ARMED[0] += 1\n"
    "    if ARMED[0] >= 3:\n"
    '        raise RuntimeError("injected: raises on its 3rd call")'
)
CRASHING_ATTEND = "def _attend(q, k, v, softmax_scale, causal):\n    import ctypes; ctypes.string_at(0)"
AT_IMPORT = 'raise RuntimeError("injected: this kernel fails at import")'


def rmsnorm(body: str = "", at_import: str = "") -> str:
    """A correct RMSNorm layer whose forward first runs `body`, and whose module runs `at_import`."""
    return f"""
import ctypes
import os
import time

import torch
from torch import nn

{at_import}
CALLS = [0]
ARMED = [0]


class RMSNorm(nn.Module):
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        CALLS[0] += 1
{textwrap.indent(body or "pass", " " * 8)}
        x = hidden_states.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(hidden_states.dtype)
"""


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(TOKENS).logits


def explorer_with(tmp_path: Path, name: str, source: str, door: str) -> tuple[Explorer, torch.nn.Module]:
    """An explorer of a fresh tiny model whose only RMSNorm candidate is `source`, as a peer or
    through the user's mapping (no bundled kernel: the default choice has nothing else to take)."""
    repo = write_repo(tmp_path, name, layers=source)
    model = tiny_llama(seed=3)
    mapping = {"RMSNorm": {"cpu": LocalLayerRepository(repo_path=repo, layer_name="RMSNorm")}}
    explorer = Explorer(
        model,
        mapping if door == "mapping" else None,
        peers=[repo] if door == "peer" else (),
        include_bundled=False,
        include_transformers=False,
        include_registered=False,
        trial_timeout=TIMEOUT,
    )
    explorer.capture({"input_ids": TOKENS})
    return explorer, model


def assert_refused(explorer: Explorer, model: torch.nn.Module, words: str, layer: str = "RMSNorm") -> None:
    """The row says `words`, the default choice passes the candidate over, the model computes
    PyTorch's logits, and off() leaves its tensors as they were."""
    reference, before = logits(model), state_of(model)
    row = explorer.inventory().row(layer)
    stranger = [
        (c, a) for c, a in row.candidates if not getattr(c, "pytorch", False) and c.source != "bundled"
    ]
    assert stranger, row.candidates
    assert all(a.state is State.CANNOT_RUN and words in a.reason for _, a in stranger), stranger
    best = row.best
    assert best is None or not best[1].state.usable or best[0] not in [c for c, _ in stranger]
    explorer.on(layer)  # the default choice: nothing usable, so PyTorch with the reason
    assert not any(now.is_kernel for now in explorer.running(layer))
    assert torch.equal(logits(model), reference)
    explorer.off(layer)
    assert state_of(model) == before and torch.equal(logits(model), reference)


@pytest.mark.parametrize(
    ("body", "words"),
    [(CRASH, "crashed its trial (SIGSEGV)"), (ABORT, "crashed its trial (SIGABRT)")],
    ids=["null-read", "abort"],
)
@pytest.mark.parametrize("door", ["peer", "mapping"])
def test_a_kernel_that_crashes_is_a_reason_not_the_end_of_the_notebook(
    tmp_path: Path, body: str, words: str, door: str
) -> None:
    explorer, model = explorer_with(tmp_path, f"kx-{door}-crash", rmsnorm(body), door)
    assert_refused(explorer, model, words)
    assert isolation.worker_pid() is None  # it took the worker down; the next trial starts another


def test_a_kernel_that_hangs_reads_did_not_answer_and_the_worker_is_killed(tmp_path: Path) -> None:
    explorer, model = explorer_with(tmp_path, "kx-hang", rmsnorm(HANG), "mapping")
    assert_refused(explorer, model, f"did not answer in {TIMEOUT:g} s")
    assert isolation.worker_pid() is None


@pytest.mark.parametrize("door", ["peer", "mapping"])
def test_a_kernel_that_raises_at_import_leaves_the_explorer_working(tmp_path: Path, door: str) -> None:
    """A peer whose Python raises anything at import (not only ImportError) still lists its class;
    the trial says why it cannot run, in one line, and no traceback reaches the caller."""
    explorer, model = explorer_with(tmp_path, f"kx-{door}-import", rmsnorm(at_import=AT_IMPORT), door)
    assert [c.source for c in explorer.candidates("RMSNorm")] == ["peer" if door == "peer" else "user"]
    assert_refused(explorer, model, "RuntimeError: injected: this kernel fails at import")


def test_an_attention_repository_that_crashes_or_raises_at_import_is_a_reason(tmp_path: Path) -> None:
    crashing = FLASH_ATTN.replace("def _attend(q, k, v, softmax_scale, causal):\n", f"{CRASHING_ATTEND}\n")
    assert crashing != FLASH_ATTN
    crash = write_attention_repo(tmp_path, "attention-crash", source=crashing)
    raising = write_attention_repo(tmp_path, "attention-import", source=f"{AT_IMPORT}\n{FLASH_ATTN}")
    model = tiny_llama(seed=3)
    explorer = Explorer(
        model, include_bundled=False, include_transformers=False, trial_timeout=TIMEOUT, attention=[crash]
    )
    explorer.capture({"input_ids": TOKENS})
    reference, before, implementation = logits(model), state_of(model), model.config._attn_implementation
    row = explorer.inventory().row(ATTENTION)
    found = {c.label: a for c, a in row.candidates}
    assert found["user/attention-crash"].state is State.CANNOT_RUN
    assert "crashed its trial (SIGSEGV)" in found["user/attention-crash"].reason
    explorer.attention_candidates(raising)
    found = {c.label: a for c, a in explorer.inventory().row(ATTENTION).candidates}
    assert "RuntimeError: injected: this kernel fails at import" in found["user/attention-import"].reason
    explorer.on(ATTENTION)  # the default choice: neither (the bundled kernel, ours)
    (now,) = {now.candidate for now in explorer.running(ATTENTION)}
    assert now not in ("user/attention-crash", "user/attention-import")
    explorer.off(ATTENTION)
    assert model.config._attn_implementation == implementation
    assert state_of(model) == before and torch.equal(logits(model), reference)


def test_an_extended_class_candidate_that_crashes_is_a_reason(tmp_path: Path) -> None:
    embedding = f"""
import ctypes
import torch
from torch import nn


class Embedding(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        {CRASH}
        return nn.functional.embedding(input, self.weight, self.padding_idx)
"""
    repo = write_repo(tmp_path, "kx-embedding-crash", layers=embedding)
    model = tiny_llama(seed=3)
    explorer = Explorer(model, include_bundled=False, include_transformers=False, trial_timeout=TIMEOUT)
    explorer.extend(
        "Embedding",
        torch.nn.Embedding,
        candidates={"cpu": LocalLayerRepository(repo_path=repo, layer_name="Embedding")},
    )
    explorer.capture({"input_ids": TOKENS})
    assert_refused(explorer, model, "crashed its trial (SIGSEGV)", layer="Embedding")


def test_a_kernel_raising_on_its_third_call_falls_back_and_is_not_chosen_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It passes its trials (in the worker, then here), then raises on its third call of the model's
    own forwards: that call is answered by PyTorch, the row says why, and the default choice does
    not take it again."""
    explorer, model = explorer_with(tmp_path, "kx-third-call", rmsnorm(RAISE_THIRD), "mapping")
    reference, before = logits(model), state_of(model)
    explorer.on("RMSNorm")
    monkeypatch.setenv("KX_HOSTILE_ARMED", "1")
    assert all(now.is_kernel for now in explorer.running("RMSNorm"))
    assert torch.allclose(logits(model), reference, atol=1e-5)  # it raised inside: PyTorch answered
    reasons = {now.reason for now in explorer.running("RMSNorm")}
    assert reasons == {"user/kx-third-call raised when run: RuntimeError: injected: raises on its 3rd call"}
    (_, availability), *_ = explorer.inventory().row("RMSNorm").candidates
    assert availability.state is State.FAILED and "3rd call" in availability.reason
    explorer.on("RMSNorm")  # the default choice passes it over now
    assert not any(now.is_kernel for now in explorer.running("RMSNorm"))
    explorer.off("RMSNorm")
    assert state_of(model) == before and torch.equal(logits(model), reference)


def test_a_kernel_a_hundred_times_slower_is_tried_and_measured_slower(tmp_path: Path) -> None:
    """Slow is not broken: its trial passes within the limit, it runs, and compare calls it slower
    (its own long calls are not the machine's stalls)."""
    explorer, model = explorer_with(tmp_path, "kx-slow", rmsnorm(SLOW), "mapping")
    reference, before = logits(model), state_of(model)
    row = explorer.inventory().row("RMSNorm")
    assert row.best is not None and row.best[1].state.usable
    handle = explorer.compare("RMSNorm", pairs=12, calibration_pairs=4)
    verdict = explorer.results.layer_summary()
    (summary,) = verdict[verdict.run_id == handle.run_id].to_dict("records")
    assert summary["verdict"] == "slower", summary
    assert summary["speedup"] < 0.2 and summary["stalled"] < summary["pairs"] / 2, summary
    assert not any(now.is_kernel for now in explorer.running())
    assert state_of(model) == before and torch.equal(logits(model), reference)


def test_extend_with_a_candidate_that_crashes_at_import_is_refused_in_one_line(tmp_path: Path) -> None:
    """`extend` checks a local candidate fits the class before anything switches; its Python is
    imported for that in the worker, so a crash at import is one line, and nothing changed."""
    from kernel_explorer.errors import KernelExplorerError

    source = f"import ctypes\n{CRASH}\n\nfrom torch import nn\n\n\nclass Embedding(nn.Embedding):\n    pass\n"
    repo = write_repo(tmp_path, "kx-embedding-import-crash", layers=source)
    model = tiny_llama(seed=3)
    explorer = Explorer(model, include_bundled=False, include_transformers=False, trial_timeout=TIMEOUT)
    with pytest.raises(KernelExplorerError, match=r"crashed its trial \(SIGSEGV\)") as info:
        explorer.extend(
            "Embedding",
            torch.nn.Embedding,
            candidates={"cpu": LocalLayerRepository(repo_path=repo, layer_name="Embedding")},
        )
    assert "\n" not in str(info.value) and "Embedding" not in explorer.layers
