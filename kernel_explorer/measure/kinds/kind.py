"""What a kind of measurement declares: its records, what it runs, and how its records read.

A kind is the unit of extension of the measurements: a module in `measure/kinds/` that defines its
frozen record classes, a `plan` (the measurements `Explorer.compare(..., measure=<name>)` starts)
and `summarize` (its records as one `Summary`, the one source of every number a view shows), and
names them in a module-level `KIND`. The registry (`measure/kinds/__init__.py`) finds it; the
record union, JSONL reading, the public re-exports and every view derive from the registry, so a
new kind costs its own module and its tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from kernel_explorer.measure.capture import CapturedInputs
    from kernel_explorer.measure.records import Record
    from kernel_explorer.measure.runner import Measurement
    from kernel_explorer.measure.summary import Summary


class RecordValues(Protocol):
    """A record's values: a frozen dataclass whose class names its kind."""

    kind: ClassVar[str]


class RecordSource(Protocol):
    """What a summary reads its records from (a `ResultLog`, or a list wrapped as one)."""

    def records(self, kind: str | None = None, run_id: str | None = None) -> list[Record]: ...


@dataclass(frozen=True)
class LayerRequest:
    """What `Explorer.compare(*names, measure=...)` asks of a kind: which layers, on which inputs.

    `board` is the explorer's switchboard (typed loosely: measure does not import switching);
    `inputs(grad)` gives the captured inputs, read when the run starts; `options` carries the
    call's keyword arguments that the kind takes (pairs, precision, budget_s, lengths, ...).
    """

    board: Any
    inputs: Callable[[bool], CapturedInputs]
    names: Sequence[str]
    mode: str = "inference"
    candidates: Sequence[str] | None = None
    instances: str | list[str] | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Kind:
    """One kind of measurement (see the module doc)."""

    name: str  # what `compare(measure=...)`, `--measure` and the report call it: "time", "memory"
    title: str  # a heading a person reads: "Speed against PyTorch", "Memory against PyTorch"
    records: tuple[type[RecordValues], ...]  # the record classes this kind yields
    summarize: Callable[[RecordSource], Summary]
    plan: Callable[[LayerRequest], list[Measurement]] | None = None  # None: not started by compare
