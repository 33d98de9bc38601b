"""ResultLog's columns (measure/record_columns.py): exact round trips, spilling, threads, memory."""

from __future__ import annotations

import gc
import random
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from kernel_explorer.measure import record_columns
from kernel_explorer.measure.comparison import Comparison
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.records import (
    LayerCalibration,
    LayerDivergence,
    LayerLatency,
    LayerVerdict,
    ModelThroughput,
    Provenance,
    Record,
    RunEvent,
)
from kernel_explorer.measure.verdict import Verdict

ORIGINS = [
    Provenance(dtype="float32", shape=(1, 15, 576), threads=2, isa="avx2", kernel_id="bundled/rmsnorm"),
    Provenance(dtype="float32", shape=(1, 15, 576), threads=2, isa="avx512", kernel_id="bundled/rmsnorm"),
    Provenance(dtype="bfloat16", threads=1, kernel_id="k", candidate="peer/k@avx2:Layer", host="node-2"),
    None,
]


def _verdict(speedup: float) -> LayerVerdict:
    return LayerVerdict(
        pairs=9,
        instances=3,
        speedup=speedup,
        speedup_low=speedup * 0.9,
        speedup_high=speedup * 1.1,
        confidence=0.95,
        noise_floor=0.03,
        verdict=Verdict.parse("faster"),
        accuracy="rounds differently",
        stopped_by="pairs",
        notes=("look twice",),
    )


def _records(count: int, seed: int = 0) -> list[Record]:
    """Every kind a Run makes, interleaved as a Run interleaves them, with Nones, both modes, kernels
    off, stalls, several runs, layers, instances and provenances, and a record without a layer."""
    rng = random.Random(seed)
    made = []
    for i in range(count):
        run, layer = f"run-{i // 700}", rng.choice(["RMSNorm", "SiLU", None])
        instance, origin = f"model.layers.{i % 30}.mlp", rng.choice(ORIGINS)
        pick = rng.random()
        if pick < 0.7:
            pytorch_s, kernel_s = rng.uniform(1e-6, 1e-4), rng.uniform(1e-6, 1e-4)
            values: object = LayerLatency(
                pytorch_s,
                kernel_s,
                pytorch_s / kernel_s,
                kernel_on=rng.random() < 0.8,
                repeat=rng.randint(1, 3000),
                mode=rng.choice(["inference", "training"]),
                stalled=rng.random() < 0.1,
            )
        elif pick < 0.8:
            first, second = rng.uniform(1e-6, 1e-5), rng.uniform(1e-6, 1e-5)
            values = LayerCalibration(first, second, first / second, rng.randint(1, 9))
        elif pick < 0.9:
            values = LayerDivergence(
                rng.choice(["float32", "bfloat16"]),
                rng.randint(1, 10**9),
                rng.random(),
                rng.random() < 0.5,
                max_abs=rng.choice([None, rng.random(), float("inf"), -0.0]),
                max_ulp=rng.choice([None, rng.randint(0, 2**40)]),
                kernel_err64=rng.choice([None, rng.random()]),
                kernel_on=rng.random() < 0.5,
            )
        elif pick < 0.95:
            values = _verdict(rng.uniform(0.5, 3.0))
        elif pick < 0.98:
            values = ModelThroughput(rng.uniform(10, 100), rng.randint(0, 60))
        else:
            values = RunEvent(rng.choice(["started", "finished"]), rng.choice(["", "ValueError: no"]))
        made.append(Record(run, values, layer, instance, 1.7e9 + i * 1e-3 + rng.random(), origin))  # type: ignore[arg-type]
    return made


def _same(found: list[Record], made: list[Record]) -> None:
    """Equal, and of the same types down to each field (a float stays a float, None stays None)."""
    assert found == made
    for a, b in zip(found, made, strict=True):
        assert type(a.values) is type(b.values)
        assert [type(v) for v in a.values.__dict__.values()] == [type(v) for v in b.values.__dict__.values()]


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Chunks of 64 rows, spilled past 16 KB, into a spill folder under this test's own cache root."""
    monkeypatch.setattr(record_columns, "CHUNK_ROWS", 64)
    monkeypatch.setattr(record_columns, "SPILL_BYTES", 16_000)
    monkeypatch.setattr(record_columns, "_folder", None)
    monkeypatch.setenv("KERNEL_EXPLORER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "log-columns"


def test_records_come_back_equal_in_order_across_kinds_and_runs() -> None:
    made = _records(3000)
    log = ResultLog()
    for record in made:
        log.append(record)
    assert len(log) == len(made) and log.kinds() == list(dict.fromkeys(r.kind for r in made))
    _same(log.records(), made)
    _same(list(log), made)
    for kind in ("layer_latency", "layer_divergence", "layer_verdict", "run"):
        for run in ("run-0", "run-3", "no-such-run", None):
            wanted = [r for r in made if r.kind == kind and (run is None or r.run_id == run)]
            _same(log.records(kind, run), wanted)
    _same(log.records(run_id="run-2"), [r for r in made if r.run_id == "run-2"])
    assert log.records("model_prefill") == [] and ResultLog(made).records() == made


def test_columns_hold_every_field_and_the_provenance() -> None:
    made = _records(2000, seed=1)
    log = ResultLog(made)
    for kind in ("layer_latency", "layer_divergence", "layer_verdict"):
        wanted = [r for r in made if r.kind == kind and r.run_id == "run-1"]
        columns = log.columns(kind, "run-1")
        assert [made[s] for s in columns["seq"].tolist()] == wanted  # seq: the place in the whole log
        for name in wanted[0].values.__dict__:
            found = columns[name].tolist()
            expected = [getattr(r.values, name) for r in wanted]
            if columns[name].dtype == np.float64:  # a field that may be None: NaN where it is
                expected = [np.nan if v is None else v for v in expected]
                np.testing.assert_array_equal(columns[name], np.array(expected, dtype=float))
            else:
                assert found == expected, name
        assert columns["run_id"].tolist() == [r.run_id for r in wanted]
        assert columns["layer"].tolist() == [r.layer for r in wanted]
        assert columns["instance"].tolist() == [r.instance for r in wanted]
        assert columns["time"].tolist() == [r.time for r in wanted]
        for name in ("kernel_id", "isa", "candidate"):
            assert columns[name].tolist() == [getattr(r.provenance, name, None) for r in wanted], name
    assert log.columns("layer_latency")["pytorch_s"].dtype == np.float64
    assert log.columns("layer_latency")["kernel_on"].dtype == np.bool_
    assert log.columns("model_prefill")["tokens"].shape == (0,)  # a kind never appended: no rows
    with pytest.raises(Exception, match="No record kind 'nonsense'"):
        log.columns("nonsense")


def test_values_not_of_their_declared_types_are_kept_as_they_were_appended() -> None:
    odd = [
        Record("r", LayerLatency(np.float64(2e-6), 1e-6, 2.0), "RMSNorm", "a", 1.0),  # a numpy float
        Record("r", LayerLatency(2, 1, 2), "RMSNorm", "b", 2.0),  # ints where floats are declared
        Record("r", LayerLatency(2e-6, 1e-6, 2.0), "RMSNorm", "c", 3),  # an int time
        Record("r", LayerLatency(2e-6, 1e-6, 2.0), "RMSNorm", "d", 4.0),  # fits
    ]
    log = ResultLog(odd)
    found = log.records()
    assert [a is b for a, b in zip(found, odd, strict=True)] == [True, True, True, False]
    _same(found, odd)
    columns = log.columns("layer_latency")  # some kept as objects: built from the records, in order
    assert columns["instance"].tolist() == ["a", "b", "c", "d"]
    assert columns["pytorch_s"].tolist() == [2e-6, 2, 2e-6, 2e-6]


def test_past_the_spill_size_the_oldest_chunks_go_to_files_and_come_back_whole(
    small_chunks: Path, tmp_path: Path
) -> None:
    made = _records(6000, seed=2)
    log = ResultLog()
    for record in made:
        log.append(record)
    files = list(small_chunks.glob("*/*.npz"))
    stores = [s for s in log._columns.values() if s is not None]
    assert files and sum(s.spilled_rows for s in stores) > 3000 and log.spill_error is None
    assert sum(s.sealed_bytes for s in stores) <= record_columns.SPILL_BYTES
    _same(log.records(), made)
    _same(
        log.records("layer_latency", "run-4"),
        [r for r in made if r.kind == "layer_latency" and r.run_id == "run-4"],
    )
    assert log.columns("layer_calibration")["ratio"].tolist() == [
        r.values.ratio for r in made if r.kind == "layer_calibration"
    ]
    again = ResultLog.from_jsonl(log.to_jsonl(tmp_path / "log.jsonl"))
    _same(again.records(), made)
    record_columns.SPILL_BYTES = 10**12  # put back by the fixture
    whole = ResultLog(made)  # in memory: the summary reads the same numbers from the spilled files
    assert log.layer_summary().equals(whole.layer_summary())
    del log, again, stores
    gc.collect()
    assert not list(small_chunks.glob("*/*.npz"))  # a log's files go with it


def test_a_cache_folder_that_cannot_be_written_keeps_the_columns_in_memory(
    small_chunks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("KERNEL_EXPLORER_CACHE", str(blocked))
    made = _records(3000, seed=3)
    log = ResultLog(made)
    assert log.spill_error is not None and "KERNEL_EXPLORER_CACHE" in log.spill_error
    _same(log.records(), made)


def test_jsonl_round_trip_is_equal(tmp_path: Path) -> None:
    made = _records(2500, seed=4)
    path = ResultLog(made).to_jsonl(tmp_path / "log.jsonl")
    _same(ResultLog.from_jsonl(path).records(), made)
    assert len(path.read_text().splitlines()) == len(made)


def test_subscribers_receive_the_objects_appended() -> None:
    log = ResultLog()
    seen: list[Record] = []
    log.subscribe(seen.append)
    made = _records(500, seed=5)
    for record in made:
        log.append(record)
    assert len(seen) == len(made) and all(a is b for a, b in zip(seen, made, strict=True))


def test_two_threads_appending_while_a_third_reads() -> None:
    log = ResultLog()
    per_thread = 20_000
    reads: list[int] = []
    done = threading.Event()

    def append(run: str) -> None:
        for i in range(per_thread):
            log.append(Record(run, LayerLatency(float(i), 1.0, float(i)), "RMSNorm", f"n{i % 7}", float(i)))

    def read() -> None:
        while not done.is_set():
            found = log.records("layer_latency")
            columns = log.columns("layer_latency")
            assert len(columns["seq"]) >= len(found)
            reads.append(len(found))

    threads = [threading.Thread(target=append, args=(run,)) for run in ("a", "b")]
    reader = threading.Thread(target=read)
    reader.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    reader.join()
    assert len(log) == 2 * per_thread and reads
    for run in ("a", "b"):  # each thread's records, all of them, in the order it appended them
        assert [r.values.pytorch_s for r in log.records("layer_latency", run)] == [
            float(i) for i in range(per_thread)
        ]
    assert sorted(log.columns("layer_latency")["seq"].tolist()) == list(range(2 * per_thread))


def test_columns_give_the_comparison_the_records_give() -> None:
    made = [r for r in _records(3000, seed=6) if r.kind == "layer_latency" and r.run_id == "run-2"]
    off = [r for r in made if not r.values.kernel_on]  # PyTorch against itself only
    for chosen in (made, off):
        columns = ResultLog(chosen).columns("layer_latency")
        found = Comparison.of_columns(columns, [1.0, 1.01])
        assert found == Comparison.of_pairs([r.values for r in chosen], [1.0, 1.01])
        assert found.kernel_on == (chosen is made) and found.pairs == len(
            [r for r in chosen if r.values.kernel_on] or chosen
        )
    assert Comparison.of_columns({}) == Comparison.of_pairs([])


def test_a_latency_record_costs_a_tenth_of_its_objects() -> None:
    """100,000 latency pairs of a Run (60 instances, a provenance each) take under 100 bytes each in
    the log, numpy's arrays included (tracemalloc sees them); measured here about 30 (full chunks
    packed to 24: a run id or a mode is one value per chunk, a time four bytes, one of the three
    floats the quotient of the others). The same loop against the log that kept a Record and a
    LayerLatency per pair measured about 430 bytes a pair, which is what grew a headless Run on the
    default model by 7 to 17 MB a minute (bench/run_memory.py)."""
    origins = [
        Provenance(dtype="float32", shape=(1, 15, 576), threads=2, isa="avx2", kernel_id="k", host="h")
        for _ in range(60)
    ]
    log = ResultLog()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100_000):
            pytorch_s = 1e-5 * (1 + i % 7)
            log.append(
                Record(
                    "run-1",
                    LayerLatency(pytorch_s, 1e-5, pytorch_s / 1e-5, True, 100 + i % 60, stalled=i % 50 == 0),
                    "RMSNorm",
                    f"model.layers.{i % 30}.input_layernorm",
                    time.time(),
                    origins[i % 60],
                )
            )
        gc.collect()
        per_record = (tracemalloc.get_traced_memory()[0] - before) / 100_000
    finally:
        tracemalloc.stop()
    assert len(log) == 100_000 and per_record < 100, f"{per_record:.0f} bytes a record"
