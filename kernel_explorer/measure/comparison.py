"""One comparison's pairs, and everything a view says about them, derived in one place.

A `Comparison` owns the interleaved pairs of one layer (or one model measure) in one run, its A/A
pairs and its divergences, and derives the median speedup, its 95% interval, the interval across
runs, the A/A noise floor, the verdict, how many pairs the machine stalled, and the accuracy
verdict. The measurement builds one to close a layer (`LayerVerdict`), the time kind's summary
(`measure/kinds/time`) one per run and layer from the log, the live plots one per layer so far:
every view reads the same numbers because they come from the same arithmetic (`measure/stats.py`
holds the primitives; nothing else calls them).

A pair counts toward a kernel's speedup only when the instance ran a kernel; a comparison whose
pairs all ran PyTorch describes PyTorch against itself (`kernel_on` False). A pair the machine
stalled (`stats.StallWatch`: a side waited a scheduler slice) measures the machine, not the kernel:
it is counted, and left out of the median and the interval. When half the pairs or more stalled,
or the interval still reaches toward 0 (its low end under 1% of its median), the comparison is "not
measurable here", not a speed. Stalls are judged per side (PyTorch's calls against PyTorch's, the
kernel's against its own): a kernel 100 times slower than PyTorch is "slower, 0.01x", not a stall.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.stats import (
    Interval,
    across_runs,
    noise_floor,
    speed_verdict,
    speedup_interval,
)
from kernel_explorer.measure.verdict import Verdict, describe

if TYPE_CHECKING:
    from kernel_explorer.measure.kinds.time.records import LayerLatency
    from kernel_explorer.measure.kinds.values.records import GradientDivergence, LayerDivergence

KERNEL_OFF = Verdict.KERNEL_OFF
#: an interval whose low end is under 1% of its median measured the machine, not the kernel: stalls
#: pulled it toward 0 (relative to the median, so a kernel 100 times slower still reads 0.01x)
UNMEASURABLE_LOW = 0.01
UNMEASURABLE_SHARE = 0.5  # ... and so did a comparison half of whose pairs stalled (its median would be one)


@dataclass(frozen=True)
class Comparison:
    """The pairs of one comparison and what they say (see the module doc)."""

    all_speedups: tuple[float, ...]  # per pair, in time order: PyTorch time over the other side's
    aa_ratios: tuple[float, ...] = ()  # A/A pairs: PyTorch over PyTorch
    all_pytorch_s: tuple[float, ...] = ()  # per pair, when known
    all_kernel_s: tuple[float, ...] = ()
    stalled: tuple[bool, ...] = ()  # per pair: a side waited for the machine (none when empty)
    kernel_on: bool = True  # False: every pair ran PyTorch on both sides
    divergences: tuple[LayerDivergence | GradientDivergence, ...] = ()
    floor_hint: float = 0.0  # the floor to use without A/A pairs of its own (decode borrows prefill's)

    @classmethod
    def of_pairs(
        cls,
        pairs: Sequence[LayerLatency],
        aa_ratios: Sequence[float] = (),
        divergences: Sequence[LayerDivergence | GradientDivergence] = (),
    ) -> Comparison:
        """From latency pairs: those that ran a kernel when there are any, else all (A/A)."""
        on = [p for p in pairs if p.kernel_on]
        used = on or list(pairs)
        return cls(
            all_speedups=tuple(p.speedup for p in used),
            aa_ratios=tuple(aa_ratios),
            all_pytorch_s=tuple(p.pytorch_s for p in used),
            all_kernel_s=tuple(p.kernel_s for p in used),
            stalled=tuple(p.stalled for p in used),
            kernel_on=bool(on),
            divergences=tuple(divergences),
        )

    @classmethod
    def of_columns(
        cls,
        pairs: Mapping[str, Any],
        aa_ratios: Sequence[float] = (),
        divergences: Sequence[LayerDivergence | GradientDivergence] = (),
    ) -> Comparison:
        """`of_pairs` from latency pairs as columns (`ResultLog.columns("layer_latency")`, or a cut
        of it; empty without pairs), without making a record per pair: the same numbers."""
        import numpy as np

        if not pairs or not len(pairs["speedup"]):
            return cls.of_pairs((), aa_ratios, divergences)
        on = np.asarray(pairs["kernel_on"], dtype=bool)
        used = on if on.any() else np.ones_like(on)
        return cls(
            all_speedups=tuple(pairs["speedup"][used].tolist()),
            aa_ratios=tuple(aa_ratios),
            all_pytorch_s=tuple(pairs["pytorch_s"][used].tolist()),
            all_kernel_s=tuple(pairs["kernel_s"][used].tolist()),
            stalled=tuple(pairs["stalled"][used].tolist()),
            kernel_on=bool(on.any()),
            divergences=tuple(divergences),
        )

    @property
    def pairs(self) -> int:
        """Every pair, stalled ones included."""
        return len(self.all_speedups)

    @property
    def stalled_pairs(self) -> int:
        return sum(self.stalled)

    def _clean(self, values: tuple[float, ...]) -> tuple[float, ...]:
        """`values` of the pairs that did not stall; all of them when every pair stalled."""
        flags = self.stalled or (False,) * len(values)
        kept = tuple(v for v, stalled in zip(values, flags, strict=True) if not stalled)
        return kept or values

    @property
    def speedups(self) -> tuple[float, ...]:
        """The speedups the median and the interval are taken over: the pairs that did not stall."""
        return self._clean(self.all_speedups)

    @functools.cached_property
    def interval(self) -> Interval:
        """The median speedup and its 95% interval over batch medians (`stats.speedup_interval`)."""
        return speedup_interval(self.speedups)

    @property
    def floor(self) -> float:
        """The A/A noise floor (`floor_hint` without A/A pairs)."""
        return noise_floor(self.aa_ratios) if self.aa_ratios else self.floor_hint

    @property
    def across_runs(self) -> tuple[float, float]:
        """The interval widened by the floor: what another run on this machine may give."""
        interval = self.interval
        return across_runs(interval.low, interval.high, self.floor)

    @property
    def measurable(self) -> bool:
        """False when the machine stalled enough pairs to make the interval mean nothing."""
        if not self.stalled_pairs:
            return True
        share = self.stalled_pairs / max(self.pairs, 1)
        interval = self.interval
        return share < UNMEASURABLE_SHARE and interval.low >= UNMEASURABLE_LOW * interval.median

    @property
    def verdict(self) -> Verdict:
        """Faster, slower, no difference we can detect here, or not measurable here (`verdict_text`
        says why)."""
        if not self.measurable:
            return Verdict.NOT_MEASURABLE
        return speed_verdict(self.interval, self.floor)

    @property
    def verdict_text(self) -> str:
        """The verdict as a reader sees it (a stalled comparison says how many pairs stalled)."""
        return describe(self.verdict, stalled=self.stalled_pairs, pairs=self.pairs)

    @property
    def decided(self) -> bool:
        """Whether the verdict is a difference (faster or slower)."""
        return self.verdict.decided

    @property
    def pytorch_median_s(self) -> float:
        return statistics.median(self._clean(self.all_pytorch_s)) if self.all_pytorch_s else 0.0

    @property
    def kernel_median_s(self) -> float:
        return statistics.median(self._clean(self.all_kernel_s)) if self.all_kernel_s else 0.0

    @property
    def accuracy(self) -> str:
        """The accuracy verdict of the divergences against float64 ("not measured" without any)."""
        from kernel_explorer.numerics.divergence import accuracy_verdict

        return accuracy_verdict(self.divergences)

    def fields(self) -> dict[str, float | str | int]:
        """The fields every verdict record shares (`records._SpeedupSummary`), from this comparison."""
        interval = self.interval
        low, high = self.across_runs
        return {
            "pairs": self.pairs,
            "speedup": interval.median,
            "speedup_low": interval.low,
            "speedup_high": interval.high,
            "confidence": interval.confidence,
            "noise_floor": self.floor,
            "verdict": self.verdict,
            "across_low": low,
            "across_high": high,
            "stalled": self.stalled_pairs,
        }

    def notes(self, *, bytes_moved: int, ignores_input: bool) -> tuple[str, ...]:
        """Plausibility notes (measure/plausibility.py) on this comparison's kernel pairs."""
        from kernel_explorer.measure.plausibility import plausibility_notes

        return plausibility_notes(
            self.interval if self.kernel_on else None,
            kernel_s=self.kernel_median_s if self.kernel_on else None,
            bytes_moved=bytes_moved,
            ignores_input=ignores_input,
            pytorch_s=self.pytorch_median_s,
        )
