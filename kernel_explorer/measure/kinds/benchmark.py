"""Kernels benchmark: the workloads of a `kernels benchmark` JSON file, in that tool's own protocol.

`ResultLog.load` reads such a file beside the explorer's logs (`measure/merge.read_records`): each
workload is the kernel alone, timed after warm-up on the benchmark script's synthetic inputs, as
a mean and spread of its own calls. No interleaved PyTorch pairs, no A/A floor, no raw samples: its
summary stands beside the explorer's verdicts, never in them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kernel_explorer.measure.kinds.kind import Kind, RecordSource, records_of
from kernel_explorer.measure.records import Provenance, Record
from kernel_explorer.measure.summary import Column, NumberCell, Summary

__all__ = ["BENCHMARK_HOST", "KIND", "KernelsBenchmark", "benchmark_records", "summarize"]

#: the host the records of a benchmark file are filed under (the file names no machine of its own)
BENCHMARK_HOST = "kernels benchmark"


@dataclass(frozen=True)
class KernelsBenchmark:
    """One workload of a `kernels benchmark` JSON file: that tool's protocol, not the explorer's.

    The kernel alone, timed `iterations` times after warm-up on the benchmark script's synthetic
    inputs: mean and spread of its own times. No interleaved PyTorch pairs on the model's real
    activations, no A/A floor, no raw samples: it reads beside a `LayerVerdict`, never as one.
    """

    kind: ClassVar[str] = "kernels_benchmark"
    workload: str
    mean_s: float
    std_s: float
    min_s: float
    max_s: float
    iterations: int
    q1_s: float | None = None
    q3_s: float | None = None
    outliers: int = 0
    verified: bool | None = None  # the script's verify against its reference (None: none)
    kernel_commit: str = ""
    script: str = ""
    protocol: str = "kernels benchmark: the kernel alone, mean and std of its calls, synthetic inputs"


def benchmark_records(path: Path, data: dict[str, Any]) -> list[Record]:
    """The workloads of one `kernels benchmark` JSON (its `--output` file) as records."""
    info = data.get("machineInfo", {})
    device = info.get("gpu") if info.get("gpu") not in (None, "", "N/A", "None") else info.get("cpu", "")
    hardware = f"{device} ({info.get('backend', '?')}) | torch {info.get('pytorchVersion', '?')}"
    commit = str(data.get("kernelCommitSha", ""))
    provenance = Provenance(
        kernel_id=commit or None,
        torch=str(info.get("pytorchVersion", "")),
        machine=str(info.get("cpu", "")),
        host=BENCHMARK_HOST,
        hardware=hardware,
    )
    run_id = f"kernels-benchmark:{path.stem}"
    records = []
    mtime = path.stat().st_mtime
    for entry in data["results"]:
        t = entry["timingResults"]
        values = KernelsBenchmark(
            workload=str(entry["workload"]),
            mean_s=t["mean_ms"] / 1e3,
            std_s=t["std_ms"] / 1e3,
            min_s=t["min_ms"] / 1e3,
            max_s=t["max_ms"] / 1e3,
            iterations=int(t["iterations"]),
            q1_s=None if t.get("q1_ms") is None else t["q1_ms"] / 1e3,
            q3_s=None if t.get("q3_ms") is None else t["q3_ms"] / 1e3,
            outliers=int(t.get("outliers", 0)),
            verified=entry.get("verified"),
            kernel_commit=commit,
            script=str(data.get("benchmarkScriptPath", "")),
        )
        records.append(Record(run_id, values, None, str(entry["workload"]), mtime, provenance))
    return records


COLUMNS = (
    Column("hardware", "hardware", line=None),
    Column("workload", "workload", what=True),
    Column("mean_s", "mean", "number", line="mean {}"),
    Column("std_s", "std", "number", line=", std {}"),
    Column("iterations", "iterations", "number", line=" over {} calls"),
    Column("verified", "verified", line="verified: {}"),
    Column("kernel_commit", "kernel commit", line=None),
)


def summarize(source: RecordSource) -> Summary:
    """A row per workload of every loaded benchmark file, on the hardware the file names."""
    rows: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    protocols: dict[str, None] = {}
    for record in records_of(source, KernelsBenchmark):
        v = record.values
        rows.append(
            {
                "hardware": record.provenance.hardware if record.provenance is not None else "",
                "workload": v.workload,
                "mean_s": NumberCell(v.mean_s, "s"),
                "std_s": NumberCell(v.std_s, "s"),
                "iterations": v.iterations,
                "verified": v.verified,
                "kernel_commit": v.kernel_commit,
            }
        )
        extra.append({"run_id": record.run_id, "min_s": v.min_s, "max_s": v.max_s, "script": v.script})
        protocols[v.protocol] = None
    return Summary(
        "benchmark",
        "kernels benchmark files (that tool's protocol, not comparable to the explorer's pairs)",
        COLUMNS,
        tuple(rows),
        notes=tuple(protocols),
        extra=tuple(extra),
    )


KIND = Kind(
    name="benchmark",
    title="kernels benchmark files",
    records=(KernelsBenchmark,),
    summarize=summarize,
    how="ResultLog.load(a kernels benchmark JSON file)",
    order=90,
)
