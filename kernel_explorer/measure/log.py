"""The observable log that measurement records stream into.

A measurement emits one `Record` per completed sample; views subscribe to the `ResultLog` and
redraw as records arrive. The log exports to pandas and to JSON lines (and back); the HTML report
is `report.write_report`'s.
"""

from __future__ import annotations

import json
import statistics
import threading
from collections.abc import Callable, Collection, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.records import (
    INFERENCE,
    TRAINING,
    GradientDivergence,
    LayerDivergence,
    LayerVerdict,
    ModelVerdict,
    Record,
    TimeShare,
    TrainingAgreement,
)
from kernel_explorer.measure.verdict import Verdict

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from kernel_explorer.measure.record_columns import RecordColumns

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

    def _first_of_each_origin(self) -> list[Record]:
        """The first record of each run and provenance kept as columns, and the records kept as
        objects, in log order: what a run's machine and model are read from (`merge.run_machines`
        keeps the first it finds of each run) without making every record."""
        import numpy as np

        found: list[tuple[int, Record]] = []
        for kind in self.kinds():
            with self._lock:
                store = self._columns[kind]
                parts = store.parts() if store is not None else []
                seqs, kept = self._objects.get(kind, ([], []))
                found += zip(seqs, kept, strict=True)
                strings, origins = self._strings.lookup(), self._origins.lookup()
            if store is not None:
                raw = store.rows(parts)
                keys = raw["run_id"].astype(np.int64) << 32 | (raw["origin"].astype(np.int64) + 1)
                _, first = np.unique(keys, return_index=True)
                rows = {name: column[first] for name, column in raw.items()}
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

    def layer_summary(self) -> pd.DataFrame:
        """Per run and layer: the speedup's median with its 95% interval, the A/A noise floor, the
        verdicts, and the worst divergence seen.

        Only pairs where the instance ran a kernel count toward its speedup; a layer measured only
        with its kernel off reads "PyTorch against PyTorch (kernel off)", never as a speedup.
        """
        import pandas as pd

        from kernel_explorer.measure.comparison import Comparison

        grouped = _layer_groups(self)  # training mode: training_summary()
        rows = []
        for run_id, layer, kernel, kinds in _per_kernel(grouped):
            timed = kinds.get("layer_latency")  # the pairs' kinds come as columns (_layer_groups)
            aa = kinds["layer_calibration"]["ratio"].tolist() if "layer_calibration" in kinds else []
            divergence = [
                r.values for r in kinds.get("layer_divergence", []) if isinstance(r.values, LayerDivergence)
            ]
            verdicts = [
                r.values for r in kinds.get("layer_verdict", []) if isinstance(r.values, LayerVerdict)
            ]
            found = Comparison.of_columns(timed or {}, aa, divergence)
            # pairs and instances apart: compare(pairs=5) over 61 instances is 305 pairs of 61
            instances = set(timed["instance"][timed["kernel_on"] == found.kernel_on]) if timed else set()
            row: dict[str, object] = {
                "run_id": run_id,
                "layer": layer,
                "pairs": found.pairs,
                "instances": len(instances),
                "aa_pairs": len(aa),
            }
            if kernel is not None:  # several candidates compared in this run: a row each
                row["kernel"] = kernel
            if found.pairs:
                interval = found.interval
                across_low, across_high = found.across_runs
                series = pd.Series(found.speedups)
                row |= {
                    "speedup": interval.median,
                    "speedup_low": interval.low,
                    "speedup_high": interval.high,
                    "confidence": interval.confidence,
                    "speedup_q1": series.quantile(0.25),
                    "speedup_q3": series.quantile(0.75),
                    "noise_floor": found.floor,
                    "across_low": across_low,
                    "across_high": across_high,
                    "stalled": found.stalled_pairs,
                    "verdict": found.verdict if found.kernel_on else Verdict.KERNEL_OFF,
                    "pytorch_us_median": found.pytorch_median_s * 1e6,
                    "kernel_us_median": found.kernel_median_s * 1e6,
                }
                if not found.measurable:  # no number: the verdict and the stalled count say why
                    row |= dict.fromkeys(_SPEEDS)
            if divergence:
                row |= {
                    "accuracy": found.accuracy,
                    "max_abs": max((d.max_abs or 0.0) for d in divergence),
                    "max_ulp": max((d.max_ulp or 0) for d in divergence),
                    "bitwise_equal": statistics.fmean(d.bitwise_equal for d in divergence),
                    "kernel_err64": max((d.kernel_err64 or 0.0) for d in divergence),
                    "pytorch_err64": max((d.pytorch_err64 or 0.0) for d in divergence),
                }
            if verdicts:
                row |= {"stopped_by": verdicts[-1].stopped_by, "notes": "; ".join(verdicts[-1].notes)}
            rows.append(row)
        _mark_runs_that_disagree(rows)
        return self._on_machines(
            pd.DataFrame.from_records(rows, columns=None if rows else ["run_id", "layer"])
        )

    def latest_verdicts(self) -> dict[str, LayerVerdict]:
        """The last verdict per layer name measured on a kernel (what the inventory shows as measured).

        A layer measured only while its kernel was off compared PyTorch with itself: that is no
        measured speedup, so it does not count here.
        """
        found = [r for r in self.records("layer_verdict") if isinstance(r.values, LayerVerdict)]
        return {
            r.layer: r.values for r in found if r.layer and r.values.kernel_on and r.values.mode == INFERENCE
        }

    def breakdown_summary(self, phase: str = "prefill", on: Collection[str] | None = None) -> pd.DataFrame:
        """The last time breakdown of `phase`: each category's share and, with the last measured
        kernel speedup of that layer, Amdahl's model speedup (alone, and if it cost nothing); a last
        row predicts the model speedup with every measured kernel on, or with only the layers `on`
        (the kernels a model run had switched on), named in its category."""
        import pandas as pd

        from kernel_explorer.measure.breakdown import amdahl

        shares = [r for r in self.records("time_share") if isinstance(r.values, TimeShare)]
        shares = [r.values for r in shares if r.values.phase == phase and r.run_id == shares[-1].run_id]
        verdicts = self.latest_verdicts()
        rows = []
        for found in sorted(shares, key=lambda v: -v.share):
            verdict = verdicts.get(found.category)
            speedup = verdict.speedup if verdict is not None and verdict.measurable else None
            ceiling, predicted = amdahl(found.share, speedup)
            rows.append(
                {
                    "category": found.category,
                    "share": found.share,
                    "ms": found.seconds * 1e3,
                    "kernel_speedup": speedup,
                    "model_speedup_if_free": ceiling,
                    "model_speedup_predicted": predicted,
                }
            )
        measured = [
            r for r in rows if r["kernel_speedup"] is not None and (on is None or r["category"] in on)
        ]
        if measured or on is not None:
            rest = 1.0 - sum(r["share"] for r in measured)
            total = 1.0 / (rest + sum(r["share"] / r["kernel_speedup"] for r in measured))
            named = ", ".join(str(r["category"]) for r in measured) or "no measured kernel"
            label = "every measured kernel on" if on is None else f"with {named} on"
            rows.append({"category": label, "share": 1 - rest, "model_speedup_predicted": total})
        return pd.DataFrame.from_records(rows, columns=None if rows else ["category", "share"])

    def latest_shares(self, phase: str = "prefill") -> dict[str, float]:
        """Each category's share of the last time breakdown of `phase` (empty before `breakdown()`)."""
        shares = [r for r in self.records("time_share") if isinstance(r.values, TimeShare)]
        if not shares:
            return {}
        last = shares[-1].run_id
        return {
            r.values.category: r.values.share for r in shares if r.run_id == last and r.values.phase == phase
        }

    def model_summary(self) -> pd.DataFrame:
        """Per run and measure (prefill at each length, decode, training step, compiled prefill):
        speedup, interval, floor, verdict; a training step adds its loss and gradient agreement, and
        once a time breakdown and layer verdicts exist, prefill rows add the speedup Amdahl predicts
        from the kernels that run had on (`predicted_with` names them)."""
        import pandas as pd

        has_breakdown = bool(self.latest_shares())
        agreements = {
            (r.run_id, r.values.tokens): asdict(r.values)
            for r in self.records("training_agreement")
            if isinstance(r.values, TrainingAgreement)
        }
        rows = []
        for r in self.records("model_verdict"):
            if isinstance(r.values, ModelVerdict):
                row = {"run_id": r.run_id, **asdict(r.values)}
                if r.values.measure == "training step":
                    extra = agreements.get((r.run_id, r.values.tokens), {})
                    row |= {k: v for k, v in extra.items() if k not in row}
                if r.values.measure == "prefill" and has_breakdown:
                    last = self.breakdown_summary(on=r.values.kernels_on).iloc[-1]
                    row["predicted_from_layers"] = float(last["model_speedup_predicted"])
                    row["predicted_with"] = str(last["category"])
                rows.append(row)
        return self._on_machines(
            pd.DataFrame.from_records(rows, columns=None if rows else ["run_id", "measure"])
        )

    def training_summary(self) -> pd.DataFrame:
        """Per run and layer compared in training mode: the forward+backward speedup with its
        interval, floor and verdict, gradient accuracy against float64, and the gradient (input or
        weight) whose error against float64 grew most relative to PyTorch's; notes say why a kernel
        did not run (a layer without backward)."""
        import pandas as pd

        worst: dict[tuple[str, str | None], GradientDivergence] = {}
        for r in self.records("gradient_divergence"):
            values = r.values
            if not isinstance(values, GradientDivergence) or values.kernel_err64 is None:
                continue
            key = (r.run_id, r.layer)
            if key not in worst or _excess(values) > _excess(worst[key]):
                worst[key] = values
        rows = []
        for r in self.records("layer_verdict"):
            if not isinstance(r.values, LayerVerdict) or r.values.mode != TRAINING:
                continue
            v = r.values
            row: dict[str, object] = {"run_id": r.run_id, "layer": r.layer, "summary": v.summary}
            row |= {k: getattr(v, k) for k in ("pairs", "speedup", "speedup_low", "speedup_high")}
            row |= {"noise_floor": v.noise_floor, "verdict": v.verdict, "accuracy": v.accuracy}
            found = worst.get((r.run_id, r.layer))
            if found is not None:
                row |= {
                    "worst_gradient": found.gradient,
                    "kernel_err64": found.kernel_err64,
                    "pytorch_err64": found.pytorch_err64,
                }
            rows.append(row | {"kernel_on": v.kernel_on, "notes": "; ".join(v.notes)})
        return self._on_machines(
            pd.DataFrame.from_records(rows, columns=None if rows else ["run_id", "layer"])
        )

    def _on_machines(self, frame: pd.DataFrame) -> pd.DataFrame:
        """A summary with each run's machine (`machine`, `host`, `hardware`) and `model` columns."""
        from kernel_explorer.measure.merge import with_machines

        return with_machines(frame, self._first_of_each_origin())

    def machine_table(self, *, wide: bool = False) -> pd.DataFrame:
        """Each machine's latest run of each layer side by side (see `measure.merge.machine_table`)."""
        from kernel_explorer.measure.merge import machine_table

        return machine_table(self.layer_summary(), self.records(), wide=wide)

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


#: the kinds `layer_summary` reads as columns: a Run's bulk, a record per timed pair
_PAIR_KINDS = ("layer_latency", "layer_calibration")
#: a group of records: the pairs' kinds as columns (`ResultLog.columns`), the others as records
_Rows = dict[str, Any] | list[Record]


def _layer_groups(log: ResultLog) -> dict[tuple[str, str], dict[str, _Rows]]:
    """Per run and layer, in the order first appended, each `layer_` kind's inference records:
    the pairs' kinds as columns cut to the group, the other kinds (divergences, verdicts) as
    records. Records without a layer, and training-mode ones, are left out."""
    import pandas as pd

    first: dict[tuple[str, str], int] = {}
    grouped: dict[tuple[str, str], dict[str, _Rows]] = {}
    for kind in log.kinds():
        if not kind.startswith("layer_"):
            continue
        columns = log.columns(kind)
        keep = pd.notna(columns["layer"])
        if "mode" in columns:
            keep &= columns["mode"] == INFERENCE
        at = keep.nonzero()[0]
        made = None if kind in _PAIR_KINDS else log.records(kind)[: len(columns["seq"])]
        keys = pd.DataFrame({"run": columns["run_id"][at], "layer": columns["layer"][at]})
        for key, rows in keys.groupby(["run", "layer"], sort=False).indices.items():
            rows = at[rows]
            seq = int(columns["seq"][rows[0]])
            first[key] = min(first.get(key, seq), seq)
            group = grouped.setdefault(key, {})
            if made is None:
                group[kind] = {name: column[rows] for name, column in columns.items()}
            else:
                group[kind] = [made[i] for i in rows]
    return {key: grouped[key] for key in sorted(grouped, key=first.__getitem__)}


def _kernel_keys(rows: _Rows) -> list[tuple[str, str, str] | None]:
    """Per record of `rows`: the candidate that ran (kernel id, code path, label), None without one."""
    if isinstance(rows, dict):
        triples = zip(rows["kernel_id"], rows["isa"], rows["candidate"], strict=True)
        return [(kid, isa or "", label or "") if kid else None for kid, isa, label in triples]
    return [
        (p.kernel_id, p.isa or "", p.candidate or "") if p is not None and p.kernel_id else None
        for p in (r.provenance for r in rows)
    ]


def _per_kernel(
    grouped: dict[tuple[str, str], dict[str, _Rows]],
) -> Iterator[tuple[str, str, str | None, dict[str, Any]]]:
    """Each (run, layer) group, split by the candidate that ran where one run compared several
    kernels of a layer (`compare(candidates=...)`), named by kernel id, with its code path where one
    kernel ran several (`kernel_id@avx2`) and the candidate's label where that still repeats;
    otherwise whole, with kernel None."""

    def mine(rows: _Rows, wanted: tuple[str, str, str]) -> _Rows:
        chosen = [key == wanted for key in _kernel_keys(rows)]
        if isinstance(rows, dict):
            return {name: column[chosen] for name, column in rows.items()}
        return [r for r, keep in zip(rows, chosen, strict=True) if keep]

    for (run_id, layer), kinds in grouped.items():
        ids = {k for k in _kernel_keys(kinds.get("layer_latency", [])) if k is not None}
        if len(ids) < 2:
            yield run_id, layer, None, kinds
            continue
        for kid, isa, label in sorted(ids):
            same = [k for k in ids if k[:2] == (kid, isa)]
            name = kid if sum(k[0] == kid for k in ids) == 1 else f"{kid}@{isa}"
            split = {kind: mine(found, (kid, isa, label)) for kind, found in kinds.items()}
            yield run_id, layer, name + (f" ({label})" if len(same) > 1 else ""), split


_SPEEDS = ("speedup", "speedup_low", "speedup_high", "across_low", "across_high")


def _mark_runs_that_disagree(rows: list[dict[str, object]]) -> None:
    """`runs_agree` per row: False where another run of the same layer has an interval that does not
    overlap this one (the machine changed state between the runs: each interval holds for its own
    run only); None with a single run. Rows without a speed (kernel off, not measurable) take no part."""
    by_layer: dict[object, list[dict[str, object]]] = {}
    for row in rows:
        verdict = row.get("verdict")
        if "speedup_low" in row and isinstance(verdict, Verdict) and verdict.has_speed:
            by_layer.setdefault((row["layer"], row.get("kernel")), []).append(row)
    for runs in by_layer.values():
        for row in runs:
            others = [o for o in runs if o is not row]
            row["runs_agree"] = (
                None
                if not others
                else all(
                    o["speedup_low"] <= row["speedup_high"] and row["speedup_low"] <= o["speedup_high"]  # type: ignore[operator]
                    for o in others
                )
            )


def _excess(found: GradientDivergence) -> float:
    """How much larger the kernel's error against float64 is than PyTorch's (1.0: the same)."""
    return (found.kernel_err64 or 0.0) / max(found.pytorch_err64 or 0.0, 1e-300)
