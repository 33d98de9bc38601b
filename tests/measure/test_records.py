"""Typed records: every kind has its value class, and the dict form round-trips or fails by name."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.records import VALUE_TYPES, LayerLatency, Provenance, Record, RunEvent


def test_every_kind_is_one_value_class() -> None:
    assert set(VALUE_TYPES) == {
        "layer_latency",
        "layer_calibration",
        "layer_verdict",
        "layer_divergence",
        "layer_determinism",
        "model_prefill",
        "model_decode",
        "model_verdict",
        "time_share",
        "model_agreement",
        "compile_time",
        "model_throughput",
        "gradient_divergence",
        "training_agreement",
        "model_pair",
        "kernels_benchmark",
        "run",
        "layer_memory",
        "attention_memory",
        "model_weights",
        "model_prefill_memory",
    }
    assert all(cls.kind == kind for kind, cls in VALUE_TYPES.items())


def test_round_trip_through_the_dict_form() -> None:
    origin = Provenance(dtype="bfloat16", shape=(1, 7, 576), threads=2, isa="avx2", torch="2.13.0")
    record = Record(
        "run-1", LayerLatency(2e-6, 1e-6, 2.0, kernel_on=False), "RMSNorm", "model.norm", provenance=origin
    )
    data = record.to_dict()
    assert data["kind"] == "layer_latency" and data["values"]["speedup"] == 2.0
    assert Record.from_dict(json.loads(json.dumps(data))) == record  # through JSON: tuples come back


def test_training_records_of_older_logs_load_as_the_folded_kinds() -> None:
    """The twins (TrainingLatency, TrainingCalibration, TrainingVerdict) were folded into the layer
    kinds with a `mode` field; a log written before still loads."""
    data = Record("run-1", LayerLatency(2e-6, 1e-6, 2.0), "RMSNorm", "model.norm").to_dict()
    data["kind"] = "training_latency"
    del data["values"]["mode"], data["values"]["stalled"]
    loaded = Record.from_dict(data)
    assert loaded.kind == "layer_latency" and loaded.values.mode == "training"


def test_a_renamed_field_fails_by_name_not_silently() -> None:
    data = Record("run-1", RunEvent("started")).to_dict()
    data["values"] = {"what": "started"}
    with pytest.raises(TypeError, match="what"):
        Record.from_dict(data)
    data["kind"] = "layer_speed"
    with pytest.raises(ValueError, match="unknown record kind 'layer_speed'"):
        Record.from_dict(data)
    with pytest.raises(AttributeError):
        _ = Record("run-1", RunEvent("started")).values.speedup  # type: ignore[union-attr]


def test_pandas_columns_are_the_value_fields() -> None:
    log = ResultLog([Record("run-1", LayerLatency(2e-6, 1e-6, 2.0), "RMSNorm", "model.norm")])
    frame = log.to_pandas("layer_latency")
    fields = [f.name for f in dataclasses.fields(LayerLatency)]
    assert list(frame.columns) == ["kind", "run_id", "layer", "instance", "time", *fields]


def test_a_verdict_is_a_value_and_older_logs_sentences_load_as_their_member(tmp_path) -> None:
    """Code decides by the member; a log from before verdicts were values (the stall reason written
    into the verdict) loads as NOT_MEASURABLE, and the reader still sees the reason."""
    from kernel_explorer.measure.records import LayerVerdict
    from kernel_explorer.measure.verdict import Verdict

    fields = dict(
        pairs=7, instances=1, speedup=1.0, speedup_low=0.0, speedup_high=2.0, confidence=0.95,
        noise_floor=0.02, accuracy="bitwise equal", stopped_by="pairs", stalled=4,
    )  # fmt: skip
    old = {
        "run_id": "run-1", "kind": "layer_verdict", "layer": "SiLU", "instance": None, "time": 0.0,
        "values": fields | {"verdict": "not measurable here (the machine stalled 4 of 7 pairs)"},
    }  # fmt: skip
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(old) + "\n")
    loaded = ResultLog.from_jsonl(path).records("layer_verdict")[0].values
    assert loaded.verdict is Verdict.NOT_MEASURABLE and not loaded.measurable
    assert loaded.summary == "not measurable here (the machine stalled 4 of 7 pairs)"
    again = Record.from_dict(json.loads(json.dumps(Record("run-2", loaded, "SiLU").to_dict())))
    assert again.values.verdict is Verdict.NOT_MEASURABLE  # written as its text, read as its member
    faster = LayerVerdict(**fields | {"verdict": "faster", "stalled": 0})
    assert faster.verdict is Verdict.FASTER and faster.measurable
    with pytest.raises(ValueError, match="unknown verdict 'quicker'"):
        LayerVerdict(**fields | {"verdict": "quicker"})


def test_no_module_decides_by_a_verdicts_text() -> None:
    """Verdicts are compared as members: no string "faster"/"slower" in code and no
    `.startswith("not measurable...")` outside the enum's own module (docstrings may say the words)."""
    import ast
    from pathlib import Path

    import kernel_explorer

    package = Path(kernel_explorer.__file__).parent
    offenders = []
    for path in package.rglob("*.py"):
        if path.name == "verdict.py" or "hub" in path.relative_to(package).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            literal = isinstance(node, ast.Constant) and node.value in ("faster", "slower")
            parsing = (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", "") == "startswith"
                and any(
                    isinstance(a, ast.Constant) and str(a.value).startswith("not measurable")
                    for a in node.args
                )
            )
            if literal or parsing:
                offenders.append(f"{path.relative_to(package)}:{node.lineno}")
    assert offenders == []
