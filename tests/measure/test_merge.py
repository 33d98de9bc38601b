"""Logs of many machines in one table: merge, the machine as a dimension, revisions kept apart,
`kernels benchmark` files as records of that tool's protocol."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.merge import revision_notes
from kernel_explorer.measure.records import LayerCalibration, LayerLatency, Provenance, Record

ZEN4 = "AMD EPYC 9654 (AVX512) | torch 2.13.0+cpu"
ZEN3 = "AMD EPYC 7763 (AVX2) | torch 2.13.0+cpu"


def machine_log(
    host: str, hardware: str, speedup: float, *, model: str = "LlamaForCausalLM aaaa", kernel: str = "_rms_1"
) -> ResultLog:
    """One machine's run-1 of RMSNorm: 8 pairs around `speedup`, 6 A/A pairs (what compare writes)."""
    origin = Provenance(dtype="float32", kernel_id=kernel, host=host, hardware=hardware, model=model)
    log = ResultLog()
    for i in range(8):
        s = speedup * (1 + 0.01 * (i % 3 - 1))
        log.append(
            Record("run-1", LayerLatency(s * 1e-5, 1e-5, s), "RMSNorm", f"l{i % 2}", provenance=origin)
        )
    for i in range(6):
        r = 1 + 0.002 * (i % 3 - 1)
        log.append(Record("run-1", LayerCalibration(1e-5 * r, 1e-5, r), "RMSNorm", "l0", provenance=origin))
    return log


def test_two_machines_merge_into_one_table_with_a_machine_column(tmp_path: Path) -> None:
    a = machine_log("box-a", ZEN4, 3.0).to_jsonl(tmp_path / "a.jsonl")
    b = machine_log("box-b", ZEN3, 1.5).to_jsonl(tmp_path / "b.jsonl")
    merged = ResultLog.load(a, b)
    assert len(merged) == 28
    summary = merged.layer_summary()
    # both wrote run-1: told apart by host, never pooled into one run
    assert sorted(summary["run_id"]) == ["box-a:run-1", "box-b:run-1"]
    assert set(summary["machine"]) == {f"box-a: {ZEN4}", f"box-b: {ZEN3}"}
    by_machine = dict(zip(summary["host"], summary["speedup"], strict=True))
    assert by_machine["box-a"] == pytest.approx(3.0, rel=0.02)
    assert by_machine["box-b"] == pytest.approx(1.5, rel=0.02)

    wide = merged.machine_table(wide=True)
    assert len(wide) == 1  # one layer, one model, one kernel build: one row, a column per machine
    cells = {c: wide.iloc[0][c] for c in wide.columns if c.startswith("box-")}
    assert cells[f"box-a: {ZEN4}"].startswith("3.00x") and cells[f"box-b: {ZEN3}"].startswith("1.50x")
    assert revision_notes(merged.records()) == []


def test_different_models_and_kernel_builds_are_not_pooled_and_said_so(tmp_path: Path) -> None:
    a = machine_log("box-a", ZEN4, 3.0).to_jsonl(tmp_path / "a.jsonl")
    b = machine_log("box-b", ZEN4, 2.0, model="LlamaForCausalLM bbbb", kernel="_rms_2").to_jsonl(
        tmp_path / "b.jsonl"
    )
    merged = ResultLog.load(a, b)
    wide = merged.machine_table(wide=True)
    assert len(wide) == 2  # two rows: the revisions differ, so the machines are not side by side
    notes = revision_notes(merged.records())
    assert any("2 model revisions" in n and "kept apart" in n for n in notes)
    assert any(n.startswith("RMSNorm: 2 kernel builds") for n in notes)


def test_machine_plot_and_report_show_each_machine(tmp_path: Path) -> None:
    from kernel_explorer.views.machines import machine_figure
    from kernel_explorer.views.report import write_report

    merged = ResultLog.load(
        machine_log("box-a", ZEN4, 3.0).to_jsonl(tmp_path / "a.jsonl"),
        machine_log("box-b", ZEN3, 0.5).to_jsonl(tmp_path / "b.jsonl"),
    )
    fig = machine_figure(merged, "RMSNorm")
    (bar,) = fig.data
    assert list(bar.x) == [f"box-a: {ZEN4}", f"box-b: {ZEN3}"]
    assert bar.y[0] == pytest.approx(3.0, rel=0.02) and bar.y[1] == pytest.approx(0.5, rel=0.02)
    assert all(low >= 0 for low in bar.error_y.arrayminus) and all(h >= 0 for h in bar.error_y.array)
    with pytest.raises(KernelExplorerError, match="measured layers: RMSNorm"):
        machine_figure(merged, "SiLU")
    text = write_report(merged, tmp_path / "r.html", title="t").read_text()
    assert "<h2>Machines</h2>" in text and "box-b: " + ZEN3 in text
    assert "data-chart='machines-RMSNorm'" in text and "Plotly.newPlot" not in text  # drawn as SVG


def test_kernels_benchmark_json_loads_as_that_tools_protocol(tmp_path: Path) -> None:
    payload = {  # the shape `kernels benchmark --output` writes (BenchmarkResult.to_payload)
        "results": [
            {
                "workload": "rms_norm_4096",
                "timingResults": {
                    "mean_ms": 0.05,
                    "std_ms": 0.004,
                    "min_ms": 0.045,
                    "max_ms": 0.08,
                    "q1_ms": 0.047,
                    "q3_ms": 0.052,
                    "iqr_ms": 0.005,
                    "outliers": 2,
                    "iterations": 100,
                },
                "verified": True,
            }
        ],
        "machineInfo": {
            "gpu": "N/A",
            "backend": "cpu",
            "pytorchVersion": "2.13.0",
            "os": "Linux",
            "cpu": "AMD EPYC 9654",
        },
        "kernelCommitSha": "abc123",
        "benchmarkScriptPath": "benchmarks/benchmark.py",
    }
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(payload))
    merged = ResultLog.load(machine_log("box-a", ZEN4, 3.0).to_jsonl(tmp_path / "a.jsonl"), path)
    (record,) = merged.records("kernels_benchmark")
    assert record.values.mean_s == pytest.approx(5e-5) and record.values.iterations == 100
    assert record.values.protocol.startswith("kernels benchmark: the kernel alone")
    assert record.provenance is not None and record.provenance.kernel_id == "abc123"
    assert len(merged.layer_summary()) == 1  # never mixed into the explorer's verdicts
    assert any("kernels benchmark files" in n for n in revision_notes(merged.records()))
    again = ResultLog.from_jsonl(merged.to_jsonl(tmp_path / "all.jsonl"))
    assert again.records("kernels_benchmark") == merged.records("kernels_benchmark")


def test_a_file_that_is_no_log_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"nope": 1}\n')
    with pytest.raises(KernelExplorerError, match=r"x\.jsonl:1 is not a record"):
        ResultLog.load(bad)
    with pytest.raises(KernelExplorerError, match="cannot read"):
        ResultLog.load(tmp_path / "missing.jsonl")
