"""Kernels side by side: every candidate of one layer in one table, the one running now marked.

Choosing between kernels for a layer is what the explorer is for, and a reader who sees one SiLU
number cannot tell two SiLU kernels apart. Here each candidate of the layer on this device is one
row: its speedup against PyTorch with its 95% interval and verdict (its latest measured run), its
accuracy against float64, its peak memory per call once `compare(..., measure="memory")` measured
it, and its state here; PyTorch, the reference every number is taken against, is the first row.
Every number is a cell of the time or memory kind's own summary (`measure/kinds/`), picked by the
candidate that ran (the records' provenance names it), so this table and theirs never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.summary import Column, IntervalCell, NumberCell, Summary

if TYPE_CHECKING:
    from kernels import Mode

    from kernel_explorer.catalog.availability import Availability
    from kernel_explorer.inspect.running import RunningNow
    from kernel_explorer.measure.log import ResultLog

TITLE = "Kernels side by side for {layer}: each against PyTorch, 95% intervals"

#: what marks the row that runs now, in every form (text, lines, HTML)
NOW = "▶"

COLUMNS = (
    Column("now", "runs now", line="{}"),
    Column("candidate", "candidate", what=True),
    Column("source", "source", what=True, line=" [{}]"),
    Column("speedup", "speedup [95% interval]", "interval"),
    Column("verdict", "verdict", "verdict", line=" {}"),
    Column("accuracy", "accuracy against float64"),
    Column("error", "error vs float64", "number", line="error vs float64 {}"),
    Column("memory", "peak memory per call", "interval", line="peak memory per call {}"),
    Column("state", "state here"),
    Column("run_id", "run", line="from {}"),
)

PYTORCH = "PyTorch"


def side_by_side(
    layer: str,
    found: Sequence[tuple[Any, Availability]],
    running: Sequence[RunningNow],
    results: ResultLog,
    *,
    device: str,
    mode: Mode | None = None,
) -> Summary:
    """The side-by-side table of `layer`: PyTorch, then each candidate `found` for `device` (with
    where it stands here), its numbers from its latest run in `results`; `running` marks the rows
    that run now. A candidate never measured reads "-" and a note says how to measure it."""
    time_rows = _time_rows(results, layer)
    memory_rows = _memory_rows(results, layer)
    latest = _latest_runs(results, layer)
    rows: list[dict[str, object]] = []
    extra: list[dict[str, object]] = []
    total = len(running)

    base = time_rows[-1] if time_rows else None
    memory_base = memory_rows[-1] if memory_rows else None
    off = sum(not now.is_kernel for now in running)
    rows.append(
        {
            "now": _now(off, total),
            "candidate": PYTORCH,
            "source": "torch",
            "verdict": None,
            "accuracy": "the reference" if base is not None else None,
            "error": _error(base, "pytorch_err64"),
            "memory": memory_base[0].get("pytorch_bytes") if memory_base is not None else None,
            "state": "always runs",
            "run_id": base[0].get("run_id") if base is not None else None,
        }
    )
    extra.append({"label": PYTORCH, "running": off})
    unmeasured: list[str] = []
    elsewhere = 0
    for candidate, availability in found:
        if getattr(candidate, "pytorch", False):  # attention's eager and sdpa: PyTorch, the first row
            continue
        if getattr(candidate, "device", device) != device:
            elsewhere += 1
            continue
        label = candidate.label
        on = sum(now.is_kernel and now.candidate == label for now in running)
        measured = _row_of(time_rows, latest.get(label), label)
        memory = next((r for r in reversed(memory_rows) if r[0].get("kernel") == label), None)
        name = getattr(candidate, "short_name", "") or label.split(" (", 1)[0]
        if measured is None and availability.state.usable:
            unmeasured.append(name)
        cells, data = measured if measured is not None else ({}, {})
        rows.append(
            {
                "now": _now(on, total),
                "candidate": name,
                "source": candidate.source,
                "speedup": cells.get("speedup"),
                "verdict": cells.get("verdict"),
                "accuracy": cells.get("accuracy"),
                "error": _error(measured, "kernel_err64"),
                "memory": memory[0].get("kernel_bytes") if memory is not None else None,
                "state": availability.state.value,
                "run_id": cells.get("run_id"),
            }
        )
        extra.append(
            {
                "label": label,
                "running": on,
                "usable": availability.state.usable,
                "reason": availability.details,
                "kernel": cells.get("kernel"),
                "speedup_text": _text(cells.get("speedup")),
                **{k: v for k, v in data.items() if k in ("kernel_err64", "pytorch_err64", "pairs")},
            }
        )
    notes = _notes(layer, unmeasured, bool(memory_rows), elsewhere, device)
    return Summary(
        "side_by_side",
        TITLE.format(layer=layer),
        COLUMNS,
        tuple(rows),
        notes=notes,
        extra=tuple(extra),
        about=(
            "One row per kernel of the layer on this device: its latest run's speedup against PyTorch "
            "(95% interval) and verdict, its error against a float64 run beside PyTorch's, its peak "
            f"memory per call once measured, and where it stands here; {NOW} marks what runs now."
        ),
    )


def _now(count: int, total: int) -> str:
    if not count:
        return ""
    return f"{NOW} all {total}" if count == total else f"{NOW} {count} of {total}"


Row = tuple[Mapping[str, object], Mapping[str, object]]  # (cells, data) of a kind's summary row


def _rows(summary: Summary) -> list[Row]:
    extra = list(summary.extra) + [{}] * (len(summary.rows) - len(summary.extra))
    return list(zip(summary.rows, extra, strict=True))


def _time_rows(results: ResultLog, layer: str) -> list[Row]:
    """The time kind's inference rows of `layer`, in log order."""
    return [r for r in _rows(results.summary("time")) if r[0].get("layer") == layer and not r[0].get("mode")]


def _memory_rows(results: ResultLog, layer: str) -> list[Row]:
    """The memory kind's per-call rows of `layer` (its `kernel` is the candidate's label)."""
    if not results.records("layer_memory"):
        return []
    return [
        r
        for r in _rows(results.summary("memory"))
        if r[0].get("layer") == layer and r[0].get("measure") == "peak per call"
    ]


def _latest_runs(results: ResultLog, layer: str) -> dict[str, tuple[str, str, str]]:
    """Per candidate label: (run, kernel id, code path) of the last pair that ran it on `layer`
    (the layer's pairs picked out by array first: a long Run holds hundreds of thousands)."""
    import numpy as np

    columns = results.columns("layer_latency")
    found: dict[str, tuple[str, str, str]] = {}
    for at in np.flatnonzero(columns["layer"] == layer)[::-1]:  # the latest first
        label = columns["candidate"][at]
        if label and columns["kernel_on"][at] and label not in found:
            kernel_id, isa = columns["kernel_id"][at], columns["isa"][at]
            found[str(label)] = (str(columns["run_id"][at]), str(kernel_id or ""), str(isa or ""))
    return found


def _row_of(rows: Sequence[Row], latest: tuple[str, str, str] | None, label: str) -> Row | None:
    """The time row of the run `latest` names for the candidate `label`: the run's only row of the
    layer, or the one its kernel column names (`time.per_kernel`: id, id@path, id (label))."""
    if latest is None:
        return None
    run_id, kernel_id, isa = latest
    mine = [r for r in rows if r[0].get("run_id") == run_id]
    if len(mine) == 1 and not mine[0][0].get("kernel"):
        return mine[0]
    for row in mine:
        kernel = str(row[0].get("kernel") or "")
        if kernel in (kernel_id, f"{kernel_id}@{isa}") or (
            kernel.startswith(kernel_id) and kernel.endswith(f"({label})")
        ):
            return row
    return None


def _text(cell: object) -> str | None:
    return cell.text() if isinstance(cell, IntervalCell) else None


def _error(row: Row | None, key: str) -> NumberCell | None:
    value = row[1].get(key) if row is not None else None
    return NumberCell(float(value)) if isinstance(value, int | float) else None


def _notes(layer: str, unmeasured: list[str], memory: bool, elsewhere: int, device: str) -> tuple[str, ...]:
    notes = []
    if unmeasured:
        words = ", ".join(repr(n) for n in unmeasured)
        notes.append(
            f"not measured yet: {', '.join(unmeasured)}; explorer.compare({layer!r}, candidates=[{words}]) "
            "measures them side by side in one run"
        )
    if not memory:
        notes.append(f"memory: explorer.compare({layer!r}, measure='memory', candidates=[...]) measures it")
    if elsewhere:
        notes.append(f"{elsewhere} more candidates are mapped for devices other than {device}")
    return tuple(notes)
