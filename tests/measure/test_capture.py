"""Input capture: real activations per instance, a memory cap that holds, clear errors."""

from __future__ import annotations

import pytest
import torch

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama
from kernel_explorer.measure.capture import model_inputs


@pytest.fixture
def explorer(hub: dict) -> Explorer:
    return Explorer(tiny_llama(), include_transformers=False)


def test_every_instance_gets_its_real_inputs(explorer: Explorer) -> None:
    ids = torch.randint(0, 256, (1, 10))
    captured = explorer.capture(ids)
    assert len(captured.calls) == 5 + 2 + 2 + 2 and captured.dropped == 0  # attention's q/k/v too
    ((args, kwargs),) = captured.calls[("RMSNorm", "model.norm")]
    assert args[0].shape == (1, 10, 64) and kwargs == {}
    ((args, _),) = captured.calls[("rotary_pos_emb", "model.layers.1.self_attn")]
    query, key, cos, sin = args
    assert sin.shape == cos.shape
    assert query.shape == (1, 4, 10, 16) and key.shape == (1, 2, 10, 16) and cos.shape == (1, 10, 16)
    # inputs differ per instance: they are the model's activations, not random tensors
    first = captured.calls[("RMSNorm", "model.layers.0.input_layernorm")][0][0][0]
    second = captured.calls[("RMSNorm", "model.layers.1.input_layernorm")][0][0][0]
    assert not torch.equal(first, second)


def test_capture_sees_function_calls_also_while_switched(explorer: Explorer) -> None:
    explorer.on("rotary_pos_emb", "model.layers.0.self_attn")
    try:
        captured = explorer.capture(torch.randint(0, 256, (1, 6)))
        assert len(captured.for_layer("rotary_pos_emb")) == 2
    finally:
        explorer.reset()


def test_memory_cap_holds(explorer: Explorer) -> None:
    ids = torch.randint(0, 256, (1, 32))
    cap = 40_000  # bytes: room for a few RMSNorm inputs (32 x 64 floats = 8 KiB each)
    captured = explorer.capture(ids, memory_cap=cap)
    assert 0 < captured.bytes_kept <= cap
    assert captured.dropped > 0
    kept = sum(
        t.numel() * t.element_size()
        for calls in captured.calls.values()
        for args, kwargs in calls
        for t in [*args, *kwargs.values()]
        if isinstance(t, torch.Tensor)
    )
    assert kept == captured.bytes_kept
    with pytest.raises(KernelExplorerError, match="memory_cap must be a positive"):
        explorer.capture(ids, memory_cap=0)


def test_bad_inputs_give_clear_errors(explorer: Explorer) -> None:
    with pytest.raises(KernelExplorerError, match="The prompt is empty"):
        model_inputs(explorer.model, "   ", tokenizer=object())
    with pytest.raises(KernelExplorerError, match="needs a tokenizer"):
        explorer.capture("What is the capital of France?")
    with pytest.raises(KernelExplorerError, match="The inputs are empty"):
        explorer.capture(torch.zeros(0, dtype=torch.long))
    with pytest.raises(KernelExplorerError, match="The model rejected the inputs"):
        explorer.capture(torch.full((1, 4), 10_000))  # token ids beyond the vocabulary
    with pytest.raises(KernelExplorerError, match="must be a prompt"):
        explorer.capture(3.14)
    assert not any(now.is_kernel for now in explorer.running())


def test_meta_device_model_is_refused(hub: dict) -> None:
    with torch.device("meta"):
        model = tiny_llama()
    explorer = Explorer(model, include_transformers=False)
    with pytest.raises(KernelExplorerError, match="meta device"):
        explorer.capture(torch.randint(0, 256, (1, 4)))
    with pytest.raises(KernelExplorerError, match="meta device"):
        explorer.compare_model()


def test_a_trials_longer_capture_stops_once_each_row_has_its_call(hub: dict) -> None:
    """The longer trial capture keeps one call per row (one per kind of attention module) and
    stops the forward there: the model's head never runs on the longer prompt."""
    explorer = Explorer(tiny_llama())
    explorer.capture(torch.randint(0, 256, (1, 10)))
    head_calls: list[int] = []
    hook = explorer.model.lm_head.register_forward_hook(lambda *_: head_calls.append(1))
    try:
        sample = explorer._long_sample("RMSNorm", "model.layers.0.input_layernorm")
        assert sample is not None and sample[0][0].shape[1] > 10  # the longer prompt's call
        assert head_calls == []  # stopped before the head
        # one attention module per kind: tiny_llama's two layers are alike, the second is not kept
        assert explorer._long_sample("attention", "model.layers.0.self_attn") is not None
        assert explorer._long_sample("attention", "model.layers.1.self_attn") is None
    finally:
        hook.remove()
