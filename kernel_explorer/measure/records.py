"""The envelope every measurement record travels in, and the union of the record types.

A measurement emits one `Record` per completed sample: its run, its layer and instance, when, where
from (`Provenance`), and its values, a frozen dataclass whose class names the kind
(`LayerLatency`, `ModelVerdict`, ...). The value classes belong to the kinds of measurement that
yield them (`measure/kinds/`); this module keeps the envelope, `RunEvent` (a run started or ended,
whatever it measures), and derives from the kinds' registry `VALUE_TYPES` (kind name -> class,
what reading a JSONL log goes by) and `Values` (their union). Every consumer reads attributes of
the value classes, so a renamed field fails the tests (and a type checker) by name instead of
leaving a plot silently empty.

Importing a value class from here (`from kernel_explorer.measure.records import LayerVerdict`)
keeps working for every registered class: the names resolve through the registry.
"""

from __future__ import annotations

import functools
import operator
import time
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from kernel_explorer.measure.kinds import RecordValues, value_types
from kernel_explorer.measure.summary import IntervalCell
from kernel_explorer.measure.verdict import Verdict, describe

INFERENCE = "inference"
TRAINING = "training"


class SpeedupSummary:
    """What a speed verdict record reads as: `3.21x [3.10, 3.35] faster` (the inventory's and the
    dashboard's line), the verdict's words, how many pairs stalled.

    Shared by the verdict records of the layer and the model kinds (`LayerVerdict`, `ModelVerdict`).
    Every number here was derived by `measure.comparison.Comparison`; a record only stores them, and
    its text is `IntervalCell`'s, the one text of an interval.
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
        interval = IntervalCell(self.speedup, self.speedup_low, self.speedup_high, "x", self.confidence)
        text = f"{interval.bounds()} {self.verdict}{interval.caveat()}"
        if not getattr(self, "kernel_on", True):
            text = f"kernel off: PyTorch against itself {text}"
        return text

    @property
    def stalled_note(self) -> str:
        """How many pairs the machine stalled (left out of the numbers), or "" when none did."""
        pairs = getattr(self, "pairs", "?")
        return f"{self.stalled} of {pairs} pairs stalled by the machine, left out" if self.stalled else ""


@dataclass(frozen=True)
class RunEvent:
    """A run started, finished, was cancelled or failed."""

    kind: ClassVar[str] = "run"
    event: str  # started, finished, cancelled, failed
    detail: str = ""


def _value_types() -> dict[str, type[RecordValues]]:
    """Every record class by kind name: the kinds' (`measure/kinds/`) and the run events."""
    return {**value_types(), RunEvent.kind: RunEvent}


def __getattr__(name: str) -> Any:
    """`VALUE_TYPES`, `Values` and every registered record class by its class name, derived from
    the kinds' registry when first asked (the kinds import this module: they cannot be read at its
    import). Dunder names are not record classes: the import system asks for `__path__`."""
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "VALUE_TYPES":
        return _value_types()
    if name == "Values":
        return functools.reduce(operator.or_, _value_types().values())
    found = {cls.__name__: cls for cls in value_types().values()}.get(name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return found


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
    values: Any  # a value class of `VALUE_TYPES` (typed `Values` where it is read)
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
        types = _value_types()
        if kind not in types:
            raise ValueError(f"unknown record kind {kind!r}; known: {', '.join(types)}")
        if "verdict" in fields:  # written as its text; older logs wrote the reason into it
            fields["verdict"] = Verdict.parse(fields["verdict"])
        for listed in ("notes", "kernels_on"):  # tuples, written to JSON as lists
            if listed in fields:
                fields[listed] = tuple(fields[listed])
        values = types[kind](**fields)
        provenance = data.get("provenance")
        if provenance is not None:
            shape = provenance.get("shape")
            provenance = Provenance(**{**provenance, "shape": None if shape is None else tuple(shape)})
        return cls(data["run_id"], values, data.get("layer"), data.get("instance"), data["time"], provenance)
