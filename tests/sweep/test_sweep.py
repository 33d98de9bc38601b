"""The sweep on a real two-node Ray cluster (127.0.0.1; `ray_cluster.py`): both machines in one merged
table, a rerun that skips what is done, and a node killed mid-task that loses only its own task.

The model is a tiny random Llama saved with save_pretrained (3 s per task instead of a minute for
SmolLM2; the sweep runs the very same `kernel-explorer compare --model FOLDER` either way), compared
on one layer with a fixed number of pairs, to keep CI time to about a minute.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from ray_cluster import compare_processes, two_node_cluster

from kernel_explorer.loading import tiny_llama
from kernel_explorer.sweep import sweep
from kernel_explorer.views.cli import main

pytestmark = pytest.mark.slow

WORKER = f"{socket.gethostname()}/worker_b"  # the labelled node's name in the records
HEAD = socket.gethostname()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, hub: dict):  # type: ignore[no-untyped-def]
    with two_node_cluster(tmp_path_factory.mktemp("ray")) as found:
        yield found


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models") / "tiny-llama"
    tiny_llama().save_pretrained(folder)
    return folder


def run(cluster: tuple, model_folder: Path, out: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    address = cluster[0]
    return sweep(address, [str(model_folder)], out=out, layers=["RMSNorm"], pairs=3, say=lines.append)


def test_both_nodes_merge_into_one_table_and_a_rerun_skips_them(
    cluster: tuple, model_folder: Path, tmp_path: Path
) -> None:
    lines: list[str] = []
    result = run(cluster, model_folder, tmp_path / "out", lines)
    assert [o.line() for o in result.failed] == []
    assert sorted(o.node for o in result.outcomes) == sorted([HEAD, WORKER])
    assert all(any(line.startswith(f"[{node}] ") for line in lines) for node in (HEAD, WORKER))
    summary = result.log.layer_summary()
    assert sorted(summary["host"]) == sorted([HEAD, WORKER])  # one row per machine, runs kept apart
    assert summary["speedup"].notna().all()
    wide = result.log.machine_table(wide=True)
    assert len(wide) == 1 and sum(c.startswith((f"{HEAD}:", f"{WORKER}:")) for c in wide.columns) == 2
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        p.name for p in (o.path for o in result.outcomes) if p is not None
    )

    again: list[str] = []
    rerun = run(cluster, model_folder, tmp_path / "out", again)
    assert {o.state for o in rerun.outcomes} == {"skipped"}  # nothing measured twice
    assert len(rerun.log) == len(result.log)


def test_a_node_killed_during_its_task_loses_only_that_task(
    cluster: tuple, model_folder: Path, tmp_path: Path
) -> None:
    _, _, worker = cluster
    lines: list[str] = []
    found: dict = {}
    thread = threading.Thread(
        target=lambda: found.update(result=run(cluster, model_folder, tmp_path / "o", lines))
    )
    thread.start()
    deadline = time.monotonic() + 180
    while not compare_processes(WORKER):  # the worker's compare is running: kill its node now
        assert thread.is_alive() and time.monotonic() < deadline, lines
        time.sleep(0.2)
    worker.kill()
    thread.join(timeout=300)
    result = found["result"]
    states = {o.node: o.state for o in result.outcomes}
    assert states == {HEAD: "done", WORKER: "failed"}
    (failure,) = [line for line in lines if "FAILED" in line]
    assert failure.startswith(f"[{WORKER}] ") and "\n" not in failure
    assert set(result.log.layer_summary()["host"]) == {HEAD}  # the other node's results arrived
    assert not compare_processes(WORKER)


def test_bad_sweep_input_is_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    assert main(["sweep", "--address", "127.0.0.1:1", "--models", "x", "--out", str(file)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is a file" in err
