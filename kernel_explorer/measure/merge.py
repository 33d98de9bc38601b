"""Logs of many machines in one log: load and merge, the machine as a dimension, revisions kept apart.

Each record's provenance names its machine (`host`: the machine's name; `hardware`: CPU or GPU
model, ISA or compute capability, torch build) and the model it measured (class and a fingerprint
of config and weights). Merging keeps every record and makes run ids unique (two machines both
write `run-1`); every kind's summary carries each run's machine (`machine_columns`), and the time
kind's `machine_table` puts each machine's latest run of a layer side by side, never pooling
numbers across runs. Where the logs measured different model revisions or kernel builds,
`revision_notes` says so in words.

`kernels benchmark` JSON files load as that kind's records (`measure/kinds/benchmark.py`): that
tool's own protocol (the kernel alone, mean and std), shown beside the explorer's verdicts, never
mixed into them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.measure.kinds.benchmark import benchmark_records
from kernel_explorer.measure.records import Record

if TYPE_CHECKING:
    import pandas as pd

    from kernel_explorer.measure.kinds.kind import RecordSource

#: what a record from before machines were named is filed under
UNKNOWN_HOST = "unnamed machine"
#: the columns every summary gets per run: where it was measured, and on which model
MACHINE_COLUMNS = ("machine", "host", "hardware", "model")


def machine_of(record: Record) -> tuple[str, str]:
    """(host, hardware) of a record: its machine's name and identity ("" when it carries none)."""
    p = record.provenance
    if p is None:
        return "", ""
    hardware = p.hardware or (f"{p.machine} | torch {p.torch}" if p.machine else "")
    return p.host or (UNKNOWN_HOST if hardware else ""), hardware


def machine_label(host: str, hardware: str) -> str:
    """One name for a machine in a table or on an axis: `host: hardware`."""
    return f"{host}: {hardware}" if host and hardware else host or hardware or UNKNOWN_HOST


def run_machines(records: Iterable[Record]) -> dict[str, dict[str, str]]:
    """Per run id: its machine (host, hardware, label) and the model it measured."""
    found: dict[str, dict[str, str]] = {}
    for record in records:
        host, hardware = machine_of(record)
        if not hardware and not host:
            continue
        entry = found.setdefault(record.run_id, {"host": host, "hardware": hardware, "model": ""})
        if record.provenance is not None and record.provenance.model and not entry["model"]:
            entry["model"] = record.provenance.model
    for entry in found.values():
        entry["machine"] = machine_label(entry["host"], entry["hardware"])
    return found


def machine_columns(source: RecordSource) -> Callable[[str], dict[str, str]]:
    """run id -> its `MACHINE_COLUMNS` ("" where a run names none): what each summary row carries."""
    origins = getattr(source, "origin_records", None)  # a log: a record per run and provenance
    machines = run_machines(origins() if origins is not None else source.records())
    return lambda run_id: {column: machines.get(run_id, {}).get(column, "") for column in MACHINE_COLUMNS}


def with_machines(frame: pd.DataFrame, records: Iterable[Record]) -> pd.DataFrame:
    """`frame` (a summary with a run_id column) with its runs' `machine`, `host` and `hardware`."""
    if "run_id" not in frame.columns:
        return frame
    machines = run_machines(records)
    frame = frame.copy()
    for column in MACHINE_COLUMNS:
        if column not in frame.columns:
            frame[column] = [machines.get(str(run), {}).get(column, "") for run in frame["run_id"]]
    return frame


# -- loading -----------------------------------------------------------------------------------


def read_records(path: str | Path) -> list[Record]:
    """The records of one file: the explorer's JSON lines, or a `kernels benchmark` JSON file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise KernelExplorerError(f"cannot read {path}: {error.strerror}") from None
    stripped = text.lstrip()
    if stripped.startswith("{") and '"machineInfo"' in text and '"results"' in text:
        try:
            return benchmark_records(path, json.loads(text))
        except (ValueError, KeyError, TypeError) as error:
            raise KernelExplorerError(f"{path} is not a kernels benchmark JSON file: {error}") from None
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(Record.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError) as error:
            raise KernelExplorerError(
                f"{path}:{number} is not a record of the explorer's log ({error}); "
                "give JSON lines written by ResultLog.to_jsonl or kernel-explorer compare --out"
            ) from None
    return records


def merge_records(per_file: list[tuple[Path, list[Record]]]) -> list[Record]:
    """All records, with run ids made unique where files share one (`host:run-1`, else `file:run-1`)."""
    seen: dict[str, int] = {}
    for _, records in per_file:
        for run in {r.run_id for r in records}:
            seen[run] = seen.get(run, 0) + 1
    merged: list[Record] = []
    for path, records in per_file:
        hosts = {machine_of(r)[0] for r in records} - {"", UNKNOWN_HOST}
        prefix = next(iter(hosts)) if len(hosts) == 1 else path.stem
        for r in records:
            if seen[r.run_id] > 1:
                r = Record(f"{prefix}:{r.run_id}", r.values, r.layer, r.instance, r.time, r.provenance)
            merged.append(r)
    return merged


def load_records(paths: Iterable[str | Path]) -> list[Record]:
    """Records of every file (logs of several machines, `kernels benchmark` files), merged."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise KernelExplorerError("ResultLog.load needs at least one file: a .jsonl log or benchmark JSON")
    return merge_records([(p, read_records(p)) for p in paths])


def run_kernels(records: list[Record]) -> dict[tuple[str, str], str]:
    """(run, layer) -> the kernel build(s) its pairs ran (kernel ids): what a kernel revision is here."""
    found: dict[tuple[str, str], set[str]] = {}
    for r in records:
        if (
            r.kind == "layer_latency"
            and r.provenance is not None
            and r.provenance.kernel_id
            and r.layer is not None
        ):
            found.setdefault((r.run_id, r.layer), set()).add(r.provenance.kernel_id)
    return {key: ", ".join(sorted(ids)) for key, ids in found.items()}


def revision_notes(records: list[Record]) -> list[str]:
    """Lines saying where merged logs measured different models or kernel builds (kept apart)."""
    notes = []
    models: dict[str, set[str]] = {}
    machines = run_machines(records)
    for entry in machines.values():
        if entry["model"]:
            models.setdefault(entry["model"], set()).add(entry["machine"])
    if len(models) > 1:
        listed = "; ".join(f"{model} on {', '.join(sorted(m))}" for model, m in sorted(models.items()))
        notes.append(f"{len(models)} model revisions in these logs ({listed}): their rows are kept apart")
    builds: dict[str, dict[str, set[str]]] = {}
    for (run, layer), build in run_kernels(records).items():
        machine = machines.get(run, {}).get("machine", UNKNOWN_HOST)
        builds.setdefault(layer, {}).setdefault(build, set()).add(machine)
    for layer, found in sorted(builds.items()):
        if len(found) > 1:
            listed = "; ".join(f"{b} on {', '.join(sorted(m))}" for b, m in sorted(found.items()))
            notes.append(f"{layer}: {len(found)} kernel builds ({listed}): their rows are kept apart")
    if any(r.kind == "kernels_benchmark" for r in records):
        notes.append(
            "kernels benchmark files: that tool's protocol (the kernel alone, mean and std on synthetic "
            "inputs), listed apart from the explorer's interleaved pairs on real activations"
        )
    return notes
