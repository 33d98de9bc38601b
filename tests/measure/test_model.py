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


def test_one_interleaver_alternates_and_times_each_side_in_its_context() -> None:
    """`interleaved_pair` is the one A/B, B/A loop: the order flips with `b_first`, each side runs
    inside its own context (entered only around its block), and the times come back as (a, b)."""
    import contextlib

    from kernel_explorer.measure.timing import Clock, interleaved_pair

    calls: list[str] = []

    def side(name: str):  # type: ignore[no-untyped-def]
        @contextlib.contextmanager
        def context():  # type: ignore[no-untyped-def]
            calls.append(f"enter {name}")
            yield
            calls.append(f"leave {name}")

        return context

    def slow() -> None:
        calls.append("a")
        sum(range(20_000))

    def fast() -> None:
        calls.append("b")

    clock = Clock()
    a_s, b_s = interleaved_pair(clock, slow, fast, 1, False, a_side=side("A"), b_side=side("B"))
    assert calls == ["enter A", "a", "leave A", "enter B", "b", "leave B"] and a_s > b_s
    calls.clear()
    a_s, b_s = interleaved_pair(clock, slow, fast, 1, True, a_side=side("A"), b_side=side("B"))
    assert calls == ["enter B", "b", "leave B", "enter A", "a", "leave A"] and a_s > b_s


def test_a_whole_model_pair_the_machine_stalled_is_left_out_as_at_the_layer_level(
    explorer: Explorer,
) -> None:
    """Model prefill goes through the same stall watch as layers: a pair where one side waited far
    longer than the model ever takes (a sleep standing in for a descheduled thread) is flagged and
    counted, not averaged into the verdict."""
    import time

    calls = {"n": 0}

    def stall_once(module, args):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 6:  # warm-up 1, A/A pairs 2-5 (2 x 2 calls), then the first timed pair
            time.sleep(3.0)  # far beyond 25x the model's forward, even on a loaded machine

    from kernel_explorer.measure.model_comparison import compare_prefill

    explorer.on("RMSNorm")
    hook = explorer.model.register_forward_pre_hook(stall_once)
    try:
        board = explorer._switchboard  # the measurement itself, below the explorer's face
        records = list(
            compare_prefill(board, run_id="r", lengths=(8,), pairs=4, vocab_size=256, calibration_pairs=2)
        )
    finally:
        hook.remove()
    prefill = [r.values for r in records if r.kind == "model_prefill"]
    (verdict,) = [r.values for r in records if r.kind == "model_verdict"]
    assert prefill[0].stalled, prefill  # the 3 s side: flagged (a loaded machine may flag others too)
    assert verdict.pairs == 4 and verdict.stalled == sum(p.stalled for p in prefill) >= 1
    if verdict.measurable:  # the stalled pairs are left out of the median
        kept = sorted(p.speedup for p in prefill if not p.stalled)
        assert kept[0] <= verdict.speedup <= kept[-1]
