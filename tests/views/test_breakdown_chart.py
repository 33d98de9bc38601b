"""The breakdown chart: one stacked bar per phase that adds to 100%, kernel layers in colour,
what no kernel covers in greys, and a line whose ceiling is Amdahl's for the covered share."""

from __future__ import annotations

import pytest

from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama
from kernel_explorer.measure.summary import format_number
from kernel_explorer.views.breakdown_chart import UNCOVERED_COLOURS, breakdown_figure, covered_line


@pytest.fixture(scope="module")
def explorer(hub: dict) -> Explorer:
    found = Explorer(tiny_llama(), include_transformers=False)
    found.breakdown(tokens=32, repeats=1)
    yield found
    found.reset()


def test_nothing_to_draw_before_a_breakdown(hub: dict) -> None:
    fresh = Explorer(tiny_llama(), include_transformers=False)
    assert breakdown_figure(fresh.results) is None and covered_line(fresh.results) == ""


def test_each_phase_is_one_bar_of_100_percent(explorer: Explorer) -> None:
    figure = breakdown_figure(explorer.results)
    phases = set(figure.data[0].y)
    assert phases == {"prefill (32 tokens)", "decode step (1 token)"}
    for index, phase in enumerate(figure.data[0].y):
        assert sum(trace.x[index] for trace in figure.data) == pytest.approx(100.0, abs=0.5), phase
    names = [trace.name for trace in figure.data]
    kernel_traces = [n for n in names if n.endswith("(kernel layer)")]
    assert {n.removesuffix(" (kernel layer)") for n in kernel_traces} == set(explorer.layers)
    assert names.index(kernel_traces[-1]) < names.index("Linear (matmul)")  # colour first, greys after
    greys = {trace.marker.color for trace in figure.data if trace.name in UNCOVERED_COLOURS}
    assert greys == {UNCOVERED_COLOURS[name] for name in names if name in UNCOVERED_COLOURS}


def test_the_line_gives_amdahls_ceiling_then_the_prediction(explorer: Explorer) -> None:
    shares = explorer.results.latest_shares("prefill")
    covered = sum(v for k, v in shares.items() if k in explorer.layers)
    line = covered_line(explorer.results)
    assert f"take {format_number(covered, 'share')} of the prefill" in line
    assert f"at most {format_number(1 / (1 - covered), 'x')}" in line
    assert "Amdahl predicts" not in line
    explorer.compare("SiLU", pairs=2, calibration_pairs=1)
    assert "Amdahl predicts" in covered_line(explorer.results)
    hover = next(t for t in breakdown_figure(explorer.results).data if t.name == "SiLU (kernel layer)")
    assert all("measured kernel" in text for text in hover.customdata)


def test_an_extended_linear_and_the_other_matmuls_read_apart_and_a_retract_says_profile_again(
    hub: dict,
) -> None:
    """Item 5: after extend the legend read "Linear (kernel layer)" and "Linear (matmul)"."""
    from torch import nn

    fresh = Explorer(tiny_llama(), include_transformers=False)
    fresh.extend("Linear", nn.Linear, "model.layers.0.mlp.*")
    fresh.breakdown(tokens=16, repeats=1)
    names = [trace.name for trace in breakdown_figure(fresh.results, fresh.layers).data]
    assert "Linear (kernel layer)" in names and "Linear (matmul), not extended" in names
    assert "Linear (matmul)" not in names
    fresh.retract("Linear")
    names = [trace.name for trace in breakdown_figure(fresh.results, fresh.layers).data]
    assert "Linear (not a kernel layer now: profile again)" in names
