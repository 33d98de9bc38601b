"""Kernels written to misbehave, each in one way a trial must see (issue 46, items 2, 3 and 6).

Each is a real repository (tests/kernel_repos.py's layout) loaded by `kernels` through a mapping,
offered as the only candidate for a tiny Llama's RMSNorm or SiLU. For each, the test asserts
the row's words, that the default choice passes over it, that the model's logits and the session's
state (torch's threads, default dtype, RNG, grad mode, ...) are as before every explorer call, and
that `off()` gives the model's logits back bitwise. A misbehaving kernel named by the user switches
on with a warning; `strict=True` refuses it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from kernel_repos import write_repo
from kernels import LocalLayerRepository
from torch import nn

from kernel_explorer.catalog.availability import State
from kernel_explorer.errors import KernelSwitchError
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama
from kernel_explorer.switching.trial_checks import session_state, state_changes
from kernel_explorer.switching.trial_inputs import PAST_BLOCKS, longer_tokens

PAST = 64  # "wrong past a length": right up to this many tokens, beyond the capture's 24

HOSTILE = f"""
import torch
from torch import nn

KEPT = []


def _rms(module, hidden_states):
    x = hidden_states.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)
    return module.weight * x.to(hidden_states.dtype)


class ThreadsRMSNorm(nn.Module):
    def forward(self, hidden_states):
        torch.set_num_threads(1)
        return _rms(self, hidden_states)


class DefaultDtypeRMSNorm(nn.Module):
    def forward(self, hidden_states):
        torch.set_default_dtype(torch.float64)
        return _rms(self, hidden_states)


class SeedingRMSNorm(nn.Module):
    def forward(self, hidden_states):
        torch.manual_seed(0)
        return _rms(self, hidden_states)


class MutatingRMSNorm(nn.Module):
    '''Right output; then it halves its input in place (the residual stream, in a Llama).'''

    def forward(self, hidden_states):
        out = _rms(self, hidden_states)
        hidden_states.mul_(0.5)
        return out


class Bfloat16OutRMSNorm(nn.Module):
    def forward(self, hidden_states):
        return _rms(self, hidden_states).to(torch.bfloat16)


class LeakingRMSNorm(nn.Module):
    '''Keeps every input it sees.'''

    def forward(self, hidden_states):
        KEPT.append(hidden_states)
        return _rms(self, hidden_states)


class WrongPastLengthRMSNorm(nn.Module):
    '''Right for the first {PAST} tokens; past them the tokens go unnormalized.'''

    def forward(self, hidden_states):
        out = _rms(self, hidden_states)
        if hidden_states.shape[-2] > {PAST}:
            out = out.clone()
            out[..., {PAST}:, :] = self.weight * hidden_states[..., {PAST}:, :]
        return out


class WrongInBfloat16RMSNorm(nn.Module):
    '''Right in float32; in bfloat16 it divides by the mean absolute value.'''

    def forward(self, hidden_states):
        if hidden_states.dtype != torch.bfloat16:
            return _rms(self, hidden_states)
        x = hidden_states.to(torch.float32)
        x = x / (x.abs().mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(hidden_states.dtype)


class SlopeSiLU(nn.Module):
    '''x * sigmoid(1.05 x): within the per-call bound, yet it moves the model's answers.'''

    def forward(self, x):
        return x * torch.sigmoid(1.05 * x)
"""

TOKENS = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79, 23, 84, 62, 64, 33, 83, 27, 95] * 6])


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repo(tmp_path_factory.mktemp("hostile"), "kx-hostile", layers=HOSTILE)


def logits(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(TOKENS).logits


def made(repo: Path, layer: str, cls: str, model: nn.Module | None = None, **kwargs) -> Explorer:
    """An explorer whose only candidate for `layer` is `cls` (no bundled kernels: quicker trials)."""
    mapping = {layer: {"cpu": LocalLayerRepository(repo_path=repo, layer_name=cls)}}
    model = model if model is not None else tiny_llama()
    return Explorer(model, mapping, include_transformers=False, include_bundled=False, **kwargs)


def found(explorer: Explorer, layer: str, cls: str) -> tuple[State, str]:
    for candidate, availability in explorer.inventory().row(layer).candidates:
        if cls in candidate.label:
            return availability.state, availability.reason
    raise AssertionError(f"no candidate {cls} in {layer}")


def same_state(before: object) -> None:
    assert state_changes(before, session_state()) == []  # type: ignore[arg-type]


CASES = [
    ("RMSNorm", "ThreadsRMSNorm", State.SIDE_EFFECTS, "sets torch's thread count to 1"),
    ("RMSNorm", "DefaultDtypeRMSNorm", State.SIDE_EFFECTS, "sets torch's default dtype to float64"),
    ("RMSNorm", "SeedingRMSNorm", State.SIDE_EFFECTS, "changes torch's random number state"),
    ("RMSNorm", "MutatingRMSNorm", State.SIDE_EFFECTS, "changes its input in place"),
    ("RMSNorm", "Bfloat16OutRMSNorm", State.CANNOT_RUN, "returns bfloat16 for float32 input"),
    ("RMSNorm", "LeakingRMSNorm", State.SIDE_EFFECTS, "more after every call"),
    (
        "RMSNorm",
        "WrongPastLengthRMSNorm",
        State.WRONG_RESULTS,
        f"{longer_tokens(24, tiny_llama())}, 64) float32",
    ),
]


@pytest.mark.parametrize(("layer", "cls", "state", "words"), CASES, ids=[c[1] for c in CASES])
def test_a_hostile_kernel_is_seen_passed_over_and_leaves_nothing(
    hub: dict, repo: Path, layer: str, cls: str, state: State, words: str
) -> None:
    if torch.get_num_threads() == 1:  # the thread count's change must be one
        torch.set_num_threads(2)
    model = tiny_llama()
    before_logits = logits(model)
    before = session_state()
    explorer = made(repo, layer, cls, model)
    got, reason = found(explorer, layer, cls)
    same_state(before)
    assert got is state, reason
    assert words in reason and "\n" not in reason

    running = explorer.on(layer)  # the default choice passes over it: PyTorch, and why
    same_state(before)
    assert running and all(not now.is_kernel and state.value in now.reason for now in running)
    explorer.off(layer)
    assert torch.equal(logits(model), before_logits)

    if state is State.CANNOT_RUN:  # named: PyTorch stays, with the reason
        running = explorer.on(layer, candidate=f"user/kx-hostile:{cls}")
        assert all(not now.is_kernel and words in now.reason for now in running)
    else:
        with pytest.warns(UserWarning, match=state.value):  # named: on, and said
            running = explorer.on(layer, candidate=f"user/kx-hostile:{cls}")
        assert all(now.is_kernel and cls in now.candidate for now in running)
        assert explorer.inventory().row(layer).warning.startswith(state.value)
    explorer.off(layer)
    torch.set_num_threads(before.threads)  # the named kernel ran in the user's session, as asked
    torch.set_default_dtype(before.default_dtype)
    assert torch.equal(logits(model), before_logits)

    strict = made(repo, layer, cls, tiny_llama(), strict=True)
    with pytest.raises(KernelSwitchError, match=state.value):
        strict.on(layer, candidate=f"user/kx-hostile:{cls}")
    torch.set_num_threads(before.threads)
    torch.set_default_dtype(before.default_dtype)


def test_the_longer_trial_is_past_every_bundled_block_and_four_captures() -> None:
    assert longer_tokens(24) >= max(4 * 24, PAST_BLOCKS + 1) and longer_tokens(100) == 400
    assert longer_tokens(24, tiny_llama()) == 256  # within the model's max_position_embeddings


def test_a_kernel_wrong_in_bfloat16_is_tried_again_when_the_model_is_converted(hub: dict, repo: Path) -> None:
    model = tiny_llama()
    explorer = made(repo, "RMSNorm", "WrongInBfloat16RMSNorm", model)
    assert found(explorer, "RMSNorm", "WrongInBfloat16RMSNorm")[0] is State.READY  # float32: right
    model.to(torch.bfloat16)  # every verdict of float32 is stale: captured and tried again
    got, reason = found(explorer, "RMSNorm", "WrongInBfloat16RMSNorm")
    assert got is State.WRONG_RESULTS and "bfloat16" in reason
    again = made(repo, "RMSNorm", "WrongInBfloat16RMSNorm", model)  # a new explorer inherits bf16's
    assert found(again, "RMSNorm", "WrongInBfloat16RMSNorm")[0] is State.WRONG_RESULTS


def test_off_after_the_model_is_converted_leaves_a_model_in_its_new_dtype(hub: dict) -> None:
    model = tiny_llama()
    explorer = Explorer(model, include_transformers=False)
    explorer.on("RMSNorm")
    model.to(torch.bfloat16)
    explorer.off("RMSNorm")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    plain = tiny_llama().to(torch.bfloat16)
    assert torch.equal(logits(model), logits(plain))  # runs, and as a model converted without kernels


def test_no_explorer_call_changes_the_session(hub: dict) -> None:
    model = tiny_llama()
    before = session_state()
    explorer = Explorer(model, include_transformers=False)
    explorer.inventory()
    same_state(before)
    explorer.on("RMSNorm")
    same_state(before)
    explorer.compare("RMSNorm", pairs=6)
    same_state(before)
    handle = explorer.run_live(budget_s=2)
    handle.wait(timeout=2)
    handle.cancel()
    handle.wait(timeout=30)
    same_state(before)
    explorer.off("RMSNorm")
    explorer.reset()
    same_state(before)


def test_a_kernel_within_the_per_call_bound_that_moves_the_answers_is_not_chosen(repo: Path) -> None:
    """x*sigmoid(1.05x): each call within the bound, the model's answers moved more than in bfloat16.
    On the default model (trained weights: a random tiny Llama's activations are too small to show it)."""
    from kernel_explorer.loading import load_default_model

    model, tokenizer = load_default_model(progress=False)
    before_logits, before = logits(model), session_state()
    mapping = {"SiLU": {"cpu": LocalLayerRepository(repo_path=repo, layer_name="SlopeSiLU")}}
    explorer = Explorer(
        model, mapping, tokenizer=tokenizer, include_transformers=False, include_bundled=False
    )
    got, reason = found(explorer, "SiLU", "SlopeSiLU")
    same_state(before)
    assert got is State.WRONG_RESULTS and reason.startswith("changes the model's answers (top-1"), reason
    assert "where the model in bfloat16 drifts" in reason and "\n" not in reason
    running = explorer.on("SiLU")
    assert all(not now.is_kernel for now in running)
    with pytest.warns(UserWarning, match="changes the model's answers"):
        explorer.on("SiLU", candidate="user/kx-hostile:SlopeSiLU")
    assert not torch.equal(logits(model), before_logits)
    explorer.off("SiLU")
    assert torch.equal(logits(model), before_logits)
    same_state(before)
