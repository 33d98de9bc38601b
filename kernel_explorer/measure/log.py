"""The observable log that measurement records stream into: the store, and its files.

A measurement emits one `Record` per completed sample; views subscribe to the `ResultLog` and
redraw as records arrive. The log exports to pandas, csv, parquet and JSON lines (and loads back,
several machines' logs merged). What the records say is each kind's summary (`measure/kinds/`):
the summary methods here hand the log to them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.kinds import breakdown as breakdown_kind
from kernel_explorer.measure.kinds import kind
from kernel_explorer.measure.kinds import time as time_kind
from kernel_explorer.measure.records import INFERENCE, TRAINING, Record

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from kernel_explorer.measure.kinds.time.records import LayerVerdict
    from kernel_explorer.measure.record_columns import RecordColumns
    from kernel_explorer.measure.summary import Summary

Subscriber = Callable[[Record], None]


class ResultLog:
    """Thread-safe, append-only log of records with subscribers.

    Subscribers are called on the thread that appends (the measurement thread); an exception in
    a subscriber is kept in `subscriber_errors` instead of stopping the measurement.

    A kind whose values are all scalars (a latency pair, an A/A pair, a divergence...) is kept as
    columns (`record_columns.RecordColumns`: about 27 bytes a pair where its objects took 430,
    spilled to the cache folder past `record_columns.SPILL_BYTES`), so an hour's Run stays small;
    `records()` makes `Record`s equal to those appended, and `columns()` gives a kind's fields as
    arrays without making any. The verdicts (tuples of notes) are kept as the objects appended.
    """

    def __init__(self, records: list[Record] | None = None) -> None:
        from kernel_explorer.measure.record_columns import Table

        self._lock = threading.Lock()
        self._strings = Table()  # run ids, layers, instances, string fields: codes in the columns
        self._origins = Table()  # provenances: one per instance and run, a code on every record
        #: per kind, in the order first appended: its value class, and its columns (None where a
        #: field is not a scalar: the kind is kept as objects)
        self._types: dict[str, type] = {}
        self._columns: dict[str, RecordColumns | None] = {}
        #: per kind: the records kept as objects, with their places in the log (`seq`)
        self._objects: dict[str, tuple[list[int], list[Record]]] = {}
        self._count = 0
        self.spill_error: str | None = None  # why the columns stay in memory past the spill size
        self._subscribers: list[Subscriber] = []
        self.subscriber_errors: list[BaseException] = []
        for record in records or []:
            self._store(record)

    def _store(self, record: Record) -> None:
        """Keep `record` as row `len(self)` (under the lock, or before the log is shared)."""
        kind = record.kind
        if kind not in self._types:
            from kernel_explorer.measure.record_columns import RecordColumns, scalar_columns

            made = self._types[kind] = type(record.values)
            columnar = scalar_columns(made) is not None
            self._columns[kind] = RecordColumns(made, self._strings, self._origins) if columnar else None
        store = self._columns[kind]
        if store is None or not store.append(self._count, record):
            seqs, kept = self._objects.setdefault(kind, ([], []))
            seqs.append(self._count)
            kept.append(record)
        self._count += 1
        if store is not None and store.sealed_bytes and self.spill_error is None:
            self._spill()

    def _spill(self) -> None:
        """Past `SPILL_BYTES` of sealed chunks in memory, write the oldest chunks of the largest
        kind to files; a cache folder that cannot be written leaves them in memory, said in
        `spill_error`."""
        from kernel_explorer.errors import KernelExplorerError
        from kernel_explorer.measure import record_columns

        stores = [s for s in self._columns.values() if s is not None]
        total = sum(s.sealed_bytes for s in stores)
        while total > record_columns.SPILL_BYTES:
            try:
                freed = max(stores, key=lambda s: s.sealed_bytes).spill_oldest()
            except (OSError, KernelExplorerError) as error:
                self.spill_error = f"cannot spill the log's columns: {error}"
                return
            if not freed:
                return
            total -= freed

    def append(self, record: Record) -> None:
        with self._lock:
            self._store(record)
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
        """The records (of one kind, of one run), in the order appended."""
        return [record for _, batch in self._batches(kind, run_id) for record in batch]

    def kinds(self) -> list[str]:
        """The kinds of record the log holds, in the order first appended."""
        with self._lock:
            return list(self._types)

    def columns(self, kind: str, run_id: str | None = None) -> dict[str, np.ndarray]:
        """The records of `kind` (of one run) as arrays, one per field, in the order appended;
        where the kind is kept as columns, without making a `Record`.

        Each field of the kind's value class, then `seq` (the record's place in the whole log),
        `run_id`, `layer`, `instance`, `time` and the provenance's `kernel_id`, `isa` and
        `candidate`. Floats and ints come as float64 and int64 arrays (a field that may be None as
        float64, NaN for None), bools as bool arrays (object arrays where they may be None), strings
        and anything else (a verdict's notes) as object arrays, None where missing. A kind the log
        never held gives empty arrays; a kind no record class has: one line naming the known ones.
        """
        from kernel_explorer.errors import KernelExplorerError
        from kernel_explorer.measure.record_columns import object_columns
        from kernel_explorer.measure.records import VALUE_TYPES

        with self._lock:
            values_type = self._types.get(kind)
            store = self._columns.get(kind)
            if store is not None and kind not in self._objects:
                parts, strings, origins = store.parts(), self._strings.lookup(), list(self._origins.values)
                run = None if run_id is None else self._strings.known(run_id)
            else:
                store = None
        if values_type is None:
            if kind not in VALUE_TYPES:
                raise KernelExplorerError(f"No record kind {kind!r}; known: {', '.join(VALUE_TYPES)}.")
            return object_columns(VALUE_TYPES[kind], [], [])
        if store is None:  # kept as objects (a verdict), or some of its records did not fit
            seqs: list[int] = []
            found: list[Record] = []
            for batch_seqs, batch in self._batches(kind, run_id):
                seqs += batch_seqs.tolist()
                found += batch
            return object_columns(values_type, seqs, found)
        raw = store.rows([] if run_id is not None and run is None else parts, run)
        return store.columns(raw, strings, origins)

    def _batches(
        self, kind: str | None, run_id: str | None, batch: int = 10_000
    ) -> Iterator[tuple[np.ndarray, list[Record]]]:
        """(seqs, records) of one kind (of one run), in the order appended, `batch` records at a
        time: a long log is written out without every record made at once."""
        import numpy as np

        with self._lock:
            kinds = list(self._types) if kind is None else [kind] if kind in self._types else []
            run = None if run_id is None else self._strings.known(run_id)
            taken: list[tuple[RecordColumns | None, Any]] = []
            for name in kinds:
                store = self._columns[name]
                if store is not None and (run_id is None or run is not None):
                    taken.append((store, store.parts()))
                seqs, kept = self._objects.get(name, ([], []))
                if kept:
                    taken.append((None, list(zip(seqs, kept, strict=True))))
            strings, origins = self._strings.lookup(), self._origins.lookup()
        parts: list[tuple[np.ndarray, RecordColumns | None, Any]] = []  # seqs, and what makes records
        for store, held in taken:
            if store is not None:
                raw = store.rows(held, run)
                parts.append((raw["seq"], store, raw))
            else:
                held = [(s, r) for s, r in held if run_id is None or r.run_id == run_id]
                parts.append((np.array([s for s, _ in held], dtype=np.int64), None, [r for _, r in held]))
        every = np.sort(np.concatenate([seqs for seqs, _, _ in parts])) if parts else []
        for start in range(0, len(every), batch):
            low, high = every[start], every[min(start + batch, len(every)) - 1]
            seqs_out, made = [], []
            for seqs, store, rows in parts:
                a, b = np.searchsorted(seqs, [low, high + 1])
                if a == b:
                    continue
                seqs_out.append(seqs[a:b])
                if store is not None:
                    made += store.records({n: c[a:b] for n, c in rows.items()}, strings, origins)
                else:
                    made += rows[a:b]
            merged = np.concatenate(seqs_out)
            order = np.argsort(merged, kind="stable")
            yield merged[order], [made[i] for i in order]

    def __len__(self) -> int:
        with self._lock:
            return self._count

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def origin_records(self) -> list[Record]:
        """The first record of each run, layer and provenance, and every record kept as an object,
        in log order: all a run's machine, model and kernel builds are read from
        (`merge.run_machines`, `merge.run_kernels`), without making a record per pair."""
        import pandas as pd

        found: list[tuple[int, Record]] = []
        for name in self.kinds():
            with self._lock:
                store = self._columns[name]
                parts = store.parts() if store is not None else []
                seqs, kept = self._objects.get(name, ([], []))
                found += zip(seqs, kept, strict=True)
                strings, origins = self._strings.lookup(), self._origins.lookup()
            if store is not None:
                raw = store.rows(parts)
                keys = pd.DataFrame({column: raw[column] for column in ("run_id", "layer", "origin")})
                first = keys.drop_duplicates().index.to_numpy()
                rows = {column: values[first] for column, values in raw.items()}
                found += zip(rows["seq"].tolist(), store.records(rows, strings, origins), strict=True)
        found.sort(key=lambda pair: pair[0])
        return [record for _, record in found]

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

    def latest_verdicts(
        self, running: Mapping[str, Collection[str]] | None = None
    ) -> dict[str, LayerVerdict]:
        """The last verdict per layer name measured on a kernel (what the inventory shows as measured);
        with `running` (layer: kernel ids running now), only those kernels' verdicts."""
        return time_kind.latest_verdicts(self, running)

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
        """Every record as a line of JSON (`Record.to_dict`), in the order appended, written a batch
        at a time (a long Run's records are never all made at once)."""
        path = Path(path)
        with path.open("w") as out:
            for _, batch in self._batches(None, None):
                out.writelines(json.dumps(record.to_dict()) + "\n" for record in batch)
        return path

    @classmethod
    def from_jsonl(cls, path: str | Path) -> ResultLog:
        """The log `to_jsonl` wrote, read line by line into columns."""
        log = cls()
        with Path(path).open() as lines:
            for line in lines:
                if line.strip():
                    log._store(Record.from_dict(json.loads(line)))
        return log
