"""Short answers to `%kernels compare` and `%kernels bench`: one line per layer (or measure), the
DataFrame one attribute away.

A summary DataFrame has 20-odd columns; pandas elides the middle ones in a notebook (the verdict
among them) and cuts long text. A reader wants the speedup, its interval, the verdict and the
accuracy: those make the line; `answer.frame` keeps every column for whoever needs them.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from kernel_explorer.records import ResultLog

#: notes (why a kernel did not run, a suspicious timing) longer than this are cut in the line
NOTE_CHARS = 100


def _number(value: Any) -> float | None:
    """A finite float, or None for a missing cell (NaN in a DataFrame, None in a record)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _speedup(row: Any, median: str, low: str, high: str) -> str | None:
    """'1.61x [1.48, 1.68]', or None when the row has no timed pairs."""
    values = [_number(row.get(key)) for key in (median, low, high)]
    if any(v is None for v in values):
        return None
    m, lo, hi = values
    return f"{m:.2f}x [{lo:.2f}, {hi:.2f}]"


def _text(row: Any, key: str) -> str:
    value = row.get(key)
    return value if isinstance(value, str) else ""


class Answer:
    """A titled list of one-line answers over a DataFrame (`frame`) that holds every column.

    Shown as a few lines of text (or a small left-aligned HTML table in a notebook); `answer.frame`
    is the DataFrame, `answer.lines` the lines, `str(answer)` the text.
    """

    def __init__(self, title: str, rows: list[tuple[str, str]], frame: pd.DataFrame, empty: str) -> None:
        self.title = title
        self.rows = rows  # (what, the rest of its line)
        self.frame = frame
        self.empty = empty  # what to say when there is nothing to show

    @property
    def lines(self) -> list[str]:
        return [f"{what}: {rest}" for what, rest in self.rows] or [self.empty]

    def _footer(self) -> str:
        rows, columns = self.frame.shape
        return f".frame: the full table ({rows} rows x {columns} columns)"

    def __str__(self) -> str:
        return "\n".join([self.title, *(f"  {line}" for line in self.lines), f"  {self._footer()}"])

    def __repr__(self) -> str:
        return str(self)

    def __len__(self) -> int:
        return len(self.rows)

    def _repr_html_(self) -> str:
        cell = "style='text-align:left;padding:1px 12px 1px 0;vertical-align:top'"
        body = (
            "".join(
                f"<tr><td {cell}><b>{html.escape(what)}</b></td><td {cell}>{html.escape(rest)}</td></tr>"
                for what, rest in self.rows
            )
            or f"<tr><td {cell}>{html.escape(self.empty)}</td></tr>"
        )
        return (
            f"<div class='kx-answer'><div>{html.escape(self.title)}</div>"
            f"<table style='margin:0'><tbody>{body}</tbody></table>"
            f"<div style='opacity:0.7;font-size:smaller'>{html.escape(self._footer())}</div></div>"
        )


def layer_answer(frame: pd.DataFrame, run_id: str) -> Answer:
    """`%kernels compare`: per layer (per kernel, when several were compared) its speedup with the 95%
    interval, the verdict, the accuracy, and on what it rests (pairs, instances, noise floor)."""
    rows = []
    for _, row in frame.iterrows():
        what = str(row["layer"]) + (f" ({row['kernel']})" if _text(row, "kernel") else "")
        speed = _speedup(row, "speedup", "speedup_low", "speedup_high")
        parts = [f"{speed} {_text(row, 'verdict')}".strip() if speed else _no_speed(row)]
        if _text(row, "accuracy"):
            parts.append(_text(row, "accuracy"))
        basis = f"{int(row.get('pairs', 0))} pairs over {int(row.get('instances', 0))} instances"
        floor = _number(row.get("noise_floor"))
        if floor is not None:
            basis += f", noise floor {floor:.0%}"
        line = "; ".join(parts) + f" ({basis})"
        notes = _text(row, "notes")
        if notes:
            line += f"; note: {notes if len(notes) <= NOTE_CHARS else notes[: NOTE_CHARS - 1] + '…'}"
        rows.append((what, line))
    return Answer(f"Run {run_id}: kernel against PyTorch, 95% intervals", rows, frame, "no layer was timed")


def model_answer(frame: pd.DataFrame, run_id: str, results: ResultLog) -> Answer:
    """`%kernels bench`: per measure (prefill at a length, decode) the model's speedup with its
    interval and verdict, then how far the outputs agree (logits, greedy tokens)."""
    rows = []
    for _, row in frame.iterrows():
        what = f"{row['measure']} ({int(row['tokens'])} tokens)"
        speed = _speedup(row, "speedup", "speedup_low", "speedup_high") or "not timed"
        line = f"{speed} {_text(row, 'verdict')}".strip() + f" ({int(row.get('pairs', 0))} pairs"
        floor, confidence = _number(row.get("noise_floor")), _number(row.get("confidence"))
        if floor is not None:
            line += f", noise floor {floor:.0%}"
        if confidence is not None and confidence < 0.95 - 1e-9:
            line += f", only {confidence:.0%} sure: few pairs"
        rows.append((what, line + ")"))
    for record in results.records("model_agreement", run_id):
        v = record.values
        greedy = (
            f"greedy tokens identical ({v.greedy_tokens})"
            if v.first_divergence is None
            else f"greedy tokens differ from token {v.first_divergence} of {v.greedy_tokens}"
        )
        what = "outputs" if v.reference == "PyTorch" else f"outputs against {v.reference}"
        rows.append((what, f"top-1 agreement {v.top1_agreement:.1%}, logits KL {v.kl:.1e}, {greedy}"))
    return Answer(
        f"Run {run_id}: the model as switched against all-PyTorch, 95% intervals",
        rows,
        frame,
        "nothing was measured",
    )


def _no_speed(row: pd.Series) -> str:
    """What stands in for a speed: why the machine made it unmeasurable, or that it was not timed."""
    from kernel_explorer.records import Verdict, describe

    verdict = row.get("verdict")
    if isinstance(verdict, str) and verdict == Verdict.NOT_MEASURABLE:
        stalled, pairs = _number(row.get("stalled")), _number(row.get("pairs"))
        return describe(Verdict.NOT_MEASURABLE, stalled=int(stalled or 0), pairs=int(pairs or 0))
    return "not timed"
