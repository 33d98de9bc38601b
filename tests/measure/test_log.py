"""ResultLog: subscribers, pandas, JSON lines round trip, summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.records import LayerDivergence, LayerLatency, Record, RunEvent


def _log() -> ResultLog:
    log = ResultLog()
    for i, speedup in enumerate([2.0, 3.0, 4.0]):
        log.append(
            Record(
                "run-1", LayerLatency(pytorch_s=speedup, kernel_s=1.0, speedup=speedup), "RMSNorm", f"n{i}"
            )
        )
    log.append(
        Record(
            "run-1",
            LayerDivergence(
                dtype="float32",
                elements=4,
                bitwise_equal=0.5,
                allclose=True,
                max_abs=1e-7,
                max_ulp=2,
                kernel_err64=2e-7,
                pytorch_err64=1e-7,
            ),
            "RMSNorm",
            "n0",
        )
    )
    return log


def test_subscribers_get_every_record_and_their_errors_do_not_stop_it() -> None:
    log = ResultLog()
    seen: list[str] = []
    unsubscribe = log.subscribe(lambda r: seen.append(r.kind))
    log.subscribe(lambda r: 1 / 0)
    log.append(Record("run-1", RunEvent("started")))
    unsubscribe()
    log.append(Record("run-1", RunEvent("finished")))
    assert seen == ["run"] and len(log) == 2
    assert len(log.subscriber_errors) == 2 and isinstance(log.subscriber_errors[0], ZeroDivisionError)


def test_jsonl_round_trip(tmp_path: Path) -> None:
    log = _log()
    again = ResultLog.from_jsonl(log.to_jsonl(tmp_path / "results.jsonl"))
    assert again.records() == log.records()


def test_pandas_and_summary() -> None:
    log = _log()
    frame = log.to_pandas("layer_latency")
    assert list(frame.speedup) == [2.0, 3.0, 4.0] and set(frame.instance) == {"n0", "n1", "n2"}
    (row,) = log.layer_summary().to_dict("records")
    assert row["layer"] == "RMSNorm" and row["pairs"] == 3 and row["speedup"] == 3.0
    assert row["instances"] == 3  # pairs and instances counted apart
    assert row["speedup_q1"] == 2.5 and row["max_ulp"] == 2 and row["kernel_err64"] == 2e-7


def test_summary_per_run_keeps_pytorch_against_pytorch_apart_and_flags_runs_that_disagree() -> None:
    from kernel_explorer.measure.records import LayerCalibration

    log = ResultLog()
    for run, speedups in (
        ("run-1", [3.0, 3.1, 2.9, 3.0, 3.05, 2.95, 3.0]),
        ("run-2", [2.0, 2.1, 1.9, 2.0, 2.0, 2.05, 1.95]),
    ):
        for s in speedups:
            log.append(Record(run, LayerLatency(s * 1e-6, 1e-6, s), "RMSNorm", "n0"))
        for r in (1.0, 1.01, 0.99, 1.0, 1.02):
            log.append(Record(run, LayerCalibration(r * 1e-6, 1e-6, r), "RMSNorm", "n0"))
    for s in (1.0, 1.02, 0.98):
        log.append(Record("run-3", LayerLatency(s * 1e-6, 1e-6, s, kernel_on=False), "SiLU", "n1"))
    rows = {(r["run_id"], r["layer"]): r for r in log.layer_summary().to_dict("records")}
    first, second, off = rows[("run-1", "RMSNorm")], rows[("run-2", "RMSNorm")], rows[("run-3", "SiLU")]
    assert first["verdict"] == "faster" and first["speedup_low"] <= 3.0 <= first["speedup_high"]
    assert first["aa_pairs"] == 5 and 0 < first["noise_floor"] < 0.05
    grow = 1 + first["noise_floor"]  # the interval across runs: the run's, widened by the floor
    assert first["across_low"] == first["speedup_low"] / grow
    assert first["across_high"] == first["speedup_high"] * grow
    assert first["runs_agree"] is False and second["runs_agree"] is False  # 3x and 2x do not overlap
    assert off["verdict"] == "PyTorch against PyTorch (kernel off)" and off["pairs"] == 3
    assert first["pairs"] == 7 and first["instances"] == 1 and off["instances"] == 1


def test_export_by_suffix_and_its_errors(tmp_path: Path) -> None:
    import pandas as pd
    import pytest

    from kernel_explorer.errors import KernelExplorerError

    log = _log()
    frame = pd.read_csv(log.export(tmp_path / "r.csv"))
    assert len(frame) == len(log) and "speedup" in frame.columns
    assert ResultLog.from_jsonl(log.export(tmp_path / "r.jsonl")).records() == log.records()
    with pytest.raises(KernelExplorerError, match=r"\.csv, \.parquet or \.jsonl"):
        log.export(tmp_path / "r.xlsx")
    with pytest.raises(KernelExplorerError, match="does not exist"):
        log.export(tmp_path / "missing" / "r.csv")


def _breakdown_and_verdicts(on: tuple[str, ...]) -> ResultLog:
    """A breakdown (RMSNorm 2%, SiLU 4% of prefill), both layers measured, and a model run with `on`."""
    from kernel_explorer.measure.comparison import Comparison
    from kernel_explorer.measure.records import LayerVerdict, ModelVerdict, TimeShare

    records = [
        Record("b", TimeShare("prefill", 16, name, share / 1e3, share / 100, 0.0))
        for name, share in (("RMSNorm", 2.0), ("SiLU", 4.0), ("rest", 94.0))
    ]
    for name, speedup in (("RMSNorm", 3.0), ("SiLU", 2.0)):
        found = Comparison((speedup,) * 12)
        records.append(
            Record("c", LayerVerdict(instances=1, **found.fields(), accuracy="", stopped_by="pairs"), name)
        )  # type: ignore[arg-type]
    model = Comparison((1.01,) * 7)
    records.append(Record("m", ModelVerdict(measure="prefill", tokens=16, **model.fields(), kernels_on=on)))  # type: ignore[arg-type]
    return ResultLog(records)


def test_amdahl_predicts_from_the_kernels_the_model_run_had_on_and_says_which() -> None:
    """%kernels bench printed 1.13x predicted with only RMSNorm (2%) on: every measured kernel counted."""
    (row,) = _breakdown_and_verdicts(("RMSNorm",)).model_summary().to_dict("records")
    assert row["predicted_with"] == "with RMSNorm on"
    assert row["predicted_from_layers"] == pytest.approx(1 / (0.98 + 0.02 / 3.0))
    (none,) = _breakdown_and_verdicts(()).model_summary().to_dict("records")
    assert none["predicted_with"] == "with no measured kernel on" and none["predicted_from_layers"] == 1.0
    (both,) = _breakdown_and_verdicts(("RMSNorm", "SiLU")).model_summary().to_dict("records")
    assert both["predicted_from_layers"] == pytest.approx(1 / (0.94 + 0.02 / 3.0 + 0.04 / 2.0))
    assert both["predicted_with"] == "with SiLU, RMSNorm on"  # in order of share
