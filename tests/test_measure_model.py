"""Model comparison: the current switch state against all-PyTorch, interleaved."""

from __future__ import annotations

import pytest
import torch

from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama


@pytest.fixture
def explorer(hub: dict) -> Explorer:
    found = Explorer(tiny_llama(), include_transformers=False)
    yield found
    found.reset()


def test_model_comparison_records_and_state(explorer: Explorer) -> None:
    explorer.on("RMSNorm")
    before = {now.instance: now.kernel_id for now in explorer.running()}
    handle = explorer.compare_model(
        inputs=torch.randint(0, 256, (1, 12)), lengths=(8, 16), decode_tokens=4, pairs=2, decode_pairs=2
    )
    assert handle.outcome == "finished", handle.error
    (agreement,) = explorer.results.records("model_agreement")
    values = agreement.values
    assert 0 < values.logits_max_abs < 1e-3  # RMSNorm's kernel rounds differently, a little
    assert 0 <= values.kl < 1e-9 and values.top1_agreement == 1.0
    assert values.first_divergence is None and values.greedy_tokens == 24
    prefill = explorer.results.records("model_prefill")
    assert [r.values.tokens for r in prefill] == [8, 16, 8, 16]
    assert all(r.values.pytorch_s > 0 and r.values.kernel_s > 0 for r in prefill)
    decode = explorer.results.records("model_decode")
    assert len(decode) == 2 and all(r.values.kernel_tok_s > 0 for r in decode)
    verdicts = [r.values for r in explorer.results.records("model_verdict")]
    assert [(v.measure, v.tokens, v.pairs) for v in verdicts] == [
        ("prefill", 8, 2),
        ("prefill", 16, 2),
        ("decode", 4, 2),
    ]
    assert all(v.speedup_low <= v.speedup <= v.speedup_high and v.confidence < 0.95 for v in verdicts)
    assert verdicts[2].noise_floor == max(v.noise_floor for v in verdicts[:2])  # decode borrows prefill's
    assert {now.instance: now.kernel_id for now in explorer.running()} == before


def test_all_pytorch_against_itself_is_identical(explorer: Explorer) -> None:
    explorer.compare_model(lengths=(8,), decode_tokens=2, pairs=1, decode_pairs=1)
    (agreement,) = explorer.results.records("model_agreement")
    assert agreement.values.logits_max_abs == 0.0 and agreement.values.kl == 0.0


def test_a_high_model_noise_floor_is_one_warning_line(explorer: Explorer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from kernel_explorer.measure import stats

    monkeypatch.setattr(stats, "HIGH_NOISE", -1.0)  # every floor counts as high
    with pytest.warns(stats.NoisyMachineWarning) as caught:
        explorer.compare_model(lengths=(8,), decode_tokens=2, pairs=1, decode_pairs=1)
    (warning,) = caught.list
    assert str(warning.message).startswith("This machine is noisy") and "\n" not in str(warning.message)
