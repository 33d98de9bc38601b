"""The time breakdown: every second in one category, kernel layers found by name, Amdahl's sums."""

from __future__ import annotations

import pytest

import kernel_explorer
from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama
from kernel_explorer.measure.breakdown import ATTENTION
from kernel_explorer.measure.kinds.breakdown import LINEAR, amdahl


@pytest.fixture
def explorer(hub: dict) -> Explorer:
    found = Explorer(tiny_llama(), include_transformers=False)
    yield found
    found.reset()


def test_shares_cover_each_phase_once_and_the_switch_state_comes_back(explorer: Explorer) -> None:
    explorer.on("RMSNorm", "model.norm")
    before = explorer._switchboard.snapshot()
    explorer.breakdown(tokens=32)
    assert explorer._switchboard.snapshot() == before  # profiled on PyTorch, put back after
    shares = [r.values for r in explorer.results.records("time_share")]
    for phase in ("prefill", "decode"):
        found = {v.category: v for v in shares if v.phase == phase}
        assert {"RMSNorm", "SiLU", "rotary_pos_emb", LINEAR, ATTENTION, "rest"} <= set(found)
        assert sum(v.share for v in found.values()) == pytest.approx(1.0, abs=0.1)  # medians, per category
        assert all(v.share >= 0 and v.seconds >= 0 for v in found.values())
    assert {v.tokens for v in shares if v.phase == "prefill"} == {32}


def test_amdahl_and_the_summary_predict_from_measured_speedups(explorer: Explorer) -> None:
    assert amdahl(0.5, None) == (2.0, None)
    assert amdahl(0.2, 2.0) == (pytest.approx(1.25), pytest.approx(1 / 0.9))
    explorer.breakdown(tokens=16)
    explorer.compare("RMSNorm", pairs=6)
    rows = explorer.results.breakdown_summary().to_dict("records")
    rms = next(r for r in rows if r["category"] == "RMSNorm")
    verdict = explorer.results.latest_verdicts()["RMSNorm"]
    assert rms["kernel_speedup"] == verdict.speedup
    assert rms["model_speedup_predicted"] == pytest.approx(amdahl(rms["share"], verdict.speedup)[1])
    total = rows[-1]
    assert total["category"] == "every measured kernel on" and total["share"] == pytest.approx(rms["share"])


def test_bad_breakdown_input_is_one_line(explorer: Explorer) -> None:
    with pytest.raises(KernelExplorerError, match="positive whole numbers"):
        explorer.breakdown(tokens=0)
    assert len(explorer.results) == 0


def test_the_inventory_report_and_model_summary_show_the_breakdown(explorer: Explorer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    explorer.breakdown(tokens=16)
    explorer.compare("RMSNorm", pairs=6)
    inventory = explorer.inventory()
    shares = explorer.results.latest_shares()
    assert inventory.row("RMSNorm").share == shares["RMSNorm"]
    assert inventory.row("RMSNorm").share_summary.startswith(f"{shares['RMSNorm']:.0%} (model ")
    assert "Linear (matmul)" in inventory.uncovered_summary and inventory.uncovered_summary in str(inventory)
    explorer.on("RMSNorm")
    explorer.compare_model(lengths=(8,), decode_tokens=2, pairs=2, decode_pairs=1)
    prefill = explorer.results.model_summary().query("measure == 'prefill'").to_dict("records")[0]
    predicted = explorer.results.breakdown_summary().to_dict("records")[-1]["model_speedup_predicted"]
    assert prefill["predicted_from_layers"] == pytest.approx(predicted)  # next to the realized speedup
    text = Path(kernel_explorer.report(explorer, tmp_path / "r.html")).read_text()
    assert (
        "Where the model&#x27;s time goes (prefill, on PyTorch)" in text
        or "Where the model's time goes" in text
    )
