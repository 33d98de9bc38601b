"""Kernels side by side for one layer: PyTorch, then each candidate on this device, one row each,
with its own speedup and interval, accuracy against float64, memory once measured and state, the
row that runs now marked. Notebook 03 measured the bundled SiLU (about 1.5x) and the user's own
(about 0.3x) in one run, and every view showed one "SiLU" number.

Real parts: the tiny Llama, the bundled RMSNorm kernel and a Python-only peer (float64 inside, so
its outputs differ from PyTorch's: the two rows must not read alike)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_repos import write_noarch_repo

from kernel_explorer import Explorer
from kernel_explorer.loading import tiny_llama
from kernel_explorer.records import IntervalCell, Summary


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory, hub: dict) -> Explorer:
    """One run comparing the bundled kernel and the peer, each switched on for its turn."""
    source = write_noarch_repo(tmp_path_factory.mktemp("peer") / "py-rmsnorm")
    explorer = Explorer(tiny_llama(), peers=[source])
    explorer.compare("RMSNorm", candidates=["rmsnorm", "py-rmsnorm"], pairs=3, calibration_pairs=2)
    yield explorer
    explorer.reset()


def _rows(summary: Summary) -> dict[str, dict]:
    return {f"{row['candidate']} [{row['source']}]": dict(row) for row in summary.rows}


def test_each_candidate_is_a_row_with_its_own_numbers(measured: Explorer) -> None:
    summary = measured.side_by_side("RMSNorm")
    rows = _rows(summary)
    assert list(rows)[:3] == ["PyTorch [torch]", "rmsnorm [bundled]", "py-rmsnorm [peer]"], list(rows)
    bundled, peer = rows["rmsnorm [bundled]"], rows["py-rmsnorm [peer]"]
    for row in (bundled, peer):
        assert isinstance(row["speedup"], IntervalCell) and row["speedup"].low <= row["speedup"].high
        assert row["state"] == "ready" and row["run_id"] == measured.results.records("run")[0].run_id
        assert "float64" in str(row["accuracy"]) or row["accuracy"]
    assert bundled["speedup"] != peer["speedup"]  # two kernels, two intervals (never one "RMSNorm" number)
    frame = measured.results.layer_summary()
    assert sorted(frame.speedup.round(6)) == sorted(
        round(r["speedup"].median, 6) for r in (bundled, peer)
    )  # the time kind's own numbers, matched to each candidate
    # the peer computes in float64: its error against float64 is not the bundled kernel's
    assert peer["error"].value != bundled["error"].value
    assert rows["PyTorch [torch]"]["accuracy"] == "the reference"


def test_the_row_that_runs_now_is_marked(measured: Explorer) -> None:
    rows = _rows(measured.side_by_side("RMSNorm"))
    count = len(measured.running("RMSNorm"))
    assert rows["PyTorch [torch]"]["now"] == f"▶ all {count}" and not rows["py-rmsnorm [peer]"]["now"]
    measured.on("RMSNorm", candidate="py-rmsnorm")
    try:
        rows = _rows(measured.side_by_side("RMSNorm"))
        assert rows["py-rmsnorm [peer]"]["now"] == f"▶ all {count}"
        assert not rows["PyTorch [torch]"]["now"] and not rows["rmsnorm [bundled]"]["now"]
        measured.off("RMSNorm", [measured.group("RMSNorm").instances[0]])
        rows = _rows(measured.side_by_side("RMSNorm"))
        assert rows["py-rmsnorm [peer]"]["now"] == f"▶ {count - 1} of {count}"
        assert rows["PyTorch [torch]"]["now"] == f"▶ 1 of {count}"
    finally:
        measured.reset()


def test_every_form_reads_the_cells_own_text(measured: Explorer) -> None:
    summary = measured.side_by_side("RMSNorm")
    text = summary.text()
    speedup = _rows(summary)["py-rmsnorm [peer]"]["speedup"].bounds()
    assert speedup in text and "▶" in text
    lines = dict(summary.lines())
    assert speedup in lines["py-rmsnorm [peer]"]
    html = summary._repr_html_()
    assert speedup in html and "white-space: nowrap" in html
    assert "memory:" in " ".join(summary.notes)  # not measured yet: the note says how
    frame = summary.to_pandas()
    assert list(frame.candidate[:3]) == ["PyTorch", "rmsnorm", "py-rmsnorm"]


def test_a_candidate_never_measured_says_how_to_measure_it(hub: dict, tmp_path: Path) -> None:
    explorer = Explorer(tiny_llama(), peers=[write_noarch_repo(tmp_path / "py-rmsnorm")])
    summary = explorer.side_by_side("RMSNorm")
    assert all(row.get("speedup") is None for row in summary.rows)
    assert any("candidates=['rmsnorm', 'py-rmsnorm']" in note for note in summary.notes), summary.notes
