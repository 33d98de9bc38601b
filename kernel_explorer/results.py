"""The observable log that measurement records stream into.

A measurement emits one `Record` per completed sample; views subscribe to the `ResultLog` and
redraw as records arrive. The log exports to pandas and to JSON lines (and back); the HTML report
is `report.write_report`'s.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_explorer.records import Record

if TYPE_CHECKING:
    import pandas as pd

Subscriber = Callable[[Record], None]


class ResultLog:
    """Thread-safe, append-only list of records with subscribers.

    Subscribers are called on the thread that appends (the measurement thread); an exception in
    a subscriber is kept in `subscriber_errors` instead of stopping the measurement.
    """

    def __init__(self, records: list[Record] | None = None) -> None:
        self._records: list[Record] = list(records or [])
        self._lock = threading.Lock()
        self._subscribers: list[Subscriber] = []
        self.subscriber_errors: list[BaseException] = []

    def append(self, record: Record) -> None:
        with self._lock:
            self._records.append(record)
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
            return [
                r
                for r in self._records
                if (kind is None or r.kind == kind) and (run_id is None or r.run_id == run_id)
            ]

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def to_pandas(self, kind: str | None = None) -> pd.DataFrame:
        """One row per record; `values` become columns."""
        import pandas as pd

        rows = [
            {
                "kind": r.kind,
                "run_id": r.run_id,
                "layer": r.layer,
                "instance": r.instance,
                "time": r.time,
                **asdict(r.values),
            }
            for r in self.records(kind)
        ]
        return pd.DataFrame.from_records(rows)

    def layer_summary(self) -> pd.DataFrame:
        """Per layer: median of per-pair speedups with quartiles, and the worst divergence seen."""
        import pandas as pd

        latency = self.to_pandas("layer_latency")
        rows = []
        if not latency.empty:
            for layer, group in latency.groupby("layer", sort=False):
                speedup = group["speedup"]
                rows.append(
                    {
                        "layer": layer,
                        "pairs": len(group),
                        "speedup_median": speedup.median(),
                        "speedup_q1": speedup.quantile(0.25),
                        "speedup_q3": speedup.quantile(0.75),
                        "pytorch_us_median": group["pytorch_s"].median() * 1e6,
                        "kernel_us_median": group["kernel_s"].median() * 1e6,
                    }
                )
        summary = pd.DataFrame.from_records(rows, columns=["layer"] if not rows else None)
        divergence = self.to_pandas("layer_divergence")
        if not divergence.empty:
            worst = divergence.groupby("layer", sort=False).agg(
                max_abs=("max_abs", "max"),
                max_ulp=("max_ulp", "max"),
                bitwise_equal=("bitwise_equal", "mean"),
                kernel_err64=("kernel_err64", "max"),
                pytorch_err64=("pytorch_err64", "max"),
            )
            summary = summary.merge(worst.reset_index(), on="layer", how="outer")
        return summary

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
