"""Breakdown: where the model's time goes on PyTorch, and what the measured kernels make of it.

`Explorer.breakdown()` (`measure/breakdown.time_breakdown`) profiles a prefill and a decode step
and logs each category's exclusive share (`TimeShare`): every kernel layer, and what no kernel
covers (Linear, embedding, the rest). The summary takes the last breakdown of a phase and, with the
last measured speedup of each kernel layer (the time kind's verdicts), Amdahl's model speedups: if
the category cost nothing, and with its kernel; a last row predicts the model's speedup with every
measured kernel on (or with the kernels a model run had on: `summarize_phase(on=...)`, what the
model kind's rows compare with).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, ClassVar

from kernel_explorer.measure.kinds.kind import Kind, RecordSource, records_of
from kernel_explorer.measure.summary import Column, NumberCell, Summary, format_number

__all__ = [
    "EMBEDDING",
    "KIND",
    "LINEAR",
    "REST",
    "TimeShare",
    "amdahl",
    "covered_line",
    "latest_shares",
    "predicted",
    "summarize",
    "summarize_phase",
]

#: the categories no kernel layer covers
LINEAR, EMBEDDING, REST = "Linear (matmul)", "embedding", "rest"
UNCOVERED = (LINEAR, EMBEDDING, REST)
PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class TimeShare:
    """One category's exclusive share of a profiled forward (`measure/breakdown.py` measures it)."""

    kind: ClassVar[str] = "time_share"
    phase: str  # "prefill" or "decode"
    tokens: int  # tokens in the forward (1 for a decode step)
    category: str  # a kernel layer name ("attention" too), "Linear (matmul)", "embedding", "rest"
    seconds: float  # median exclusive seconds in that category
    share: float  # of the forward's median time; a phase's shares add to 1
    hook_overhead: float  # how much slower the hooked forward was than a plain one (0.02: 2%)


def amdahl(share: float, speedup: float | None) -> tuple[float, float | None]:
    """(model speedup if the category cost nothing, model speedup with its measured `speedup`)."""
    ceiling = 1.0 / (1.0 - share) if share < 1 else float("inf")
    if speedup is None or speedup <= 0:
        return ceiling, None
    return ceiling, 1.0 / (1.0 - share + share / speedup)


def _latest(source: RecordSource, phase: str) -> list[TimeShare]:
    """The shares of `phase` in the last breakdown run."""
    shares = records_of(source, TimeShare)
    if not shares:
        return []
    last = shares[-1].run_id
    return [r.values for r in shares if r.run_id == last and r.values.phase == phase]


def latest_shares(source: RecordSource, phase: str = "prefill") -> dict[str, float]:
    """Each category's share of the last time breakdown of `phase` (empty before `breakdown()`)."""
    return {found.category: found.share for found in _latest(source, phase)}


def _kernel_speedups(source: RecordSource) -> dict[str, float]:
    """The last measured speedup of each kernel layer (the time kind's verdicts), where measurable."""
    from kernel_explorer.measure.kinds.time import latest_verdicts

    return {name: v.speedup for name, v in latest_verdicts(source).items() if v.measurable}


def predicted(
    source: RecordSource, phase: str = "prefill", on: Collection[str] | None = None
) -> tuple[float, str] | None:
    """Amdahl's model speedup with every measured kernel on (or with the layers `on` only), and
    which layers that is ("with RMSNorm, SiLU on"); None when neither a kernel nor `on` is given."""
    speedups = _kernel_speedups(source)
    shares = sorted(_latest(source, phase), key=lambda found: -found.share)
    measured = [f for f in shares if f.category in speedups and (on is None or f.category in on)]
    if not measured and on is None:
        return None
    rest = 1.0 - sum(f.share for f in measured)
    total = 1.0 / (rest + sum(f.share / speedups[f.category] for f in measured))
    named = ", ".join(f.category for f in measured) or "no measured kernel"
    return total, "every measured kernel on" if on is None else f"with {named} on"


COLUMNS = (
    Column("phase", "phase", what=True, line="{}: "),
    Column("category", "category", what=True),
    Column("share", "share", "number", line="{} of the time"),
    Column("seconds", "time", "number", line=" ({})"),
    Column("kernel_speedup", "kernel speedup", "number", line="kernel {}"),
    Column("model_speedup_if_free", "model if it cost nothing", "number", line="model at most {} if free"),
    Column("model_speedup_predicted", "model predicted", "number", line=", {} with its kernel"),
)

ABOUT = (
    "share: of the forward's time, exclusive; model if it cost nothing: Amdahl's ceiling if that part "
    "cost nothing; model predicted: with its last measured kernel speedup."
)


def summarize_phase(
    source: RecordSource, phase: str = "prefill", on: Collection[str] | None = None
) -> Summary:
    """The last breakdown of `phase`: each category's share and Amdahl's figures, largest first,
    and a last row with the model speedup predicted from the measured kernels (`predicted`)."""
    speedups = _kernel_speedups(source)
    rows: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    for found in sorted(_latest(source, phase), key=lambda found: -found.share):
        speedup = speedups.get(found.category)
        ceiling, with_kernel = amdahl(found.share, speedup)
        rows.append(
            {
                "category": found.category,
                "share": NumberCell(found.share, "share"),
                "seconds": NumberCell(found.seconds, "s"),
                "kernel_speedup": _number(speedup),
                "model_speedup_if_free": NumberCell(ceiling, "x"),
                "model_speedup_predicted": _number(with_kernel),
            }
        )
        extra.append({"ms": found.seconds * 1e3})
    total = predicted(source, phase, on) if rows else None
    if total is not None:
        speedup, label = total
        share = sum(
            f.share
            for f in _latest(source, phase)
            if f.category in speedups and (on is None or f.category in on)
        )
        rows.append(
            {
                "category": label,
                "share": NumberCell(share, "share"),
                "model_speedup_predicted": _number(speedup),
            }
        )
        extra.append({})
    return Summary(
        "breakdown",
        f"Where the model's time goes ({phase}, on PyTorch)",
        tuple(c for c in COLUMNS if c.key != "phase"),
        tuple(rows),
        notes=(covered_line(source, phase),) if rows else (),
        extra=tuple(extra),
        about=ABOUT,
    )


def _number(value: float | None) -> NumberCell | None:
    return None if value is None else NumberCell(value, "x")


def covered_line(source: RecordSource, phase: str = "prefill") -> str:
    """One sentence: how much of `phase` the kernel layers cover, and the model speedup predicted
    from their measured speedups (or the ceiling if none is measured yet). Empty before a breakdown."""
    shares = latest_shares(source, phase)
    if not shares:
        return ""
    covered = sum(share for name, share in shares.items() if name not in UNCOVERED)
    ceiling = 1.0 / (1.0 - covered) if covered < 1 else float("inf")
    line = (
        f"Kernel layers take {format_number(covered, 'share')} of the {phase} on PyTorch: even at zero "
        f"cost they could make the model at most {format_number(ceiling, 'x')} faster."
    )
    total = predicted(source, phase)
    if total is not None:
        line += f" With the measured kernel speedups, Amdahl predicts {format_number(total[0], 'x')}."
    return line


def summarize(source: RecordSource) -> Summary:
    """The last breakdown of each phase (prefill, then a decode step), a sentence each on what the
    kernel layers cover."""
    parts = [summarize_phase(source, phase) for phase in PHASES]
    rows = tuple(
        {**row, "phase": phase} for phase, part in zip(PHASES, parts, strict=True) for row in part.rows
    )
    return Summary(
        "breakdown",
        "Where the model's time goes (on PyTorch)",
        COLUMNS,
        rows,
        notes=tuple(note for part in parts for note in part.notes),
        extra=tuple(e for part in parts for e in part.extra),
        about=ABOUT,
    )


KIND = Kind(
    name="breakdown",
    title="Where the model's time goes",
    records=(TimeShare,),
    summarize=summarize,
    how="Explorer.breakdown()",
    order=60,
    concludes=(TimeShare,),
)
