"""One Comparison value: every number a view shows about a comparison comes from it."""

from __future__ import annotations

import pytest

from kernel_explorer.measure.comparison import KERNEL_OFF, Comparison
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.records import LayerLatency, LayerVerdict, Record
from kernel_explorer.measure.stats import (
    FASTER,
    NO_DIFFERENCE,
    SLOWER,
    across_runs,
    noise_floor,
    speedup_interval,
)
from kernel_explorer.measure.verdict import Verdict

AA = (1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0)


def _pairs(speedups: list[float], *, on: bool = True, stalled: tuple[int, ...] = ()) -> list[LayerLatency]:
    return [
        LayerLatency(s * 1e-6, 1e-6, s, kernel_on=on, stalled=i in stalled) for i, s in enumerate(speedups)
    ]


def test_it_derives_interval_floor_across_runs_and_verdict_from_its_pairs() -> None:
    speedups = [2.0 + 0.01 * (i % 5) for i in range(24)]
    found = Comparison.of_pairs(_pairs(speedups), AA)
    assert found.interval == speedup_interval(speedups)
    assert found.floor == noise_floor(AA)
    assert found.across_runs == across_runs(found.interval.low, found.interval.high, found.floor)
    assert found.verdict == FASTER and found.measurable and found.kernel_on
    assert Comparison.of_pairs(_pairs([0.5] * 12), AA).verdict == SLOWER
    assert Comparison.of_pairs(_pairs([1.0, 1.01, 0.99] * 4), AA).verdict == NO_DIFFERENCE


def test_pairs_on_pytorch_count_only_when_no_kernel_ran() -> None:
    mixed = _pairs([3.0] * 6) + _pairs([1.0] * 6, on=False)
    assert Comparison.of_pairs(mixed, AA).speedups == (3.0,) * 6
    off = Comparison.of_pairs(_pairs([1.0] * 6, on=False), AA)
    assert not off.kernel_on and off.pairs == 6
    assert KERNEL_OFF == "PyTorch against PyTorch (kernel off)"


def test_an_interval_the_machine_stalled_is_not_a_number() -> None:
    """'SiLU 1.59x [0.00, 1.72]' read as if 0.00x were a speed: half the pairs stalled."""
    speedups = [1.6, 0.002, 0.004, 1.65, 0.001, 0.003, 1.7]
    found = Comparison.of_pairs(_pairs(speedups, stalled=(1, 2, 4, 5)), AA)
    assert found.stalled_pairs == 4 and not found.measurable
    assert found.verdict is Verdict.NOT_MEASURABLE
    assert found.verdict_text == "not measurable here (the machine stalled 4 of 7 pairs)"
    verdict = LayerVerdict(instances=1, **found.fields(), accuracy="", stopped_by="pairs")  # type: ignore[arg-type]
    assert verdict.summary == found.verdict_text and not verdict.measurable and "0.00" not in verdict.summary
    # stalls no flag caught that still pull the interval to 0: not measurable either
    unflagged = Comparison.of_pairs(_pairs([1.6, 1.7, 0.004, 1.65, 0.003, 1.7, 1.6], stalled=(2,)), AA)
    assert unflagged.interval.low < 0.01 and not unflagged.measurable


def test_stalled_pairs_are_left_out_of_the_median_and_the_interval_and_counted() -> None:
    found = Comparison.of_pairs(_pairs([1.6, 1.7, 0.004, 1.65, 1.6, 0.003, 1.7], stalled=(2, 5)), AA)
    assert found.measurable and found.verdict == FASTER
    assert found.pairs == 7 and found.stalled_pairs == 2 and found.speedups == (1.6, 1.7, 1.65, 1.6, 1.7)
    assert found.interval.low >= 1.6
    verdict = LayerVerdict(instances=1, **found.fields(), accuracy="", stopped_by="pairs")  # type: ignore[arg-type]
    assert verdict.summary.startswith("1.65x [1.60, 1.70] faster")
    assert verdict.stalled_note == "2 of 7 pairs stalled by the machine, left out"


def test_the_verdict_record_and_the_summary_row_read_the_same_comparison() -> None:
    speedups = [2.0, 2.1, 1.9, 2.05, 1.95, 2.02] * 2
    found = Comparison.of_pairs(_pairs(speedups), AA)
    verdict = LayerVerdict(instances=1, **found.fields(), accuracy="not measured", stopped_by="pairs")  # type: ignore[arg-type]
    log = ResultLog(
        [Record("run-1", p, "RMSNorm", "model.norm") for p in _pairs(speedups)]
        + [Record("run-1", verdict, "RMSNorm")]
    )
    from kernel_explorer.measure.records import LayerCalibration

    for ratio in AA:
        log.append(Record("run-1", LayerCalibration(1e-6, 1e-6 / ratio, ratio), "RMSNorm", "model.norm"))
    (row,) = log.layer_summary().to_dict("records")
    assert (row["speedup"], row["speedup_low"], row["speedup_high"]) == (
        verdict.speedup,
        verdict.speedup_low,
        verdict.speedup_high,
    )
    assert row["noise_floor"] == pytest.approx(verdict.noise_floor)
    assert (row["across_low"], row["across_high"]) == pytest.approx(verdict.across_runs)
    assert row["verdict"] == verdict.verdict and row["stalled"] == 0


def test_a_summary_row_the_machine_stalled_has_no_speed() -> None:
    stalled = _pairs([0.002, 0.003, 1.6, 0.001, 1.7], stalled=(0, 1, 3))
    (row,) = (
        ResultLog([Record("run-1", p, "SiLU", "model.act") for p in stalled])
        .layer_summary()
        .to_dict("records")
    )
    assert row["verdict"] is Verdict.NOT_MEASURABLE  # the reason is in the row's counts:
    assert row["speedup"] is None and row["speedup_low"] is None and row["across_high"] is None
    assert row["stalled"] == 3 and row["pairs"] == 5


def test_a_kernel_a_hundred_times_slower_reads_slower_with_its_interval() -> None:
    """0.01x on every pair, two PyTorch-side stalls: measurable, and "slower", never "not measurable"."""
    speedups = [0.0100, 0.0098, 0.0102, 0.0101, 0.0099, 0.0100, 0.0097, 0.0103] * 3
    found = Comparison.of_pairs(_pairs(speedups, stalled=(3, 11)), AA)
    assert found.measurable and found.verdict == SLOWER
    verdict = LayerVerdict(instances=1, **found.fields(), accuracy="", stopped_by="pairs")  # type: ignore[arg-type]
    assert verdict.summary.startswith("0.01x [") and "slower" in verdict.summary
