"""What a kind of measurement declares: its records, what it runs, and how its records read.

A kind is the unit of extension of the measurements: a module (or a folder, when measurements
elsewhere in `measure/` build its records) in `measure/kinds/` that defines its frozen record
classes, a `plan` (the measurements `Explorer.compare(..., measure=<name>)` starts) and `summarize`
(its records as one `Summary`, the one source of every number a view shows), and names them in a
module-level `KIND`. The registry (`measure/kinds/__init__.py`) finds it; the record union, JSONL
reading, the public re-exports and every view derive from the registry, so a new kind costs its
own module and its tests.

This module imports nothing of the package but `summary` (for types) and `errors`: the record
envelope (`measure/records.py`) derives its union from the registry, so the registry must not
depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from kernel_explorer.measure.summary import Summary

#: a measurement: run id -> the records it yields (`measure/runner.py` runs them)
Measurement = Callable[[str], Iterator[Any]]

#: the keyword options `Explorer.compare` always passes (its sampling arguments); a kind reads the
#: ones it uses and may take more (`LayerRequest.check_options`)
SAMPLING_OPTIONS = ("pairs", "precision", "budget_s", "calibration_pairs", "determinism_runs")


class RecordValues(Protocol):
    """A record's values: a frozen dataclass whose class names its kind."""

    kind: ClassVar[str]


class RecordSource(Protocol):
    """What a summary reads its records from: a `ResultLog` (records are `measure.records.Record`)."""

    def records(self, kind: str | None = None, run_id: str | None = None) -> Sequence[Any]: ...


def records_of(source: RecordSource, *classes: type[RecordValues], run_id: str | None = None) -> list[Any]:
    """The records of `source` whose values are one of `classes`, class by class, each in log order."""
    return [r for cls in classes for r in source.records(cls.kind, run_id) if isinstance(r.values, cls)]


@dataclass(frozen=True)
class LayerRequest:
    """What `Explorer.compare(*names, measure=...)` asks of a kind: which layers, on which inputs.

    `board` is the explorer's switchboard (typed loosely: a kind reaches it only through the
    methods measurements call); `inputs(grad)` gives the captured inputs, read when the run
    starts; `options` carries the call's keyword arguments: the sampling ones
    (`SAMPLING_OPTIONS`) always, and any others the caller gave for this kind.
    """

    board: Any
    inputs: Callable[[bool], Any]
    names: Sequence[str]
    mode: str = "inference"
    candidates: Sequence[str] | None = None
    instances: str | list[str] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    measure: str = ""  # the kind's name, for its error messages

    def check_options(self, *taken: str) -> None:
        """One line naming an option this kind does not take (beyond the sampling ones)."""
        from kernel_explorer.errors import KernelExplorerError

        unknown = sorted(set(self.options) - set(SAMPLING_OPTIONS) - set(taken))
        if unknown:
            offered = ", ".join([*SAMPLING_OPTIONS, *taken])
            raise KernelExplorerError(
                f"compare(measure={self.measure!r}) takes no option {', '.join(map(repr, unknown))}; "
                f"it takes: {offered}."
            )

    def each_candidate(self, name: str, measure: Measurement) -> list[Measurement]:
        """`measure` once per candidate of `name` that `candidates` names (sources such as "bundled"
        and "peer", or labels), that candidate switched on while it runs and put back after; once,
        as the layer is, when no candidate is named. A word that names none: one line with the
        layer's candidates."""
        from kernel_explorer.errors import KernelExplorerError

        if not self.candidates:
            return [measure]
        door = self.board.doors[name]
        found = list(dict.fromkeys(c for word in self.candidates for c in door.matching(word)))
        if not found:
            known = ", ".join(c.label for c in door.candidates()) or "none"
            raise KernelExplorerError(
                f"No candidate of {name!r} matches {list(self.candidates)}; its candidates: {known}"
            )
        return [self._switched(name, chosen, measure) for chosen in found]

    def _switched(self, name: str, chosen: Any, measure: Measurement) -> Measurement:
        board, instances, mode = self.board, self.instances, self.mode

        def run(run_id: str) -> Iterator[Any]:
            switch = lambda: board.on(name, instances, mode=mode, candidate=chosen)  # noqa: E731
            with board.holding(switch, keep_others=True):
                yield from measure(run_id)

        return run


@dataclass(frozen=True)
class Kind:
    """One kind of measurement (see the module doc)."""

    name: str  # what `compare(measure=...)`, `--measure` and the report call it: "time", "memory"
    title: str  # a heading a person reads: "Speed against PyTorch", "Memory against PyTorch"
    records: tuple[type[RecordValues], ...]  # the record classes this kind yields
    summarize: Callable[[RecordSource], Summary]
    plan: Callable[[LayerRequest], list[Measurement]] | None = None  # None: not started by compare
    how: str = ""  # for a kind `compare` does not start: what does ("Explorer.compare_model()")
    order: int = 50  # where its section stands in the report and a run's answer (lower: first)
    #: for a progress line: the records that close one step (a layer, a measure at a length), and
    #: those of one timed sample (a pair)
    concludes: tuple[type[RecordValues], ...] = ()
    samples: tuple[type[RecordValues], ...] = ()
    #: its plot for the report and a notebook (a plotly figure from its summary; plotly imported lazily)
    figure: Callable[[Summary], Any] | None = None


def candidate_name(key: tuple[str, str, str], keys: Collection[tuple[str, str, str]]) -> str:
    """How a summary names one candidate (kernel id, code path, label) among the `keys` one group
    measured: its kernel id, `@path` where that kernel ran several paths, and `(label)` where that
    still repeats. One rule for every kind that splits a row by candidate (time, values)."""
    kid, isa, label = key
    same = [k for k in keys if k[:2] == (kid, isa)]
    name = kid if sum(k[0] == kid for k in keys) == 1 else f"{kid}@{isa}"
    return name + (f" ({label})" if len(same) > 1 else "")
