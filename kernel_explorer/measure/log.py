"""The observable log that measurement records stream into: the store, and its files.

A measurement emits one `Record` per completed sample; views subscribe to the `ResultLog` and
redraw as records arrive. The log exports to pandas, csv, parquet and JSON lines (and loads back,
several machines' logs merged). What the records say is each kind's summary (`measure/kinds/`):
the summary methods here hand the log to them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_explorer.measure.kinds import breakdown as breakdown_kind
from kernel_explorer.measure.kinds import kind
from kernel_explorer.measure.kinds import time as time_kind
from kernel_explorer.measure.records import INFERENCE, TRAINING, Record

if TYPE_CHECKING:
    import pandas as pd

    from kernel_explorer.measure.kinds.time.records import LayerVerdict
    from kernel_explorer.measure.summary import Summary

Subscriber = Callable[[Record], None]


class ResultLog:
    """Thread-safe, append-only list of records with subscribers.

    Subscribers are called on the thread that appends (the measurement thread); an exception in
    a subscriber is kept in `subscriber_errors` instead of stopping the measurement.
    """

    def __init__(self, records: list[Record] | None = None) -> None:
        self._records: list[Record] = list(records or [])
        #: the records of each kind, in order: a click's redraw asks for the verdicts and shares
        #: while a Run appends a record per pair, and a scan of every record grew with the Run
        #: (16,000 records: 14 ms a redraw, half of the time a click took on a busy machine)
        self._by_kind: dict[str, list[Record]] = {}
        for record in self._records:
            self._by_kind.setdefault(record.kind, []).append(record)
        self._lock = threading.Lock()
        self._subscribers: list[Subscriber] = []
        self.subscriber_errors: list[BaseException] = []

    def append(self, record: Record) -> None:
        with self._lock:
            self._records.append(record)
            self._by_kind.setdefault(record.kind, []).append(record)
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(record)
            except Exception as error:
                self.subscriber_errors.append(error)

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback(record)` for every new record; returns a function that unsubscribes."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def records(self, kind: str | None = None, run_id: str | None = None) -> list[Record]:
        with self._lock:
            found = self._records if kind is None else self._by_kind.get(kind, [])
            return [r for r in found if run_id is None or r.run_id == run_id]

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def to_pandas(self, kind: str | None = None) -> pd.DataFrame:
        """One row per record; `values` become columns, then the provenance (dtype, threads, ISA...)."""
        import pandas as pd

        rows = []
        for r in self.records(kind):
            values = asdict(r.values)
            origin = asdict(r.provenance) if r.provenance is not None else {}
            row = {
                "kind": r.kind,
                "run_id": r.run_id,
                "layer": r.layer,
                "instance": r.instance,
                "time": r.time,
            }
            rows.append(row | values | {k: v for k, v in origin.items() if k not in values})
        return pd.DataFrame.from_records(rows)

    def summary(self, measure: str = "time") -> Summary:
        """What the log's records of one kind of measurement say (`measure/kinds/`): the table every
        view renders; an unknown name is one line listing the known ones."""
        return kind(measure).summarize(self)

    def layer_summary(self) -> pd.DataFrame:
        """Per run and layer compared in inference: the speedup's median with its 95% interval, the
        A/A noise floor, the verdicts, the worst divergence seen (the time kind's summary)."""
        return time_kind.summarize(self, INFERENCE).to_pandas()

    def training_summary(self) -> pd.DataFrame:
        """Per run and layer compared in training mode: the forward+backward speedup with its
        interval, floor and verdict, gradient accuracy against float64, the gradient whose error
        grew most relative to PyTorch's, and notes on why a kernel did not run."""
        return time_kind.summarize(self, TRAINING).to_pandas()

    def model_summary(self) -> pd.DataFrame:
        """Per run and measure of the whole model: speedup, interval, floor, verdict, and Amdahl's
        prediction next to a prefill's (the model kind's summary)."""
        return kind("model").summarize(self).to_pandas()

    def breakdown_summary(self, phase: str = "prefill", on: Collection[str] | None = None) -> pd.DataFrame:
        """The last time breakdown of `phase` with Amdahl's model speedups; its last row predicts the
        model speedup with every measured kernel on, or with only the layers `on`."""
        return breakdown_kind.summarize_phase(self, phase, on).to_pandas()

    def latest_verdicts(self) -> dict[str, LayerVerdict]:
        """The last verdict per layer name measured on a kernel (what the inventory shows as measured)."""
        return time_kind.latest_verdicts(self)

    def latest_shares(self, phase: str = "prefill") -> dict[str, float]:
        """Each category's share of the last time breakdown of `phase` (empty before `breakdown()`)."""
        return breakdown_kind.latest_shares(self, phase)

    def machine_table(self, *, wide: bool = False) -> pd.DataFrame:
        """Each machine's latest run of each layer side by side (the time kind's `machine_table`)."""
        return time_kind.machine_table(self, wide=wide)

    @classmethod
    def load(cls, *paths: str | Path) -> ResultLog:
        """One log from the logs of several machines (`.jsonl`) and `kernels benchmark` JSON files;
        run ids two files share become `host:run-1`. A file that is neither: one line."""
        from kernel_explorer.measure.merge import load_records

        return cls(load_records(paths))

    def export(self, path: str | Path, kind: str | None = None) -> Path:
        """Every record (or one kind) as a table file, by suffix: .csv, .parquet or .jsonl.

        Rows are what `to_pandas` gives: the values and the provenance as columns.
        """
        from kernel_explorer.errors import KernelExplorerError

        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in (".csv", ".parquet", ".jsonl"):
            raise KernelExplorerError(f"Export to .csv, .parquet or .jsonl, not {path.name!r}.")
        if not path.parent.is_dir():
            raise KernelExplorerError(f"Cannot export to {path}: the folder {path.parent} does not exist.")
        if suffix == ".jsonl":
            return self.to_jsonl(path)
        frame = self.to_pandas(kind)
        if suffix == ".csv":
            frame.to_csv(path, index=False)
            return path
        try:
            frame.to_parquet(path, index=False)
        except ImportError:
            raise KernelExplorerError(
                "Parquet needs pyarrow: pip install pyarrow (or export to .csv)."
            ) from None
        return path

    def to_jsonl(self, path: str | Path) -> Path:
        path = Path(path)
        with path.open("w") as out:
            for record in self.records():
                out.write(json.dumps(record.to_dict()) + "\n")
        return path

    @classmethod
    def from_jsonl(cls, path: str | Path) -> ResultLog:
        lines = Path(path).read_text().splitlines()
        return cls([Record.from_dict(json.loads(line)) for line in lines if line.strip()])
