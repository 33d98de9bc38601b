"""The dashboard's Python side: table rows, callbacks, live plots in batches, static fallback."""

from __future__ import annotations

import time

import pytest

from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama
from kernel_explorer.views.dashboard import Dashboard
from kernel_explorer.views.layer_table import table_rows


@pytest.fixture
def dashboard(hub: dict) -> Dashboard:
    found = Dashboard(Explorer(tiny_llama(), include_transformers=False))
    yield found
    found.close()
    found.explorer.reset()


def test_rows_follow_switches_from_the_table(dashboard: Dashboard) -> None:
    table = dashboard.table
    table._handle_message(
        None, {"type": "toggle", "layer": "RMSNorm", "on": True, "instance": "model.norm"}, None
    )
    rms = next(r for r in table.rows if r["name"] == "RMSNorm")
    assert rms["on_count"] == 1 and rms["count"] == 5 and rms["state"] == "ready"
    assert [i["path"] for i in rms["instances"] if i["on"]] == ["model.norm"]
    table._handle_message(None, {"type": "toggle", "layer": "RMSNorm", "on": False}, None)
    assert table.rows == table_rows(dashboard.explorer)
    assert all(r["on_count"] == 0 for r in table.rows)


def test_a_failing_callback_shows_in_the_status_line(dashboard: Dashboard) -> None:
    dashboard.table._handle_message(None, {"type": "toggle", "layer": "Nope", "on": True}, None)
    assert "Error: Nope: KernelExplorerError" in dashboard.status.value
    dashboard._guarded(lambda: 1 / 0)
    assert "ZeroDivisionError" in dashboard.status.value


def _wait(condition, seconds: float = 40.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(0.1)
    return bool(condition())


def _rmsnorm_pairs(dashboard: Dashboard, kernel_on: bool) -> int:
    return sum(
        r.layer == "RMSNorm" and r.values.kernel_on == kernel_on
        for r in dashboard.explorer.results.records("layer_latency")
    )


def test_run_is_compare_per_cycle_and_a_switch_mid_run_shows_apart(dashboard: Dashboard) -> None:
    dashboard.explorer.on("RMSNorm")
    dashboard.run()  # answers at once: capture happens on the run's thread
    assert dashboard.run_button.disabled and "Running" in dashboard.status.value
    assert _wait(lambda: _rmsnorm_pairs(dashboard, True) >= 6)
    dashboard.table._handle_message(None, {"type": "toggle", "layer": "RMSNorm", "on": False}, None)
    assert _wait(lambda: _rmsnorm_pairs(dashboard, False) >= 6)
    # each cycle starts with the model's throughput
    assert _wait(lambda: len(dashboard.explorer.results.records("model_throughput")) >= 1)
    dashboard.stop()
    assert dashboard.handle.wait(15) and dashboard.handle.outcome == "cancelled"
    dashboard.plots.flush()
    names = {t.name for t in dashboard.plots.latency.data}
    assert {"RMSNorm · bundled rmsnorm", "RMSNorm · kernel off"} <= names  # never mixed
    assert len(dashboard.plots.latency.plot_layout.shapes) >= 2  # the 1x line and the switch's marker
    assert len(dashboard.plots.throughput.data[0].x) >= 1
    markers = {t.name: t for t in dashboard.plots.speedup.data if t.x}
    bars = markers["RMSNorm · bundled rmsnorm"]
    assert bars.x == ["RMSNorm"] and all(y > 0 for y in bars.y)
    assert all(low >= 0 for low in bars.error_y.arrayminus)  # intervals around the medians
    if dashboard.plots.layer_off("RMSNorm"):  # its latest pairs ran PyTorch: it says so
        assert markers["RMSNorm · kernel off"].text == ["kernel off"]
    verdicts = dashboard.explorer.results.records("layer_verdict")
    assert {r.run_id for r in verdicts} == {dashboard.handle.run_id}
    assert dashboard.progress.value >= 1 and dashboard.progress.description.startswith("cycle")
    assert dashboard.run_button.disabled is False and "cancelled" in dashboard.status.value


def test_a_new_run_clears_the_plots(dashboard: Dashboard) -> None:
    dashboard.explorer.compare("SiLU", pairs=2)
    dashboard.plots.flush()
    assert dashboard.plots.points() > 0
    dashboard.explorer.compare("RMSNorm", pairs=2)
    dashboard.plots.flush()
    # (a pair a busy machine stalled sits beyond the axis: the same candidate's edge trace)
    names = {t.name.removesuffix(" (beyond the axis)") for t in dashboard.plots.latency.data}
    assert names == {"RMSNorm · bundled rmsnorm"}  # the latest run
    errors = dashboard.plots.divergence
    assert "10⁻⁷" in errors.plot_layout.yaxis.ticktext  # 10⁻⁷, not plotly's SI "100n"
    assert all(bar.hovertemplate.endswith(": %{hovertext}<extra></extra>") for bar in errors.data)
    kernel = next(bar for bar in errors.data if bar.name == "RMSNorm · bundled rmsnorm")
    assert kernel.hovertext[0].startswith("kernel: max abs error ")  # not a bare "463.0068n"


def test_static_fallback_has_table_and_plots(dashboard: Dashboard) -> None:
    dashboard.explorer.compare("SiLU", pairs=1)
    assert "Plotly.newPlot" in dashboard.static_html()  # on request
    bundle = dashboard._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    # item 13: the bundle's fallback inlined plotly.js (5 MB saved with every notebook, never shown
    # by JupyterLab) and showed a frozen state above the snapshot: now one line pointing at it
    assert len(bundle["text/html"]) < 300 and "snapshot" in bundle["text/html"]
    assert len(bundle["text/plain"]) < 200


def test_badges_are_keyed_on_state_names_with_one_colour_table(dashboard: Dashboard) -> None:
    from kernel_explorer.catalog.availability import State

    rows = dashboard.table.rows
    assert {row["state_key"] for row in rows} <= {state.key for state in State}
    assert rows[0]["state_key"] == "ready"
    for state in State:
        assert f".kx-state-{state.key} {{ background: {state.colour}; }}" in dashboard.table._css
    script = dashboard.table._esm
    assert "kx-state-${row.state_key}" in script and "no build for this machine" not in script


def test_runs_now_names_kernels_for_people_with_the_op_id_on_hover(dashboard: Dashboard) -> None:
    from pathlib import Path

    dashboard.explorer.on("RMSNorm", "model.norm")
    rms = next(r for r in dashboard.table.rows if r["name"] == "RMSNorm")
    (norm,) = [i for i in rms["instances"] if i["on"]]
    assert norm["runs"] == "bundled/rmsnorm RMSNorm"  # the row's name, not "kernel" or an op namespace
    (kernel_id,) = {now.kernel_id for now in dashboard.explorer.running("RMSNorm") if now.is_kernel}
    assert norm["reason"] == f"kernel id {kernel_id}"
    assert rms["runs_title"].startswith(f"kernel id {kernel_id}; code path ")  # and why, on hover
    assert kernel_id not in rms["runs"]
    assert {i["runs"] for i in rms["instances"] if not i["on"]} == {"PyTorch"}
    script = (Path(__file__).resolve().parents[2] / "widgets" / "layer_table.js").read_text()
    assert "title: row.runs_title" in script  # the front end puts it on the cell's hover


def test_the_snapshot_carries_switches_and_verdicts_as_plain_html(dashboard: Dashboard) -> None:
    dashboard.explorer.on("RMSNorm")
    dashboard.explorer.compare("RMSNorm", pairs=6)
    html = dashboard.snapshot_html()
    assert "kx-snapshot" in html and "<script" not in html and "plotly" not in html.lower()
    (verdict,) = dashboard.explorer.results.records("layer_verdict")
    assert verdict.values.summary in html and "5/5" in html
    assert "jupyter-widgets" in html  # the rule that hides the widget's error line when reopened


def test_named_runs_and_csv_downloads_after_a_run(dashboard: Dashboard) -> None:
    import base64
    import re

    first = dashboard.explorer.compare("RMSNorm", pairs=6, name="before")
    again = dashboard.explorer.compare("RMSNorm", pairs=6, name="before")
    assert first.run_id == "before" and again.run_id.startswith("before-")
    dashboard.refresh_downloads()
    links = re.findall(r"download='([^']+)' href='data:text/csv;base64,([^']+)'", dashboard.downloads.value)
    run_csv = f"kernel_explorer_{again.run_id}.csv"
    assert [name for name, _ in links] == ["kernel_explorer_summary.csv", run_csv]
    summary = base64.b64decode(links[0][1]).decode()
    assert "before," in summary and again.run_id in summary and "speedup_low" in summary
    records = base64.b64decode(links[1][1]).decode()  # item 13: that run's records, not every one
    assert again.run_id in records and "\nbefore," not in records


def test_profile_draws_the_breakdown_chart_and_its_line(dashboard: Dashboard) -> None:
    panel = dashboard.breakdown
    assert panel.chart_box.layout.display == "none" and panel.chart is None  # no 5 MB widget yet
    panel.tokens = 32
    panel.profile()
    assert panel.button.disabled
    assert _wait(lambda: panel.handle.done and not panel.button.disabled)
    assert panel.chart_box.layout.display == "flex"
    assert {trace.name for trace in panel.chart.data} >= {"Linear (matmul)", "RMSNorm (kernel layer)"}
    assert "Kernel layers take" in panel.line.value
    assert "Where the model's time goes" in dashboard.static_html()  # the report's figure too


def test_a_breakdown_leaves_the_live_plots_of_the_last_measurement(dashboard: Dashboard) -> None:
    dashboard.explorer.compare("SiLU", pairs=2)
    dashboard.plots.flush()
    before = dashboard.plots.points()
    dashboard.explorer.breakdown(tokens=16, repeats=1)
    dashboard.plots.flush()
    assert before > 0 and dashboard.plots.points() == before
    dashboard.explorer.compare("RMSNorm", pairs=2)
    dashboard.plots.flush()
    # (a pair a busy machine stalled sits beyond the axis: the same candidate's edge trace)
    names = {t.name.removesuffix(" (beyond the axis)") for t in dashboard.plots.latency.data}
    assert names == {"RMSNorm · bundled rmsnorm"}


def test_an_extended_layer_appears_as_a_row_and_switches_from_the_table(
    dashboard: Dashboard, tmp_path
) -> None:
    from kernel_repos import write_repo
    from kernels import LocalLayerRepository
    from torch import nn

    layers = (
        "import torch\nfrom torch import nn\n\n\nclass Same(nn.Module):\n"
        "    def forward(self, input: torch.Tensor) -> torch.Tensor:\n"
        "        return nn.functional.linear(input, self.weight, self.bias)\n"
    )
    repo = write_repo(tmp_path, "tiny-same-linear", layers=layers)
    explorer = dashboard.explorer
    explorer.extend(
        "Linear",
        nn.Linear,
        "model.layers.*.mlp.*",
        candidates={"cpu": LocalLayerRepository(repo, layer_name="Same")},
    )  # the table hears of it without a refresh call
    row = next(r for r in dashboard.table.rows if r["name"] == "Linear")
    assert row["added"] is True and row["count"] == 6 and row["state"] == "ready"
    assert not next(r for r in dashboard.table.rows if r["name"] == "RMSNorm")["added"]
    dashboard.table._handle_message(
        None,
        {"type": "toggle", "layer": "Linear", "on": True, "instance": "model.layers.1.mlp.up_proj"},
        None,
    )
    row = next(r for r in dashboard.table.rows if r["name"] == "Linear")
    assert [i["path"] for i in row["instances"] if i["on"]] == ["model.layers.1.mlp.up_proj"]
    explorer.retract("Linear")
    assert all(r["name"] != "Linear" for r in dashboard.table.rows)


def test_a_run_started_elsewhere_takes_the_status_line_progress_and_downloads(
    dashboard: Dashboard,
) -> None:
    """Item 3: after a cell's compare the plots showed it while the status line, progress and
    download links still described the dashboard's old run."""
    first = dashboard.explorer.compare("SiLU", pairs=2)
    assert (
        dashboard.status.value.startswith("Run " + first.run_id) and first.run_id in dashboard.downloads.value
    )
    second = dashboard.explorer.compare("RMSNorm", pairs=2)
    assert dashboard.status.value.startswith("Run " + second.run_id)
    assert (
        second.run_id in dashboard.downloads.value and first.run_id + ".csv" not in dashboard.downloads.value
    )
    assert dashboard.progress.value == dashboard.progress.max == 1


def test_a_compare_from_a_cell_marks_where_each_candidate_takes_its_turn(hub: dict, tmp_path) -> None:
    """A cell's compare of two candidates switches the layer from one to the other; the per-pair
    plot drew the dashboard's own Run's switches only, so nothing showed where the second took
    over. The snapshot, which a switch during a run leaves for the run's end, is current after it."""
    from kernel_repos import write_noarch_repo

    explorer = Explorer(
        tiny_llama(), include_transformers=False, peers=[write_noarch_repo(tmp_path / "py-rmsnorm")]
    )
    dashboard = Dashboard(explorer)
    try:
        found = explorer.compare("RMSNorm", candidates=["bundled", "peer"], pairs=6)
        dashboard.plots.flush()
        dashed = [s for s in dashboard.plots.latency.plot_layout.shapes if s["line"]["dash"] == "dash"]
        annotations = dashboard.plots.latency.plot_layout["annotations"]
        notes = [a for a in annotations if a["name"].startswith("kx-switch")]
        # one mark, where the peer took over: the compare's switching each candidate on before its
        # first pair and back after its last changed no pair, and those marks went
        assert len(notes) == 1 and len(dashed) == 1, (notes, dashed)
        assert "RMSNorm → peer py-rmsnorm".startswith(notes[0]["text"].rstrip("…")), notes
        assert "RMSNorm: bundled rmsnorm → peer py-rmsnorm" in notes[0]["hovertext"], notes
        assert not dashboard._elsewhere and dashboard.status.value.startswith("Run " + found.run_id)
    finally:
        dashboard.close()
        explorer.reset()


def test_runs_elsewhere_that_overlap_each_other_or_a_run_of_the_dashboard_all_end(
    dashboard: Dashboard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Switches mark the plots while a run started elsewhere goes, and the snapshot waits for its
    end. A compare started in the background whose end came while the dashboard's own Run went was
    never seen to end (the status line follows the own Run's records): every later switch marked an
    ended plot and the snapshot was never redrawn again."""
    from types import SimpleNamespace

    from kernel_explorer.measure.records import Record, RunEvent

    log, made = dashboard.explorer.results, []
    monkeypatch.setattr(dashboard, "refresh_snapshot", lambda: made.append("snapshot"))
    monkeypatch.setattr(dashboard.plots, "mark_switch", lambda when: made.append("mark"))
    log.append(Record("run-x", RunEvent("started")))
    log.append(Record("run-y", RunEvent("started")))  # two cells' background compares
    dashboard.handle = SimpleNamespace(run_id="run-own", done=False, cancel=lambda: None)  # a Run
    log.append(Record("run-x", RunEvent("finished")))  # ends while the Run goes
    assert dashboard._elsewhere == {"run-y"}
    dashboard.handle.done = True
    dashboard._on_switch()
    assert made == ["mark"]  # run-y still goes
    log.append(Record("run-y", RunEvent("cancelled")))
    assert not dashboard._elsewhere and made[-1] == "snapshot"
    made.clear()
    dashboard._on_switch()
    assert made == ["snapshot"]  # nothing runs: the switch redraws the snapshot, no mark


def test_the_cycle_counter_counts_layers_as_they_are_now(dashboard: Dashboard, tmp_path) -> None:
    """Item 3: after `extend` the counter kept the old layer count ("cycle 2" during cycle 1)."""
    from kernel_repos import write_repo
    from kernels import LocalLayerRepository
    from torch import nn

    from kernel_explorer.measure.records import Record

    done = dashboard.explorer.compare("SiLU", pairs=1)
    verdict = dashboard.explorer.results.records("layer_verdict", done.run_id)[0].values
    dashboard.handle, dashboard._cycle, dashboard._cycle_layers = done, 1, set()  # as run() leaves them
    dashboard.progress.description = "cycle 1"
    layers = (
        "import torch\nfrom torch import nn\n\n\nclass Same(nn.Module):\n"
        "    def forward(self, input: torch.Tensor) -> torch.Tensor:\n"
        "        return nn.functional.linear(input, self.weight, self.bias)\n"
    )
    repo = write_repo(tmp_path, "cycle-linear", layers=layers)
    dashboard.explorer.extend(
        "Linear",
        nn.Linear,
        "model.layers.*.mlp.*",
        candidates={"cpu": LocalLayerRepository(repo, layer_name="Same")},
    )
    names = dashboard.explorer.layers
    for name in names:  # one cycle of the live run: a verdict per layer, the added one included
        dashboard.explorer.results.append(Record(done.run_id, verdict, name))
        assert dashboard.progress.description == "cycle 1"
    assert dashboard.progress.value == dashboard.progress.max == len(names)
    dashboard.explorer.results.append(Record(done.run_id, verdict, names[0]))
    assert dashboard.progress.description == "cycle 2" and dashboard.progress.value == 1
    dashboard.explorer.retract("Linear")


def test_a_row_picks_its_candidate_and_every_click_is_answered(dashboard: Dashboard) -> None:
    """Item 2: a click always took the first candidate (Q8_0 for Linear) and showed nothing for
    the seconds a switch takes; the row offers every candidate, and Python answers each message
    with "done" so the row's "switching…" state ends even when nothing changed."""
    from torch import nn

    table, explorer = dashboard.table, dashboard.explorer
    answered: list[dict] = []
    table.send = lambda content, buffers=None: answered.append(content)  # type: ignore[method-assign]
    explorer.extend("Linear", nn.Linear, "model.layers.0.mlp.*")
    row = next(r for r in table.rows if r["name"] == "Linear")
    labels = [c["label"] for c in row["candidates"]]
    assert len(labels) >= 2 and row["candidate"] == labels[0]
    q4 = next(label for label in labels if "Q4_1" in label)
    table._handle_message(None, {"type": "choose", "layer": "Linear", "candidate": q4, "n": 1}, None)
    assert next(r for r in table.rows if r["name"] == "Linear")["candidate"] == q4
    table._handle_message(None, {"type": "toggle", "layer": "Linear", "on": True, "n": 2}, None)
    gate = explorer.model.model.layers[0].mlp.gate_proj
    assert gate.forward.kernel.__func__.__qualname__.startswith("Q4_1Linear.")  # what runs...
    row = next(r for r in table.rows if r["name"] == "Linear")
    assert "Q4_1Linear" in row["runs"]  # ...is what the row says (it named the repository's first class)
    q8 = next(label for label in labels if "Q8_0" in label)
    table._handle_message(None, {"type": "choose", "layer": "Linear", "candidate": q8, "n": 3}, None)
    assert gate.forward.kernel.__func__.__qualname__.startswith("Q8_0Linear.")  # re-switched
    assert "Q8_0Linear" in next(r for r in table.rows if r["name"] == "Linear")["runs"]
    table._handle_message(None, {"type": "toggle", "layer": "Nope", "on": True, "n": 4}, None)  # an error
    # each click answered by its own number (the page tells a second click on a layer from the first)
    names = ("Linear", "Linear", "Linear", "Nope")
    assert answered == [{"type": "done", "layer": name, "n": n} for n, name in enumerate(names, 1)]
    script = dashboard.table._esm
    assert 'model.on("msg:custom"' in script and "switching…" in script and "kx-candidate-pick" in script
    explorer.reset()
    explorer.retract("Linear")
