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
        "model_throughput",
        "gradient_divergence",
        "training_agreement",
        "model_pair",
        "kernels_benchmark",
        "run",
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
