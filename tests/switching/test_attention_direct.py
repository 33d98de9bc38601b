"""The attention door's direct path: a local repository offering `attention_forward` (Transformers'
attention-interface signature) is registered as it is, with SDPA's mask, under a name without
"flash", so the model calls the kernel without Transformers' flash glue; a repository offering only
flash-attn functions, or a model passing sinks, still goes through the glue. Every guarantee of the
door holds on the direct path: exact restore, the fallback when the kernel raises, the value probe,
per-model switching, and the row saying which path runs.

Real parts only: the bundled kernel built by the session's hub fixture, repositories written by the
tests and loaded by `kernels`, the tiny Llama and DeepSeek-V4 models of Transformers.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from attention_repos import FLASH_ATTN, write_attention_repo

from kernel_explorer._backend.attention_interface import is_direct
from kernel_explorer.errors import KernelSwitchError
from kernel_explorer.explorer import Explorer
from kernel_explorer.inspect.layer_groups import ATTENTION
from kernel_explorer.loading import tiny_llama

TOKENS = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79, 23, 84, 62, 64]])
DIRECT = "direct (attention_forward, no flash glue)"
GLUE = "Transformers' flash glue (flash_attention_forward)"

# flash-attn's functions (attention_repos.FLASH_ATTN) plus Transformers' attention-interface one,
# counted; `{fault}` is one statement run first (a wrong or raising kernel)
WITH_ATTENTION_FORWARD = (
    FLASH_ATTN
    + """
CALLS["attention_forward"] = 0


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    CALLS["attention_forward"] += 1
    {fault}
    if attention_mask is not None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # (batch, seqlen, heads, head_dim)
    causal = q.shape[1] > 1
    out = torch.stack([_attend(q[b], k[b], v[b], scaling, causal) for b in range(q.shape[0])])
    if {wrong}:
        out = out.clone()
        out[:, 8:] = out[:, 8:].flip(1)  # past 8 tokens, the rows of other queries
    return out, None
"""
)


def _repo(root: Path, name: str, fault: str = "pass", wrong: str = "False") -> Path:
    source = WITH_ATTENTION_FORWARD.replace("{fault}", fault).replace("{wrong}", wrong)
    return write_attention_repo(root, name, source=source)


def logits(model: torch.nn.Module, tokens: torch.Tensor = TOKENS) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens).logits


def calls_of(function: Callable, run: Callable[[], object]) -> int:
    """How many times the Python function `function` ran during `run()` (sys.setprofile)."""
    code, count = function.__code__, [0]

    def profile(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call" and frame.f_code is code:
            count[0] += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count[0]


def registries() -> tuple[dict, dict]:
    """Transformers' attention and mask registries as they stand (name -> function)."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return (
        {k: ALL_ATTENTION_FUNCTIONS[k] for k in ALL_ATTENTION_FUNCTIONS.valid_keys()},
        {k: ALL_MASK_ATTENTION_FUNCTIONS[k] for k in ALL_MASK_ATTENTION_FUNCTIONS.valid_keys()},
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_the_bundled_kernel_runs_its_attention_forward_without_the_glue_and_off_is_exact(
    hub: dict, dtype: torch.dtype
) -> None:
    from transformers.integrations.flash_attention import flash_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    fa = hub["flash_attn"]
    model = tiny_llama().to(dtype)
    reference = tiny_llama().to(torch.float64)  # the same weights (seeded), for the error of each side
    exact = logits(reference)
    before = logits(model)
    attention, masks = registries()
    explorer = Explorer(model, include_transformers=False)
    running = explorer.on(ATTENTION)
    name = model.config._attn_implementation
    assert is_direct(name) and "flash" not in name and "sdpa" not in name
    assert {now.candidate for now in running} == {"bundled/flash_attn"} and len(running) == 2
    assert ALL_ATTENTION_FUNCTIONS[name].__wrapped__ is fa.attention_forward  # inside the fallback guard
    on: list[torch.Tensor] = []
    assert calls_of(fa.attention_forward, lambda: on.append(logits(model))) == 2  # once per layer
    assert calls_of(flash_attention_forward, lambda: logits(model)) == 0  # no flash glue
    with torch.profiler.profile() as profile:
        logits(model)
    assert any(e.name.endswith("::fwd") and "flash_attn" in e.name for e in profile.events())  # the op
    # at PyTorch's accuracy: the logits' error against float64 within 1.5x SDPA's (or a resolution floor)
    err, err_sdpa = ((t.double() - exact).abs().max().item() for t in (on[0], before))
    floor = torch.finfo(dtype).eps * exact.abs().max().item()
    assert err <= 1.5 * max(err_sdpa, floor), (err, err_sdpa)
    row = explorer.inventory().row(ATTENTION)
    assert row.through_summary == DIRECT and f"attention runs its kernel through: {DIRECT}" in str(
        explorer.inventory()
    )
    assert set(explorer.inventory().to_pandas().query("layer == 'attention'").through) == {DIRECT}

    explorer.off(ATTENTION)
    assert model.config._attn_implementation == "sdpa" and torch.equal(logits(model), before)
    assert explorer.inventory().row(ATTENTION).through_summary == ""
    after, after_masks = registries()
    assert {k: v for k, v in after.items() if k in attention} == attention  # nothing of before replaced
    assert {k: v for k, v in after_masks.items() if k in masks} == masks
    added = {name, "kernel_explorer_capture"}  # and the capture's own name (the trial captured inputs)
    assert set(after) - set(attention) <= added and set(after_masks) - set(masks) <= added
    explorer.on(ATTENTION)
    explorer.off(ATTENTION)
    assert registries()[0].keys() == after.keys()  # switching again adds nothing


def test_a_model_on_eager_runs_the_kernel_in_its_row_and_comes_back_to_eager(hub: dict) -> None:
    """The row times the kernel on inputs captured under eager (an additive causal mask): the direct
    call gets the mask SDPA's mask function would give (None), so the kernel, not SDPA, is timed."""
    fa = hub["flash_attn"]
    model = tiny_llama()
    model.set_attn_implementation("eager")
    before = logits(model)
    explorer = Explorer(model, include_transformers=False)
    captured = explorer.capture(TOKENS)
    explorer.on(ATTENTION)
    assert is_direct(model.config._attn_implementation)
    kernel, pytorch, on = explorer._switchboard.forwards(ATTENTION, "model.layers.0.self_attn")
    assert on and pytorch.__self__.function.__name__ == "eager_attention_forward"
    args, kwargs = captured.for_layer(ATTENTION)["model.layers.0.self_attn"][0]
    assert args[3] is not None and args[3].dim() == 4  # eager's mask was captured
    with torch.profiler.profile() as profile, torch.no_grad():
        got = kernel(*args, **kwargs)
    assert any(e.name.endswith("::fwd") and "flash_attn" in e.name for e in profile.events())
    with torch.no_grad():
        torch.testing.assert_close(got, pytorch(*args, **kwargs), rtol=1e-4, atol=1e-5)
    assert calls_of(fa.attention_forward, lambda: explorer.compare(ATTENTION, pairs=2, calibration_pairs=1))
    explorer.reset()
    assert model.config._attn_implementation == "eager" and torch.equal(logits(model), before)


def test_a_repository_without_attention_forward_goes_through_the_glue(hub: dict, tmp_path: Path) -> None:
    from transformers.integrations.flash_attention import flash_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    glue_only = write_attention_repo(tmp_path, "glue-only")  # flash-attn functions only
    with_it = _repo(tmp_path, "with-attention-forward")
    model = tiny_llama()
    before = logits(model)
    explorer = Explorer(model, include_transformers=False, attention=[glue_only, with_it])
    running = explorer.on(ATTENTION, candidate=glue_only)
    name = model.config._attn_implementation
    assert not is_direct(name) and ALL_ATTENTION_FUNCTIONS[name].__wrapped__ is flash_attention_forward
    assert {now.through for now in running} == {GLUE}
    assert calls_of(flash_attention_forward, lambda: logits(model)) == 2
    running = explorer.on(ATTENTION, candidate=with_it)  # a user's repository offering it: direct too
    assert is_direct(model.config._attn_implementation) and {now.through for now in running} == {DIRECT}
    from kernels import get_local_kernel

    counts = get_local_kernel(with_it).CALLS
    was = dict(counts)
    torch.testing.assert_close(logits(model), before)
    assert counts["attention_forward"] == was["attention_forward"] + 2 and counts["flash_attn_func"] == 0
    explorer.reset()
    assert torch.equal(logits(model), before)


def test_a_sinks_model_takes_the_glue_and_stays_right(hub: dict) -> None:
    """DeepSeek-V4 passes sinks (s_aux): the direct function would hand them to PyTorch, the glue
    gives them to the kernel, which takes them (test_probe_values: at PyTorch's error)."""
    from test_probe_values import logits as v4_logits
    from test_probe_values import refuses_flash_on_deepseek_v4, tiny_deepseek_v4

    if refuses_flash_on_deepseek_v4():
        pytest.skip("this Transformers runs no flash kernel on DeepSeek-V4 (test_probe_values says so)")
    model = tiny_deepseek_v4()
    before = v4_logits(model)
    explorer = Explorer(model, include_transformers=False)
    running = explorer.on(ATTENTION)
    assert running[0].candidate == "bundled/flash_attn" and {now.through for now in running} == {GLUE}
    after = v4_logits(model)
    assert (after - before).abs().max() <= 1e-5 * before.abs().max()
    explorer.reset()
    assert torch.equal(v4_logits(model), before)


def test_a_direct_kernel_raising_on_a_forward_puts_that_model_back_on_pytorch(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "raising-direct", fault="assert query.shape[0] == 1, 'raises on batches'")
    model = tiny_llama()
    batch = TOKENS.repeat(2, 1)
    before = logits(model, batch)
    explorer = Explorer(model, include_transformers=False)
    assert all(now.is_kernel for now in explorer.on(ATTENTION, candidate=repo))  # passes its trial
    assert is_direct(model.config._attn_implementation)
    torch.testing.assert_close(logits(model, batch), before)  # the failing call answered by PyTorch
    running = explorer.running(ATTENTION)
    assert not any(now.is_kernel for now in running)
    assert all("raised when run" in now.reason and "raises on batches" in now.reason for now in running)
    assert model.config._attn_implementation == "sdpa" and torch.equal(logits(model, batch), before)


def test_a_direct_kernel_wrong_past_a_length_is_caught_by_the_probe(hub: dict, tmp_path: Path) -> None:
    wrong = _repo(tmp_path, "wrong-direct", wrong="q.shape[1] > 8")
    model = tiny_llama()
    before = logits(model)
    explorer = Explorer(model, attention=[wrong], include_transformers=False)
    running = explorer.on(ATTENTION)  # the default passes over it: the bundled kernel runs
    assert running[0].candidate == "bundled/flash_attn"
    with pytest.warns(UserWarning, match="wrong results here"):
        running = explorer.on(ATTENTION, candidate=wrong)
    assert "wrong-direct" in running[0].candidate and running[0].through == DIRECT
    explorer.reset()
    assert torch.equal(logits(model), before)
    strict = Explorer(model, attention=[wrong], include_transformers=False, strict=True)
    with pytest.raises(KernelSwitchError, match="wrong results here"):
        strict.on(ATTENTION, candidate=wrong)
    assert model.config._attn_implementation == "sdpa" and torch.equal(logits(model), before)


def test_two_models_switch_apart_on_the_shared_name(hub: dict) -> None:
    fa = hub["flash_attn"]
    first, second = tiny_llama(), tiny_llama()
    before = logits(first)
    one, two = Explorer(first, include_transformers=False), Explorer(second, include_transformers=False)
    one.on(ATTENTION)
    two.on(ATTENTION)
    assert first.config._attn_implementation == second.config._attn_implementation  # one registered name
    two.off(ATTENTION)
    assert second.config._attn_implementation == "sdpa"
    assert calls_of(fa.attention_forward, lambda: logits(second)) == 0
    assert calls_of(fa.attention_forward, lambda: logits(first)) == 2  # the first model still on it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing of the second's off reaches the first
        torch.testing.assert_close(logits(first), before, rtol=1e-4, atol=1e-5)
    again = Explorer(first, include_transformers=False)  # a later explorer of the model that is on
    assert [(now.candidate, now.through) for now in again.running(ATTENTION)] == [
        ("bundled/flash_attn", DIRECT)
    ] * 2
    again.off(ATTENTION)
    assert first.config._attn_implementation == "sdpa"
    assert torch.equal(logits(first), before) and torch.equal(logits(second), before)


def test_sinks_in_later_layers_only_keep_the_glue(hub: dict) -> None:
    """MiMo-V2-Flash passes sinks in its sliding-window layers only (the first layer's captured call
    has none): every module counts, so it keeps the glue, which Transformers redirects for it."""
    from architectures import tiny_config
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(tiny_config("mimo_v2_flash")).eval()
    explorer = Explorer(model, include_transformers=False)
    explorer.capture(TOKENS)
    (candidate,) = [c for c, _ in explorer.inventory().row(ATTENTION).candidates if c.source == "bundled"]
    door = explorer._switchboard.doors[ATTENTION]
    assert door.captured_keywords().get("s_aux") is None  # the first layer's call: no sinks there
    from kernels import Mode

    assert door._direct(candidate, Mode.INFERENCE) is None
    found = door.availability(candidate, mode=Mode.INFERENCE)
    assert "Transformers redirects this model's flash attention" in found.reason


def test_a_model_that_passes_its_own_mask_does_not_take_the_direct_path(hub: dict) -> None:
    """Doge hands its attention a dynamic mask of its own, not SDPA's: registered directly, the
    bundled `attention_forward` would answer every call with SDPA, so the row read "on" while the
    kernel never ran (logits bitwise PyTorch's). The door takes the glue, which Transformers refuses
    for Doge (no flash attention): the row says so and the model stays on SDPA, unchanged."""
    from architectures import tiny_config
    from kernels import Mode
    from transformers import AutoModelForCausalLM

    from kernel_explorer._backend.attention_interface import passes_own_mask

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(tiny_config("doge")).eval()
    before = logits(model)
    explorer = Explorer(model, include_transformers=False)
    explorer.capture(TOKENS)
    door = explorer._switchboard.doors[ATTENTION]
    assert passes_own_mask(door.captured_call())
    (candidate,) = [c for c, _ in explorer.inventory().row(ATTENTION).candidates if c.source == "bundled"]
    assert door._direct(candidate, Mode.INFERENCE) is None
    running = explorer.on(ATTENTION)
    assert not any(now.is_kernel for now in running)
    assert model.config._attn_implementation == "sdpa"
    assert all("hands its attention a mask of its own" in now.reason for now in running), running
    assert "would never run here" in str(explorer.inventory())
    assert torch.equal(logits(model), before)


def test_a_plain_causal_call_passes_no_mask_of_its_own(hub: dict) -> None:
    """The default path's calls (SDPA's mask function leaves a plain causal mask out) stay direct."""
    from kernel_explorer._backend.attention_interface import passes_own_mask

    explorer = Explorer(tiny_llama(), include_transformers=False)
    explorer.capture(TOKENS)
    assert not passes_own_mask(explorer._switchboard.doors[ATTENTION].captured_call())
    assert not passes_own_mask(None)
