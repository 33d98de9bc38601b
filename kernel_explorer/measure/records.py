"""Measurement records: one typed value class per kind, so a renamed field fails loudly.

A measurement emits one `Record` per completed sample. What the sample holds is a frozen dataclass
(`LayerLatency`, `LayerDivergence`, ...) whose class names the kind; every consumer (the summary,
the plots, the report, the magics) reads attributes, so renaming a field fails type checking and
the tests instead of leaving a plot silently empty.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from kernel_explorer.measure.verdict import Verdict, describe

INFERENCE = "inference"
TRAINING = "training"


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


class _SpeedupSummary:
    """One line for a verdict: `3.21x [3.10, 3.35] faster` (what tables and the CLI print).

    Every number here was derived by `measure.comparison.Comparison`; a record only stores them.
    """

    speedup: float
    speedup_low: float
    speedup_high: float
    confidence: float
    verdict: Verdict
    across_low: float | None
    across_high: float | None
    stalled: int

    @property
    def across_runs(self) -> tuple[float | None, float | None]:
        """The interval widened by the noise floor: what another run here may give."""
        return self.across_low, self.across_high

    def __post_init__(self) -> None:
        # a verdict given as its text (older code, a hand-made record) is held as its member
        object.__setattr__(self, "verdict", Verdict.parse(self.verdict))

    @property
    def measurable(self) -> bool:
        """False when the machine stalled the pairs: the verdict then says so, and no number is shown."""
        return self.verdict is not Verdict.NOT_MEASURABLE

    @property
    def verdict_text(self) -> str:
        """The verdict as a reader sees it (a stalled comparison says how many pairs stalled)."""
        return describe(self.verdict, stalled=self.stalled, pairs=getattr(self, "pairs", 0))

    @property
    def summary(self) -> str:
        if not self.measurable:
            return self.verdict_text
        text = f"{self.speedup:.2f}x [{self.speedup_low:.2f}, {self.speedup_high:.2f}] {self.verdict}"
        if not getattr(self, "kernel_on", True):
            text = f"kernel off: PyTorch against itself {text}"
        if self.confidence < 0.95 - 1e-9:
            text += f" (only {self.confidence:.0%} sure: too few pairs)"
        return text

    @property
    def stalled_note(self) -> str:
        """How many pairs the machine stalled (left out of the numbers), or "" when none did."""
        pairs = getattr(self, "pairs", "?")
        return f"{self.stalled} of {pairs} pairs stalled by the machine, left out" if self.stalled else ""


@dataclass(frozen=True)
class _VerdictFields(_SpeedupSummary):
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


@dataclass(frozen=True)
class _DivergenceFields:
    """How one kernel tensor differs from PyTorch's, and each from float64 (see numerics/divergence.py)."""

    dtype: str
    elements: int
    bitwise_equal: float  # share of output elements that are bitwise equal
    allclose: bool
    max_abs: float | None = None
    max_rel: float | None = None
    mean_abs: float | None = None
    max_ulp: int | None = None
    mean_ulp: float | None = None
    kernel_err64: float | None = None  # max abs error of the kernel against float64
    pytorch_err64: float | None = None  # max abs error of PyTorch against float64
    reference_max_abs: float | None = None  # largest magnitude of the float64 output (sets 1 ULP)
    kernel_on: bool = True


@dataclass(frozen=True)
class LayerDivergence(_DivergenceFields):
    """How an instance's kernel output differs from PyTorch's, and each against float64."""

    kind: ClassVar[str] = "layer_divergence"


@dataclass(frozen=True)
class GradientDivergence(_DivergenceFields):
    """One gradient of an instance (an input's or a weight's): kernel and PyTorch, each against float64."""

    kind: ClassVar[str] = "gradient_divergence"
    gradient: str = ""  # "input 0", "weight", ...: what the gradient is taken with respect to


@dataclass(frozen=True)
class LayerDeterminism:
    """How often repeated calls give bitwise the same output."""

    kind: ClassVar[str] = "layer_determinism"
    runs: int
    kernel_identical: float
    pytorch_identical: float
    pytorch_deterministic_identical: float
    kernel_on: bool = True


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
class ModelVerdict(_SpeedupSummary):
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
class TimeShare:
    """One category's exclusive share of a profiled forward (see measure/breakdown.py)."""

    kind: ClassVar[str] = "time_share"
    phase: str  # "prefill" or "decode"
    tokens: int  # tokens in the forward (1 for a decode step)
    category: str  # a kernel layer name ("attention" too), "Linear (matmul)", "embedding", "rest"
    seconds: float  # median exclusive seconds in that category
    share: float  # of the forward's median time; a phase's shares add to 1
    hook_overhead: float  # how much slower the hooked forward was than a plain one (0.02: 2%)


@dataclass(frozen=True)
class ModelAgreement:
    """Logits and greedy generation of the model as switched against all-PyTorch."""

    kind: ClassVar[str] = "model_agreement"
    logits_max_abs: float
    kl: float
    top1_agreement: float
    greedy_tokens: int
    first_divergence: int | None  # first generated position that differs; None: identical
    # what the kernel side is held against: "PyTorch" (eager, the prompt's logits), or under
    # compare_model(compiled=True) "compiled PyTorch" / "eager PyTorch" (the greedy steps' logits)
    reference: str = "PyTorch"


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


@dataclass(frozen=True)
class RunEvent:
    """A run started, finished, was cancelled or failed."""

    kind: ClassVar[str] = "run"
    event: str  # started, finished, cancelled, failed
    detail: str = ""


@dataclass(frozen=True)
class KernelsBenchmark:
    """One workload of a `kernels benchmark` JSON file: that tool's protocol, not the explorer's.

    The kernel alone, timed `iterations` times after warm-up on the benchmark script's synthetic
    inputs: mean and spread of its own times. No interleaved PyTorch pairs on the model's real
    activations, no A/A floor, no raw samples: it reads beside a `LayerVerdict`, never as one.
    """

    kind: ClassVar[str] = "kernels_benchmark"
    workload: str
    mean_s: float
    std_s: float
    min_s: float
    max_s: float
    iterations: int
    q1_s: float | None = None
    q3_s: float | None = None
    outliers: int = 0
    verified: bool | None = None  # the script's verify against its reference (None: none)
    kernel_commit: str = ""
    script: str = ""
    protocol: str = "kernels benchmark: the kernel alone, mean and std of its calls, synthetic inputs"


Values = (
    LayerLatency
    | LayerCalibration
    | LayerVerdict
    | LayerDivergence
    | LayerDeterminism
    | ModelPrefill
    | ModelDecode
    | ModelVerdict
    | TimeShare
    | ModelAgreement
    | CompileTime
    | ModelThroughput
    | GradientDivergence
    | TrainingAgreement
    | ModelPair
    | RunEvent
    | KernelsBenchmark
)

#: kind name -> value class
VALUE_TYPES: dict[str, type[Values]] = {
    cls.kind: cls
    for cls in (
        LayerLatency,
        LayerCalibration,
        LayerVerdict,
        LayerDivergence,
        LayerDeterminism,
        ModelPrefill,
        ModelDecode,
        ModelVerdict,
        TimeShare,
        ModelAgreement,
        CompileTime,
        ModelThroughput,
        GradientDivergence,
        TrainingAgreement,
        ModelPair,
        RunEvent,
        KernelsBenchmark,
    )
}


#: kinds of older logs -> the kind that holds them now, with mode "training"
_TRAINING_KINDS = {
    "training_latency": "layer_latency",
    "training_calibration": "layer_calibration",
    "training_verdict": "layer_verdict",
}


@dataclass(frozen=True)
class Provenance:
    """Where a number comes from: what ran, on what, with which versions. Exported with the data."""

    dtype: str | None = None
    shape: tuple[int, ...] | None = None  # of the first tensor input
    threads: int = 0
    isa: str | None = None  # the kernel's code path (bundled kernels: avx512bf16, avx512, avx2, ...)
    kernel_id: str | None = None
    candidate: str | None = None  # the label of the candidate switched on ("bundled/x@avx2:Layer")
    variant: str | None = None
    torch: str = ""
    kernels: str = ""
    machine: str = ""  # CPU model (and accelerator, where one is used)
    host: str = ""  # the machine's name: its hostname, or the name a sweep gives its node
    hardware: str = ""  # its identity: CPU or GPU model, ISA or compute capability, torch build
    model: str = ""  # the model's identity: class and a fingerprint of its config and weights


@dataclass(frozen=True)
class Record:
    """One completed sample (or a run event) of one run, for one layer instance or the model."""

    run_id: str
    values: Values
    layer: str | None = None
    instance: str | None = None
    time: float = field(default_factory=time.time)
    provenance: Provenance | None = None

    @property
    def kind(self) -> str:
        """The value class's kind name ("layer_latency", ...)."""
        return self.values.kind

    def to_dict(self) -> dict[str, Any]:
        """A flat, JSON-ready dict (the JSON lines format): kind, ids, and the values as a dict."""
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "layer": self.layer,
            "instance": self.instance,
            "values": asdict(self.values),
            "time": self.time,
            "provenance": None if self.provenance is None else asdict(self.provenance),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        """The inverse of `to_dict`; an unknown kind or field raises with the name."""
        kind = data["kind"]
        fields = dict(data["values"])
        if kind in _TRAINING_KINDS:  # written before the twins were folded: the mode is a field now
            kind, fields = _TRAINING_KINDS[kind], {**fields, "mode": TRAINING}
        if kind not in VALUE_TYPES:
            raise ValueError(f"unknown record kind {kind!r}; known: {', '.join(VALUE_TYPES)}")
        if "verdict" in fields:  # written as its text; older logs wrote the reason into it
            fields["verdict"] = Verdict.parse(fields["verdict"])
        for listed in ("notes", "kernels_on"):  # tuples, written to JSON as lists
            if listed in fields:
                fields[listed] = tuple(fields[listed])
        values = VALUE_TYPES[kind](**fields)
        provenance = data.get("provenance")
        if provenance is not None:
            shape = provenance.get("shape")
            provenance = Provenance(**{**provenance, "shape": None if shape is None else tuple(shape)})
        return cls(data["run_id"], values, data.get("layer"), data.get("instance"), data["time"], provenance)
