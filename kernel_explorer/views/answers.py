"""Short answers to `%kernels compare` and `%kernels bench`: one line per layer (or measure), the
DataFrame one attribute away.

A summary DataFrame has 20-odd columns; pandas elides the middle ones in a notebook (the verdict
among them) and cuts long text. A reader wants the speedup, its interval, the verdict and the
accuracy: each kind's summary writes them as one line per row (`Summary.lines()`, the same lines
the CLI prints); `answer.frame` keeps every column for whoever needs them.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from kernel_explorer.records import ResultLog


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


def answer(results: ResultLog, run_id: str, measures: Sequence[str]) -> Answer:
    """Run `run_id` as each named kind's summary reads it: its lines, titled by the first kind, the
    first kind's table as `frame`."""
    import pandas as pd

    summaries = [results.summary(measure).select("run_id", run_id) for measure in measures]
    rows = [line for summary in summaries for line in summary.lines()]
    title = summaries[0].title if summaries else "nothing measured"
    frame = summaries[0].to_pandas() if summaries else pd.DataFrame()
    return Answer(f"Run {run_id}: {title}", rows, frame, "nothing was measured in this run")


def run_answer(results: ResultLog, run_id: str) -> Answer:
    """Run `run_id` as every kind with a record in it reads it (`%kernels bench`: the model's
    measures, then its outputs)."""
    from kernel_explorer.records import kinds_in_run

    return answer(results, run_id, [found.name for found in kinds_in_run(results, run_id)])
