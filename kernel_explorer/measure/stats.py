"""How sure a measurement is: intervals on ratios, the machine's noise floor, and verdicts.

A ratio here is PyTorch's time over the other side's, one per interleaved pair. Its interval is
the distribution-free confidence interval of the median from order statistics: for n pairs, the
k-th smallest and k-th largest ratios, with k the largest index such that a Binomial(n, 1/2) falls
below k with probability at most (1 - confidence) / 2. Why this method and not a bootstrap or a
t-interval: it is exact for independent samples from any continuous distribution (timings have
heavy right tails: a preempted sample is 5x slower, which skews a mean and its t-interval), it
needs no random resampling (the same samples always give the same interval), and it costs a sort.
Interleaving with alternating order (A B, then B A) keeps slow drift from biasing the pairs; it
does not make them independent of a machine that changes state for seconds (on these shared hosts
eager's time moves 10-30% between windows, and a kernel's speedup with it). So a speedup's interval
is taken over batch medians (the batch-means method of simulation output analysis, with medians):
the pairs, in time order, are cut into at most `BATCHES` consecutive batches, and the interval is
the order-statistic interval of the batches' medians. Pairs within a window then count as one
observation of that window, and an adaptive run must also last `MIN_SECONDS` to see more than one.
A verdict also needs the A/A noise floor: PyTorch against PyTorch, measured the same way, on the
same inputs, tells how far from 1x "no difference" reads here.

Five or fewer pairs cannot reach 95% (the widest interval, min to max, covers 1 - 2 / 2^n); the
interval is then min to max with its real coverage in `confidence`, and `Interval.too_few` says so.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

# defined in errors.py with the toolkit's other warnings; named here too, where the noise floor is
from kernel_explorer.errors import NoisyMachineWarning as NoisyMachineWarning
from kernel_explorer.measure.verdict import Verdict

CONFIDENCE = 0.95
MIN_PAIRS = 12  # an adaptive run takes at least this many pairs (one per batch) ...
MIN_SECONDS = 1.0  # ... and at least this long, before its interval may stop it
BATCHES = 12  # a speedup's interval is over at most this many batch medians
DEFAULT_PRECISION = 0.05  # adaptive runs stop once the interval's half-width is below 5% of the ratio
DEFAULT_BUDGET_S = 10.0  # ... or after this many seconds per layer
HIGH_NOISE = 0.10  # an A/A floor above 10% gets a one-line warning
IMPLAUSIBLE_SPEEDUP = 10.0
STALL_FACTOR = 25.0  # a side this many times slower than the comparison's fastest time waited for the machine

FASTER, SLOWER, NO_DIFFERENCE = Verdict.FASTER, Verdict.SLOWER, Verdict.NO_DIFFERENCE


def _binomial_cdf(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


@dataclass(frozen=True)
class Interval:
    """A median with its confidence interval, from `n` samples."""

    median: float
    low: float
    high: float
    n: int
    confidence: float  # the interval's real coverage (below the target when n is small)

    @property
    def too_few(self) -> bool:
        """Whether there were too few samples to reach the target confidence."""
        return self.confidence < CONFIDENCE - 1e-12

    @property
    def half_width(self) -> float:
        """Half the interval's width relative to the median (0.05: +-5%)."""
        return (self.high - self.low) / 2 / self.median if self.median else math.inf

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def __str__(self) -> str:
        from kernel_explorer.measure.summary import format_interval

        return format_interval(self.median, self.low, self.high, "x")


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The median of `values` and its distribution-free confidence interval (see the module doc)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("no samples")
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    alpha = (1 - confidence) / 2
    k = 0  # samples left out on each side: the interval is ordered[k] .. ordered[n - 1 - k]
    while k + 1 <= (n - 1) // 2 and _binomial_cdf(k + 1, n) <= alpha:
        k += 1
    coverage = 1 - 2 * _binomial_cdf(k, n)
    return Interval(median, ordered[k], ordered[n - 1 - k], n, coverage)


def batch_medians(values: Sequence[float], batches: int = BATCHES) -> list[float]:
    """Medians of `values` (in time order) cut into at most `batches` consecutive, near-equal batches."""
    n = len(values)
    count = min(n, batches)
    bounds = [round(i * n / count) for i in range(count + 1)]
    return [statistics.median(values[bounds[i] : bounds[i + 1]]) for i in range(count)]


def speedup_interval(speedups: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The median of per-pair speedups (in time order) and its interval over batch medians."""
    over_batches = median_interval(batch_medians(speedups), confidence)
    median = statistics.median(speedups)
    return Interval(
        median,
        min(over_batches.low, median),
        max(over_batches.high, median),
        len(speedups),
        over_batches.confidence,
    )


def noise_floor(aa_ratios: Sequence[float]) -> float:
    """How far from 1x PyTorch against itself reads here: the margin a real difference must clear.

    The A/A median's distance from 1 (a bias: one side of a pair systematically luckier) plus two
    standard errors of that median, estimated from the median absolute deviation, so a minority of
    pairs caught in another machine state does not inflate it the way a rank interval of a few
    pairs would.
    """
    median = statistics.median(aa_ratios)
    mad = statistics.median(abs(r - median) for r in aa_ratios)
    standard_error = 1.2533 * 1.4826 * mad / math.sqrt(len(aa_ratios))
    return abs(median - 1.0) + 2 * standard_error / median


def across_runs(low: float, high: float, floor: float) -> tuple[float, float]:
    """What another run on this machine may give: this run's interval widened by the A/A floor.

    A run's interval covers the pairs it took, over the seconds it lasted; the machine moves more
    than that between runs (five fp32 RMSNorm runs on a quiet host: medians 2.68x to 3.29x, each
    run's interval about +-3%, so only 2 of 5 held the median of the medians). The A/A floor is
    measured for exactly that movement, so the interval widened by it on both sides is the honest
    one to compare runs with, and `speed_verdict` calls a difference only when this clears 1x.
    """
    return low / (1.0 + floor), high * (1.0 + floor)


def speed_verdict(interval: Interval, floor: float) -> Verdict:
    """Faster, slower, or no difference we can detect: the interval across runs must clear 1x."""
    low, high = across_runs(interval.low, interval.high, floor)
    if low > 1.0:
        return FASTER
    if high < 1.0:
        return SLOWER
    return NO_DIFFERENCE


class StopRule:
    """When an interleaved series of pairs stops: after `pairs` rounds when given, else once the
    speedup's interval is within `precision` (after `MIN_PAIRS` pairs and `MIN_SECONDS`), and in
    either case after `budget_s` seconds. Shared by every comparison, so they all stop alike."""

    def __init__(self, pairs: int | None, precision: float, budget_s: float) -> None:
        self.pairs, self.precision, self.budget_s = pairs, precision, budget_s
        self.start = time.perf_counter()
        self.rounds = 0

    def after_round(self, speedups: Sequence[float]) -> str | None:
        """Count one round; the reason to stop ("pairs", "precision", "budget"), or None to go on."""
        self.rounds += 1
        if self.pairs is not None and self.rounds >= self.pairs:
            return "pairs"
        elapsed = time.perf_counter() - self.start
        narrow = self.pairs is None and len(speedups) >= MIN_PAIRS and elapsed >= MIN_SECONDS
        if narrow and speedup_interval(speedups).half_width <= self.precision:
            return "precision"
        if time.perf_counter() - self.start >= self.budget_s:
            return "budget"
        return None


class StallWatch:
    """Flags a pair where a side waited for the machine rather than ran: slower than `STALL_FACTOR`
    times that side's own reference time.

    PyTorch's reference is the fastest PyTorch call seen so far (the A/A pairs come first, and both
    of their sides are PyTorch, so PyTorch's own time is known before any kernel pair); the other
    side's is the fastest call of that side; neither is less than a plain copy of the op's bytes
    here. Why: on a loaded 2-core guest a parallel region waits for its second thread to be
    scheduled, a slice of several milliseconds; rotary on 48 tokens then took 10-20 ms on some calls
    against 35 us on others, and its "speedup" read 0.00x. Such a pair says nothing about the
    kernel; `Comparison` counts these and calls the comparison "not measurable here" when they
    decide its interval. A kernel is never judged against PyTorch's time: one that is 100 times
    slower on every call is slow, not stalled (it reads "slower, 0.01x"), and a stall of its own
    shows against its own fastest call.
    """

    def __init__(self, copy_s: float = 0.0) -> None:
        self.fastest = math.inf  # PyTorch's fastest call (A/A pairs and PyTorch's side of each pair)
        self.fastest_other = math.inf  # the other side's fastest call
        self.copy_s = copy_s

    def observe(self, pytorch_s: float, other_s: float, *, aa: bool = False) -> bool:
        """Take one pair's per-call times (PyTorch's, then the other side's; `aa`: both PyTorch);
        True when the pair stalled."""
        if aa:
            self.fastest = min(self.fastest, pytorch_s, other_s)
            return max(pytorch_s, other_s) > STALL_FACTOR * max(self.fastest, self.copy_s)
        self.fastest = min(self.fastest, pytorch_s)
        self.fastest_other = min(self.fastest_other, other_s)
        return pytorch_s > STALL_FACTOR * max(self.fastest, self.copy_s) or other_s > STALL_FACTOR * max(
            self.fastest_other, self.copy_s
        )


def noise_warning(floor: float) -> str | None:
    """One line when the A/A floor is high, else None."""
    if floor <= HIGH_NOISE:
        return None
    return (
        f"This machine is noisy: PyTorch against itself moves {floor:.0%}; only differences larger "
        "than that are called faster or slower (close other work, or measure longer)."
    )


def check_sampling(pairs: int | None, precision: float, budget_s: float) -> None:
    """One-line errors for sampling settings that cannot work, before anything runs."""
    from kernel_explorer.errors import KernelExplorerError

    if pairs is not None and (not isinstance(pairs, int) or pairs <= 0):
        raise KernelExplorerError(f"pairs must be a positive whole number, got {pairs!r}.")
    if not 0 < precision < 1:
        raise KernelExplorerError(
            f"precision must be between 0 and 1 (0.05: stop at +-5% of the ratio), got {precision!r}."
        )
    if not 0 < budget_s < math.inf:  # inf could never stop a run whose interval stays wide
        raise KernelExplorerError(
            f"budget_s must be a positive, finite number of seconds (--budget on the command line), "
            f"got {budget_s!r}."
        )
