"""Intervals, noise floor and verdicts: coverage on known distributions, and the bad inputs."""

from __future__ import annotations

import random
import statistics

import pytest

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.measure.stats import (
    FASTER,
    NO_DIFFERENCE,
    SLOWER,
    across_runs,
    batch_medians,
    check_sampling,
    median_interval,
    noise_floor,
    noise_warning,
    speed_verdict,
    speedup_interval,
)


@pytest.mark.parametrize(("n", "low", "high"), [(9, 2, 8), (20, 6, 15), (100, 40, 61)])
def test_order_statistics_match_the_textbook_ranks(n: int, low: int, high: int) -> None:
    interval = median_interval(list(range(1, n + 1)))
    assert (interval.low, interval.high) == (low, high)  # 1-based ranks of the 95% interval
    assert 0.95 <= interval.confidence < 0.99 and not interval.too_few


def test_too_few_pairs_say_so_with_their_real_coverage() -> None:
    interval = median_interval([1.0, 2.0, 3.0])
    assert interval.too_few and interval.confidence == pytest.approx(0.75)
    assert (interval.low, interval.high) == (1.0, 3.0)


def test_coverage_on_a_skewed_distribution_is_at_least_95_percent() -> None:
    rng = random.Random(7)
    true_median = 2.0  # log-normal around 2x: heavy right tail like timings
    hits = 0
    for _ in range(400):
        sample = [true_median * rng.lognormvariate(0, 0.2) for _ in range(15)]
        hits += median_interval(sample).contains(true_median)
    assert hits / 400 >= 0.93  # 95% nominal; 400 trials leave about +-2% of sampling error


def test_speedup_interval_is_over_batch_medians_so_a_drifting_run_is_wide() -> None:
    steady = [3.0 + 0.01 * (i % 3) for i in range(120)]
    drifting = [3.0] * 60 + [2.4] * 60  # the machine changed state half way
    assert batch_medians(steady) == [statistics.median(steady[i * 10 : i * 10 + 10]) for i in range(12)]
    assert speedup_interval(steady).half_width < 0.01
    wide = speedup_interval(drifting)
    assert wide.low == 2.4 and wide.high == 3.0 and wide.n == 120  # per-pair ranks would give 2.4..3.0 too,
    assert median_interval(drifting[:50] + drifting[70:]).half_width > 0  # ... and with fewer pairs


def test_verdicts_need_the_interval_to_clear_the_floor() -> None:
    faster = median_interval([2.9, 3.0, 3.1, 3.0, 2.95, 3.05, 3.0])
    assert speed_verdict(faster, 0.05) == FASTER
    slower = median_interval([0.5, 0.52, 0.49, 0.51, 0.5, 0.5, 0.48])
    assert speed_verdict(slower, 0.05) == SLOWER
    close = median_interval([1.04, 1.06, 1.05, 1.07, 1.05, 1.06, 1.05])
    assert speed_verdict(close, 0.0) == FASTER and speed_verdict(close, 0.10) == NO_DIFFERENCE


def test_the_interval_across_runs_is_the_one_a_verdict_clears() -> None:
    """Five quiet fp32 RMSNorm runs gave 3.15x [3.04, 3.28] and 2.68x [2.58, 2.84] among others: the
    first run's own interval misses the second's median, its interval across runs (floor 16.8%)
    holds it, and the verdict is "faster" exactly when that wider interval is above 1x."""
    low, high = across_runs(3.04, 3.28, 0.168)
    assert not 3.04 <= 2.68 <= 3.28 and low <= 2.68 <= high
    for floor in (0.0, 0.1, 0.3, 2.0):
        for values in ([1.2] * 7, [1.05] * 7, [0.8] * 7, [3.0] * 7, [0.3] * 7):
            interval = median_interval(values)
            wide_low, wide_high = across_runs(interval.low, interval.high, floor)
            expected = FASTER if wide_low > 1 else SLOWER if wide_high < 1 else NO_DIFFERENCE
            assert speed_verdict(interval, floor) == expected, (values[0], floor)


def test_noise_floor_counts_bias_and_scatter() -> None:
    assert noise_floor([1.0] * 9) == 0.0
    assert noise_floor([1.2] * 9) == pytest.approx(0.2)  # one side of the pair always luckier
    # scatter: two standard errors of the median, from the median absolute deviation (0.1 here)
    assert noise_floor([0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.1, 1.2, 1.3]) == pytest.approx(
        2 * 1.2533 * 1.4826 * 0.1 / 3
    )
    assert noise_floor([1.0] * 7 + [5.0, 5.0]) == 0.0  # two pairs in another machine state: not noise
    assert noise_warning(0.05) is None
    warning = noise_warning(0.25)
    assert warning is not None and "25%" in warning and "\n" not in warning


@pytest.mark.parametrize(
    ("pairs", "precision", "budget", "message"),
    [
        (0, 0.05, 1.0, "pairs must be a positive whole number"),
        (-3, 0.05, 1.0, "pairs must be a positive whole number"),
        (None, 0.0, 1.0, "precision must be between 0 and 1"),
        (None, 1.0, 1.0, "precision must be between 0 and 1"),
        (None, 0.05, 0.0, "budget_s must be a positive, finite number"),
        (None, 0.05, float("inf"), "budget_s must be a positive, finite number"),
    ],
)
def test_bad_sampling_settings_are_one_line(pairs, precision, budget, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KernelExplorerError, match=message) as info:
        check_sampling(pairs, precision, budget)
    assert "\n" not in str(info.value)


def test_a_pair_that_waited_for_the_machine_is_flagged() -> None:
    """Rotary on 48 tokens under load: PyTorch 35 us, the kernel's parallel region 15 ms a call."""
    from kernel_explorer.measure.stats import STALL_FACTOR, StallWatch

    watch = StallWatch()
    assert not watch.observe(35e-6, 36e-6)  # an A/A pair sets the reference
    assert not watch.observe(35e-6, 9e-6)  # a kernel 4x faster: the reference drops to 9 us
    assert not watch.observe(36e-6, 9e-6 * STALL_FACTOR * 0.9)  # slow, but within the factor
    assert watch.observe(35e-6, 15e-3)
    assert watch.observe(15e-3, 9e-6)  # either side
    # never less than a plain copy of the op's bytes: a reference faster than a copy is no reference
    copy_bound = StallWatch(copy_s=1e-3)
    assert not copy_bound.observe(1e-6, 5e-3)


def test_a_kernel_slow_on_every_call_is_slow_not_stalled() -> None:
    """A kernel 100 times slower than PyTorch on every call: its own time is no stall (issue 46 read
    "not measurable here (182 of 183 pairs stalled)"); a stall of its own shows against its own
    fastest call, and PyTorch's side is judged against PyTorch's."""
    from kernel_explorer.measure.stats import STALL_FACTOR, StallWatch

    watch = StallWatch()
    assert not watch.observe(35e-6, 36e-6, aa=True)
    assert not any(watch.observe(35e-6, 3.5e-3 * (1 + i / 100)) for i in range(20))
    assert watch.observe(35e-6, 3.5e-3 * STALL_FACTOR * 1.1)  # the kernel waited, against its own time
    assert watch.observe(35e-6 * STALL_FACTOR * 1.1, 3.5e-3)  # PyTorch waited
    assert watch.observe(36e-6, 35e-6 * STALL_FACTOR * 1.1, aa=True)  # an A/A pair: either side
