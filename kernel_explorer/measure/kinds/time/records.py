"""The records of a layer's speed against PyTorch: timed pairs, A/A pairs, and the verdict.

Built by the layer comparisons (`measure/layer_comparison.py`, `measure/layer_training.py`,
`measure/live.py`); read by the time kind's summary (`kinds/time/__init__.py`), the live plots and
the inventory. One class per kind of value; `mode` tells a training comparison's records
(forward + backward) from an inference one's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernel_explorer.measure.records import INFERENCE, SpeedupSummary
from kernel_explorer.measure.verdict import Verdict


@dataclass(frozen=True)
class LayerLatency:
    """One interleaved pair of timings of an instance: PyTorch against what runs now. In `mode`
    "training" each side runs the forward on the captured inputs (leaves that require grad where the
    model's own forward had them require grad) and the backward of a fixed upstream gradient."""

    kind: ClassVar[str] = "layer_latency"
    pytorch_s: float
    kernel_s: float
    speedup: float  # pytorch_s / kernel_s, of this one pair
    kernel_on: bool = True  # False: the instance ran PyTorch (a PyTorch-vs-PyTorch pair)
    repeat: int = 1  # calls per timed block
    mode: str = INFERENCE  # "inference" (forward) or "training" (forward + backward)
    stalled: bool = False  # a side waited for the machine (a scheduler slice): see stats.StallWatch


@dataclass(frozen=True)
class LayerCalibration:
    """One A/A pair: PyTorch against PyTorch, timed exactly like a kernel pair (the noise floor)."""

    kind: ClassVar[str] = "layer_calibration"
    first_s: float
    second_s: float
    ratio: float  # first_s / second_s: 1.0 when nothing changed, give or take the machine's noise
    repeat: int = 1
    mode: str = INFERENCE


@dataclass(frozen=True)
class _VerdictFields(SpeedupSummary):
    """The fields a layer comparison concludes with (inference or training)."""

    pairs: int
    instances: int
    speedup: float  # median of the per-pair speedups
    speedup_low: float  # 95% interval of that median (see measure/stats.py)
    speedup_high: float
    confidence: float  # the interval's real coverage (below 0.95 with fewer than 6 pairs)
    noise_floor: float  # relative: PyTorch against itself moved this much (A/A)
    verdict: Verdict  # faster, slower, no difference we can detect here, not measurable here
    accuracy: str  # bitwise equal, rounds differently (as accurate...), less accurate, ...
    stopped_by: str  # pairs (the count asked for), precision (the interval), budget (the time)
    pytorch_s: float = 0.0  # median seconds per call of PyTorch, over the pairs
    kernel_s: float = 0.0  # median seconds per call of the other side
    kernel_on: bool = True  # False: the instances ran PyTorch, the pairs were A/A
    notes: tuple[str, ...] = ()  # plausibility: look twice
    across_low: float | None = None  # the interval widened by the floor (None: an older record)
    across_high: float | None = None
    stalled: int = 0  # pairs where the machine stalled a side
    mode: str = INFERENCE


@dataclass(frozen=True)
class LayerVerdict(_VerdictFields):
    """What a layer comparison concluded: the speedup's interval, the noise floor, the verdicts.

    In `mode` "training" the speedup is of forward+backward, `accuracy` judges the gradients
    (inputs and weights) of both sides against float64, and `notes` carry why no kernel ran when
    the layer's kernel refuses training mode.
    """

    kind: ClassVar[str] = "layer_verdict"
