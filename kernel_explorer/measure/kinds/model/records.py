"""The records of the whole model as switched against all-PyTorch: prefill and decode pairs, whole-
model pairs of other measures (a training step, compiled prefill), their verdicts, compile seconds,
a training step's loss and gradient agreement, and the live run's throughput.

Built by `measure/model_comparison.py`, `measure/model_modes.py` and `measure/live.py`; read by the
model kind's summary (`kinds/model/__init__.py`) and the live plots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernel_explorer.measure.records import SpeedupSummary
from kernel_explorer.measure.verdict import Verdict


@dataclass(frozen=True)
class ModelPrefill:
    """One interleaved pair of prefill timings: the model as switched against all-PyTorch."""

    kind: ClassVar[str] = "model_prefill"
    tokens: int
    pytorch_s: float
    kernel_s: float
    speedup: float
    stalled: bool = False  # a side waited for the machine (stats.StallWatch): left out of the verdict


@dataclass(frozen=True)
class ModelDecode:
    """One interleaved pair of greedy decode speeds."""

    kind: ClassVar[str] = "model_decode"
    tokens: int
    pytorch_tok_s: float
    kernel_tok_s: float
    speedup: float
    stalled: bool = False  # a side waited for the machine (stats.StallWatch): left out of the verdict


@dataclass(frozen=True)
class ModelVerdict(SpeedupSummary):
    """What a model comparison concluded for one measure (prefill at a length, or decode)."""

    kind: ClassVar[str] = "model_verdict"
    measure: str  # "prefill" or "decode"
    tokens: int
    pairs: int
    speedup: float  # median of the per-pair speedups
    speedup_low: float
    speedup_high: float
    confidence: float
    noise_floor: float
    verdict: Verdict
    across_low: float | None = None
    across_high: float | None = None
    stalled: int = 0
    kernels_on: tuple[str, ...] = ()  # layers with a kernel on during the measure (what Amdahl uses)


@dataclass(frozen=True)
class CompileTime:
    """Seconds one side of `compare_model(compiled=True)` spent on a graph's first call: tracing,
    Inductor's code generation and that one run (each shape bucket compiles once, then is reused).
    What this process paid: Inductor's on-disk cache makes a graph compiled before (same model,
    shapes and versions) come back in about a second."""

    kind: ClassVar[str] = "compile_time"
    side: str  # "compiled + kernels" or "compiled PyTorch"
    graph: str  # "prefill 128" (a timed prefill length), "prompt 16" (decode's prompt), "decode"
    seconds: float


@dataclass(frozen=True)
class ModelThroughput:
    """Tokens per second of one forward over the captured prompt, as switched now."""

    kind: ClassVar[str] = "model_throughput"
    tokens_s: float
    instances_on: int


@dataclass(frozen=True)
class TrainingAgreement:
    """One training step (forward, shifted-token cross-entropy, backward) as switched vs all-PyTorch."""

    kind: ClassVar[str] = "training_agreement"
    tokens: int
    pytorch_loss: float
    kernel_loss: float
    loss_abs_diff: float
    parameters: int  # parameters with a gradient on both sides
    worst_parameter: str  # the parameter whose gradient differs most (relative L2 error)
    worst_rel_err: float  # ||g_kernel - g_pytorch|| / ||g_pytorch|| of that parameter
    worst_max_abs: float
    min_cosine: float  # the lowest cosine similarity between the two gradients of any parameter
    median_rel_err: float
    instances_on: int  # instances running a kernel during the step


@dataclass(frozen=True)
class ModelPair:
    """One interleaved pair of whole-model timings of a `measure` ("training step", "compiled prefill")."""

    kind: ClassVar[str] = "model_pair"
    measure: str
    tokens: int
    pytorch_s: float
    kernel_s: float
    speedup: float
    stalled: bool = False  # a side waited for the machine (stats.StallWatch): left out of the verdict
