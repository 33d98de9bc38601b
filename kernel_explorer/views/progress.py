"""A progress line in the running cell while a measurement runs in it: never a wait without knowing
for what (`compare`, `compare_model`, `breakdown` from Python or `%kernels` can take minutes).

It follows the explorer's records (the runner appends them in the thread that measures, so a
foreground run updates the line between its pairs): which layer or measure now, how many of how
many when the caller said (`expect`), pairs so far, seconds so far and about how many left. Runs
on other threads (the dashboard's live run, `background=True`) draw nothing here: they would land
in whatever cell runs at the time. The line is removed when the run ends, so a saved notebook keeps
no widget there.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from kernel_explorer.records import RunEvent, kinds

if TYPE_CHECKING:
    from kernel_explorer.records import Record, ResultLog

#: the label is redrawn at most this often between conclusions (a pair can take microseconds)
REDRAW_S = 0.5
#: records that conclude one step (a layer, a measure at a length, a phase of a breakdown), and
#: records of one timed pair: what each kind of measurement declares
_CONCLUSIONS = frozenset(cls.kind for found in kinds().values() for cls in found.concludes)
_PAIRS = frozenset(cls.kind for found in kinds().values() for cls in found.samples)


def progress_text(what: str, done: int, total: int | None, unit: str, pairs: int, elapsed: float) -> str:
    """'SiLU · 1/3 layers · 14 pairs · 6 s, about 12 s left' (no estimate before a first conclusion)."""
    parts = [what] if what else []
    parts.append(f"{done}/{total} {unit}" if total else f"{done} {unit} done")
    if pairs:
        parts.append(f"{pairs} pairs")
    timing = f"{elapsed:.0f} s"
    if total and 0 < done < total:
        timing += f", about {elapsed / done * (total - done):.0f} s left"
    parts.append(timing)
    return " · ".join(parts)


class RunProgress:
    """The widget line of one run; `update(record)` for each of its records, `close()` at its end."""

    def __init__(self, run_id: str, total: int | None, unit: str) -> None:
        from IPython.display import display
        from ipywidgets import HTML, HBox, IntProgress

        self.run_id, self.total, self.unit = run_id, total, unit
        self.start = time.perf_counter()
        self.done: set[str] = set()
        self.pairs = 0
        self.what = ""
        self._drawn = 0.0
        self.bar = IntProgress(value=0, min=0, max=total or 1, description="measuring")
        self.label = HTML(value=f"{run_id}: starting")
        self.box = HBox([self.bar, self.label])
        self.box.add_class("kx-run-progress")
        self.handle = display(self.box, display_id=True)

    def update(self, record: Record) -> None:
        values, concluded = record.values, record.kind in _CONCLUSIONS
        if concluded:
            key = record.layer or getattr(values, "measure", "") or getattr(values, "phase", "")
            self.done.add(f"{key}:{getattr(values, 'tokens', '')}")
        elif record.kind in _PAIRS:
            self.pairs += 1
        self.what = record.layer or getattr(values, "measure", "") or self.what
        now = time.perf_counter()
        if concluded or now - self._drawn >= REDRAW_S:
            self._drawn = now
            self.bar.max = max(self.total or len(self.done) or 1, len(self.done))
            self.bar.value = len(self.done)
            self.label.value = f"{self.run_id}: " + progress_text(
                self.what, len(self.done), self.total, self.unit, self.pairs, now - self.start
            )

    def close(self) -> None:
        from IPython.display import HTML

        self.box.close()
        if self.handle is not None:
            self.handle.update(HTML(""))


class CellProgress:
    """Shows a `RunProgress` for each run started on the kernel's main thread of one ResultLog."""

    def __init__(self, results: ResultLog) -> None:
        self.current: RunProgress | None = None
        self.last: RunProgress | None = None  # the last run's line, closed (what it said at the end)
        self._expected: tuple[int | None, str] = (None, "layers")
        self.unsubscribe = results.subscribe(self._on_record)

    def expect(self, total: int | None, unit: str) -> None:
        """The next run measures `total` layers or measures (what `%kernels` knows before it starts)."""
        self._expected = (total, unit)

    def _on_record(self, record: Record) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        values = record.values
        if isinstance(values, RunEvent):
            if values.event == "started":
                total, unit = self._expected
                self._expected = (None, "layers")
                self.current = RunProgress(record.run_id, total, unit)
            elif self.current is not None and self.current.run_id == record.run_id:
                self.current.close()
                self.last, self.current = self.current, None
        elif self.current is not None and self.current.run_id == record.run_id:
            self.current.update(record)


_attached: weakref.WeakKeyDictionary[Any, CellProgress] = weakref.WeakKeyDictionary()


def cell_progress(results: ResultLog) -> CellProgress:
    """The one `CellProgress` of a ResultLog (made on first use)."""
    found = _attached.get(results)
    if found is None:
        found = _attached[results] = CellProgress(results)
    return found


def attach_to_explorers(namespace: dict[str, Any]) -> None:
    """Give every Explorer in a notebook's namespace its progress line (idempotent: once each)."""
    from kernel_explorer.explorer import Explorer

    for value in list(namespace.values()):
        if isinstance(value, Explorer):
            cell_progress(value.results)
