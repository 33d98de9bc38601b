"""The kinds of measurement: one registry, records that round-trip, summaries every view renders alike.

Each registered kind (`kernel_explorer/measure/kinds/`) owns its record classes, a summary and
(for layer kinds) a plan. These tests hold every kind to that, on an empty log and on a real run of
a tiny Llama, check that the CLI, `%kernels` and the report write one run's interval with the same
text, and that a kind written in one module outside the package is measured, summarized, read back
and offered by the CLI without a line anywhere else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama
from kernel_explorer.measure import kinds as registry
from kernel_explorer.measure import records
from kernel_explorer.measure.kinds import Kind, kind, kinds, value_types
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.records import VALUE_TYPES, Provenance, Record, RunEvent
from kernel_explorer.measure.summary import IntervalCell, Summary
from kernel_explorer.measure.verdict import Verdict


@pytest.fixture(scope="module")
def measured(hub: dict) -> Iterator[Explorer]:
    """A tiny Llama after a short compare, a values run, a model comparison and a time breakdown:
    every kind that starts from the explorer has records."""
    explorer = Explorer(tiny_llama(), include_transformers=False)
    explorer.capture(torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(3)))
    with _quiet():
        explorer.compare(pairs=3)
        explorer.compare("SiLU", measure="values", determinism_runs=2)
        explorer.compare("SiLU", measure="memory", repeats=2, lengths=[], model=False)
        explorer.on("RMSNorm")
        explorer.compare_model(lengths=(8,), decode_tokens=2, pairs=2, decode_pairs=1)
        explorer.breakdown(tokens=8, repeats=1)
    yield explorer
    explorer.reset()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No NoisyMachineWarning from a busy test machine (these tests check shapes and texts)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_every_kind_has_records_of_kinds_no_other_kind_has() -> None:
    found = kinds()
    assert {"time", "values", "model", "outputs", "breakdown", "benchmark"} <= set(found)
    names = [cls.kind for each in found.values() for cls in each.records]
    assert all(each.records for each in found.values())
    assert len(names) == len(set(names)) and RunEvent.kind not in names  # the envelope's own
    assert set(VALUE_TYPES) == {*names, RunEvent.kind} and set(value_types()) == set(names)
    for name, each in found.items():
        assert isinstance(each, Kind) and each.name == name and each.title
        assert (each.plan is None) == bool(each.how)  # compare starts it, or its `how` says what does


def test_an_unknown_kind_or_one_compare_does_not_start_is_one_line(measured: Explorer) -> None:
    with pytest.raises(KernelExplorerError, match=r"No measurement named 'speed'; known measurements: time,"):
        kind("speed")
    with pytest.raises(KernelExplorerError) as info:
        measured.compare("SiLU", measure="model")
    assert str(info.value) == (
        "compare does not measure 'model': Explorer.compare_model() does; "
        f"compare measures one of: {', '.join(registry.measured_by_compare())}."
    )
    with pytest.raises(KernelExplorerError, match="takes no option 'paris'; it takes: pairs,"):
        measured.compare("SiLU", paris=3)


BENCHMARK = {  # the shape `kernels benchmark --output` writes
    "results": [
        {
            "workload": "rms_norm_4096",
            "timingResults": {
                "mean_ms": 0.05,
                "std_ms": 0.004,
                "min_ms": 0.045,
                "max_ms": 0.08,
                "iterations": 100,
            },
            "verified": True,
        }
    ],
    "machineInfo": {"gpu": "N/A", "backend": "cpu", "pytorchVersion": "2.13.0", "cpu": "AMD EPYC 9654"},
    "kernelCommitSha": "abc123",
}


@pytest.mark.parametrize("name", list(kinds()))
def test_every_summary_reads_an_empty_log_and_a_real_run(
    name: str, measured: Explorer, tmp_path: Path
) -> None:
    empty = kind(name).summarize(ResultLog())
    assert isinstance(empty, Summary) and len(empty) == 0 and empty.kind == name
    assert empty.lines() == [] and empty.to_pandas().empty
    assert list(empty.to_pandas().columns) == [n for c in empty.columns for n in c.frame_names()]
    source = measured.results
    if name == "benchmark":  # only a kernels benchmark file, loaded beside a log, makes those
        (tmp_path / "bench.json").write_text(json.dumps(BENCHMARK))
        source = ResultLog.load(source.to_jsonl(tmp_path / "log.jsonl"), tmp_path / "bench.json")
    summary = kind(name).summarize(source)
    assert isinstance(summary, Summary) and summary.kind == name and len(summary) > 0
    frame = summary.to_pandas()
    assert len(frame) == len(summary) and len(summary.lines()) == len(summary)
    assert summary.text().splitlines()[0] == summary.title
    for what, rest in summary.lines():
        assert what and rest and "None" not in rest


def test_the_time_summary_is_the_layer_summary_and_reads_the_verdict_records_numbers(
    measured: Explorer,
) -> None:
    summary = kind("time").summarize(measured.results)
    frame = measured.results.layer_summary()
    assert list(frame.layer) == [row["layer"] for row in summary.rows]
    verdicts = {r.layer: r.values for r in measured.results.records("layer_verdict")}
    for row in summary.rows:
        verdict = verdicts[row["layer"]]  # derived from the pairs, the same Comparison as the record
        assert row["verdict"].verdict is verdict.verdict
        cell = row.get("speedup")
        if not verdict.measurable:  # a busy machine stalled the pairs: no number, on either side
            assert cell is None and row["verdict"].text() == verdict.summary
            continue
        assert isinstance(cell, IntervalCell)
        stored = (verdict.speedup, verdict.speedup_low, verdict.speedup_high)
        assert (cell.median, cell.low, cell.high) == stored


def _value(annotation: str, name: str) -> object:
    """A value for a record field from its annotation (what the JSON form must carry back)."""
    if name == "verdict":
        return Verdict.FASTER
    first = annotation.split("|")[0].strip()
    return {
        "float": 1.25,
        "int": 3,
        "str": f"a {name}",
        "bool": True,
        "tuple[str, ...]": ("RMSNorm", "SiLU"),
    }[first]


@pytest.mark.parametrize("name", sorted(VALUE_TYPES))
def test_every_record_class_round_trips_through_json(name: str) -> None:
    cls = VALUE_TYPES[name]
    values = cls(**{f.name: _value(str(f.type), f.name) for f in dataclasses.fields(cls)})
    origin = Provenance(dtype="float32", shape=(1, 12, 64), threads=2, host="box", hardware="cpu")
    record = Record("run-1", values, "RMSNorm", "model.norm", 12.5, origin)
    assert Record.from_dict(json.loads(json.dumps(record.to_dict()))) == record


def test_a_real_runs_log_round_trips_whole(measured: Explorer, tmp_path: Path) -> None:
    again = ResultLog.from_jsonl(measured.results.to_jsonl(tmp_path / "run.jsonl"))
    assert again.records() == measured.results.records()
    for name in kinds():
        assert kind(name).summarize(again).lines() == kind(name).summarize(measured.results).lines()


def test_the_cli_the_magic_and_the_report_write_one_runs_interval_alike(
    hub: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kernel_explorer.views.answers import answer
    from kernel_explorer.views.cli import _measure
    from kernel_explorer.views.report import write_report

    explorer = Explorer(tiny_llama(), include_transformers=False)
    explorer.capture(torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(3)))
    with _quiet():
        _measure(explorer, ["RMSNorm"], pairs=3, precision=0.05, budget_s=1.0)  # what `compare` prints
    printed = capsys.readouterr().out
    (run,) = {r.run_id for r in explorer.results.records()}
    (row,) = explorer.results.summary("time").select("run_id", run).rows
    cell = row.get("speedup")  # None only where a busy machine stalled the pairs: the verdict says so
    interval = cell.bounds() if cell is not None else row["verdict"].text()  # "1.52x [1.41, 1.60]"
    magic = answer(explorer.results, run, ["time"])  # what `%kernels compare` answers
    (line,) = magic.lines
    assert interval in line and f"  {line}" in printed.splitlines()  # one line, the same in both
    assert interval in magic._repr_html_()
    report = write_report(explorer.results, tmp_path / "r.html", title="r").read_text()
    assert f"<td class='num'>{cell.text() if cell is not None else ''}</td>" in report
    assert row["verdict"].text() in line and row["verdict"].text() in report
    explorer.reset()


TOY_KIND = '''
"""A toy kind: how many captured calls each instance of a layer has (no timing)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernel_explorer.measure.kinds.kind import Kind, records_of
from kernel_explorer.measure.records import Record
from kernel_explorer.measure.summary import Column, NumberCell, Summary


@dataclass(frozen=True)
class CallCount:
    kind: ClassVar[str] = "toy_call_count"
    calls: int


def plan(request):
    request.check_options()

    def count(run_id, name):
        captured = request.inputs(False)
        for path, calls in captured.for_layer(name).items():
            yield Record(run_id, CallCount(len(calls)), name, path)

    return [lambda run_id, n=name: count(run_id, n) for name in request.names]


def summarize(source):
    rows = tuple(
        {"run_id": r.run_id, "layer": r.layer, "instance": r.instance, "calls": NumberCell(r.values.calls)}
        for r in records_of(source, CallCount)
    )
    columns = (
        Column("run_id", "run", line=None),
        Column("layer", "layer", what=True),
        Column("instance", "instance", what=True, line=" {}"),
        Column("calls", "calls", "number", line="{} captured calls"),
    )
    return Summary("toy", "Captured calls per instance", columns, rows)


KIND = Kind("toy", "Captured calls per instance", (CallCount,), summarize, plan)
'''


@pytest.fixture
def toy_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A kind in one module of its own, in a folder the registry is pointed at (as if it were in
    measure/kinds/): nothing else is edited."""
    folder = tmp_path / "kinds"
    folder.mkdir()
    (folder / "toy.py").write_text(TOY_KIND)
    monkeypatch.setattr(registry, "__path__", [*registry.__path__, str(folder)])
    registry.kinds.cache_clear()
    registry.value_types.cache_clear()
    yield
    monkeypatch.undo()
    sys.modules.pop("kernel_explorer.measure.kinds.toy", None)
    registry.kinds.cache_clear()
    registry.value_types.cache_clear()


def test_a_kind_in_one_module_is_measured_read_back_and_offered_everywhere(
    toy_kind: None, hub: dict, tmp_path: Path
) -> None:
    from kernel_explorer.views.answers import answer
    from kernel_explorer.views.cli import build_parser
    from kernel_explorer.views.report import write_report

    explorer = Explorer(tiny_llama(), include_transformers=False)
    explorer.capture(torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(3)))
    handle = explorer.compare("RMSNorm", measure="toy")
    assert handle.outcome == "finished"
    found = explorer.results.records("toy_call_count")
    assert len(found) == len(explorer.group("RMSNorm")) and all(r.values.calls >= 1 for r in found)
    assert "toy_call_count" in records.VALUE_TYPES
    again = ResultLog.from_jsonl(explorer.results.to_jsonl(tmp_path / "toy.jsonl"))
    assert again.records() == explorer.results.records()
    lines = answer(explorer.results, handle.run_id, ["toy"]).lines
    assert lines[0].startswith("RMSNorm model.") and lines[0].endswith("captured calls")
    args = build_parser().parse_args(["compare", "RMSNorm", "--measure", "toy"])
    assert args.measure == "toy"
    report = write_report(explorer.results, tmp_path / "r.html", title="r").read_text()
    assert "<h2>Captured calls per instance</h2>" in report
