"""`%kernels`: load/unload/reload, dispatch to the Explorer, one-line errors without tracebacks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def shell() -> Iterator[Any]:
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "kernel_explorer")
    ip.run_cell("from kernel_explorer.loading import tiny_llama\nmodel = tiny_llama()\nnumber = 3")
    yield ip
    ip.run_line_magic("unload_ext", "kernel_explorer")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("frobnicate", "unknown command 'frobnicate': one of hardware, explore,"),
        (
            "explore nothing_here",
            "'nothing_here' is not defined in this notebook: load one (nothing_here, tokenizer = "
            "kx.load_default_model()) or give a folder or Hub id",
        ),
        ("explore ./no/such/folder", "no folder ./no/such/folder and not a Hub id"),
        ("explore model --dtype fp8", "invalid choice: 'fp8'"),
        ("explore number", "'number' is an int, not a torch.nn.Module: pass the variable"),
        ("explore model --mode fast", "invalid choice: 'fast'"),
        ("explore model --bogus", "unrecognized arguments: --bogus"),
        ("compare", "the following arguments are required: layer (usage: %kernels compare LAYER"),
        ('on "unclosed', "cannot parse"),
    ],
)
def test_bad_input_is_one_short_line(
    shell: Any, capsys: pytest.CaptureFixture, line: str, message: str
) -> None:
    assert shell.run_line_magic("kernels", line) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("%kernels: ")
    assert "Traceback" not in err
    assert "%kernels hardware" not in err and len(err) < 170  # not the whole usage again


def test_short_usage_on_demand_full_usage_only_for_help(shell: Any, capsys: pytest.CaptureFixture) -> None:
    shell.run_line_magic("kernels", "")
    short = capsys.readouterr().out
    assert short.count("\n") == 1 and short.startswith("Usage: %kernels hardware | explore")
    for line in ("help", "--help", "-h"):
        shell.run_line_magic("kernels", line)
        full = capsys.readouterr().out
        assert "%kernels explore [MODEL] [--inputs VAR] [--mode MODE]" in full and "%kernels stop" in full
        assert "under a minute" in full  # bench's time, before anyone starts it
        assert full.count("\n") == len(full.splitlines()) >= 10
        assert max(len(line) for line in full.splitlines()) <= 100  # no sideways scrolling


def test_report_to_a_missing_folder_is_one_line(
    shell: Any, capsys: pytest.CaptureFixture, hub: dict, tmp_path
) -> None:
    shell.run_line_magic("kernels", "explore model").close()
    capsys.readouterr()
    assert shell.run_line_magic("kernels", "report /nonexistent/dir/x.html") is None
    err = capsys.readouterr().err
    assert err.startswith("%kernels: cannot write /nonexistent/dir/x.html: folder /nonexistent/dir")
    assert err.endswith("does not exist; create it first\n") and err.count("\n") == 1
    shell.run_line_magic("kernels", f"report {tmp_path}")
    assert capsys.readouterr().err.startswith(f"%kernels: {tmp_path} is a folder: give a file name")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    shell.run_line_magic("kernels", f"report {locked / 'r.html'}")
    err = capsys.readouterr().err
    if os.geteuid() != 0:  # root writes anywhere
        assert err.startswith(f"%kernels: cannot write {locked / 'r.html'}: Permission denied")
        assert err.count("\n") == 1 and "Traceback" not in err


def test_explore_reuses_the_models_explorer(shell: Any, hub: dict) -> None:
    first = shell.run_line_magic("kernels", "explore model")
    second = shell.run_line_magic("kernels", "explore model")
    assert second.explorer is first.explorer  # twice: the same switches and results
    shell.run_cell("from kernel_explorer import Explorer\nexplorer = Explorer(model)")
    third = shell.run_line_magic("kernels", "explore model")
    assert third.explorer is shell.user_ns["explorer"] and third.explorer is not first.explorer
    shell.run_line_magic("kernels", "on SiLU")
    assert all(now.is_kernel for now in shell.user_ns["explorer"].running("SiLU"))
    shell.run_line_magic("kernels", "reset")
    for dashboard in (first, second, third):
        dashboard.close()


def test_stop_cancels_the_magics_run_and_the_dashboards(
    shell: Any, capsys: pytest.CaptureFixture, hub: dict
) -> None:
    magic = shell._kernel_explorer_magic
    dashboard = shell.run_line_magic("kernels", "explore model")
    capsys.readouterr()
    shell.run_line_magic("kernels", "stop")
    assert capsys.readouterr().out.startswith("nothing to stop")
    shell.run_line_magic("kernels", "compare SiLU RMSNorm --pairs 100000 --background")
    handle = magic.handle
    assert "%kernels stop cancels it" in capsys.readouterr().out and not handle.done
    dashboard.run()  # as the Run button does
    live = dashboard.handle
    shell.run_line_magic("kernels", "stop")
    out = capsys.readouterr().out
    assert handle.done and handle.cancelled and live.done and live.cancelled
    assert "stopped run " in out and handle.run_id in out and live.run_id in out
    assert not any(now.is_kernel for now in dashboard.explorer.running())  # put back as before
    dashboard.close()


def test_a_background_compare_says_when_it_finished(
    shell: Any, capsys: pytest.CaptureFixture, hub: dict
) -> None:
    """The cell said "measures in the background" for good, and %kernels stop then said "nothing to
    stop" without a word that the run had ended."""
    magic = shell._kernel_explorer_magic
    dashboard = shell.run_line_magic("kernels", "explore model")
    capsys.readouterr()
    shell.run_line_magic("kernels", "compare SiLU --pairs 2 --background")
    handle = magic.handle
    assert handle.wait(60)
    out = capsys.readouterr().out
    assert f"run {handle.run_id} finished at " in out and "SiLU: " in out, out
    shell.run_line_magic("kernels", "stop")
    assert f"(run {handle.run_id} finished)" in capsys.readouterr().out
    dashboard.close()


def test_switching_needs_an_explored_model_first(
    shell: Any, capsys: pytest.CaptureFixture, hub: dict
) -> None:
    shell._kernel_explorer_magic.explorer = None
    shell.run_line_magic("kernels", "on RMSNorm")
    assert "run %kernels explore MODEL first" in capsys.readouterr().err


def test_explore_then_switch_compare_and_report(
    shell: Any, capsys: pytest.CaptureFixture, hub: dict, tmp_path
) -> None:
    dashboard = shell.run_line_magic("kernels", "explore model")
    explorer = dashboard.explorer
    assert explorer.model is shell.user_ns["model"]
    inventory = shell.run_line_magic("kernels", "on RMSNorm --instances model.norm")
    assert inventory.row("RMSNorm").running_summary.endswith("x1")
    shell.run_line_magic("kernels", "on Nope")
    assert "has no kernel layer 'Nope'" in capsys.readouterr().err
    inventory = shell.run_line_magic("kernels", "on attention --candidate eager")  # model-wide
    assert inventory.row("attention").running_summary == "eager x2"
    shell.run_line_magic("kernels", "on attention --candidate nonsense")
    assert "is not an attention implementation" in capsys.readouterr().err
    summary = shell.run_line_magic("kernels", "compare SiLU --pairs 2").frame
    assert list(summary.layer) == ["SiLU"] and summary.pairs.iloc[0] == 4
    assert shell._kernel_explorer_magic.handle.run_id == summary.run_id.iloc[0]  # kept for %kernels stop
    summary = shell.run_line_magic("kernels", "compare SiLU --budget 0.5").frame  # adaptive: stops on a rule
    assert summary.stopped_by.iloc[0] in ("precision", "budget")
    shell.run_line_magic("kernels", "compare SiLU --budget inf")
    assert "budget_s must be a positive, finite number" in capsys.readouterr().err
    shell.run_line_magic("kernels", "compare SiLU --pairs 3 --precision 0.1")
    assert "give one" in capsys.readouterr().err
    shell.run_line_magic("kernels", f"report {tmp_path / 'r.html'}")
    assert 10_000 < (tmp_path / "r.html").stat().st_size < 1_500_000  # charts inline, no plotly.js
    shell.run_line_magic("kernels", "off RMSNorm")
    shell.run_line_magic("kernels", "reset")
    assert not any(now.is_kernel for now in explorer.running())
    from kernel_explorer.inspect.hardware import HardwareSnapshot

    assert isinstance(shell.run_line_magic("kernels", "hardware"), HardwareSnapshot)
    dashboard.close()


def test_unload_puts_the_model_back_and_reload_registers_again(shell: Any, hub: dict) -> None:
    dashboard = shell.run_line_magic("kernels", "explore model")
    shell.run_line_magic("kernels", "on SiLU")
    shell.run_line_magic("unload_ext", "kernel_explorer")
    assert "kernels" not in shell.magics_manager.magics["line"]
    assert not any(now.is_kernel for now in dashboard.explorer.running())
    shell.run_line_magic("load_ext", "kernel_explorer")
    shell.run_line_magic("reload_ext", "kernel_explorer")
    assert "kernels" in shell.magics_manager.magics["line"]
    dashboard.close()


def test_explore_shows_its_steps_then_removes_the_bar(shell: Any, hub: dict) -> None:
    dashboard = shell.run_line_magic("kernels", "explore model")
    steps = shell._kernel_explorer_magic.steps
    assert steps.bar.value == steps.bar.max == 3  # no --inputs: nothing to capture yet
    assert steps.label.value.startswith("3/3: building the dashboard")
    from kernel_explorer.views.magics import _Steps

    bar = _Steps(["one", "two"])  # item 8: the bar counts finished steps, not started ones
    bar.next()
    assert bar.bar.value == 0 and bar.label.value == "1/2: one…"
    bar.next()
    assert bar.bar.value == 1 and bar.label.value == "2/2: two…"  # not full during the last step
    bar.done()
    assert bar.bar.value == 2 and bar.box.comm is None
    assert steps.box.comm is None  # closed once the dashboard was ready
    dashboard.close()


def test_extend_names_a_layer_the_model_does_not_mark(
    shell: Any, capsys: pytest.CaptureFixture, hub: dict, tmp_path
) -> None:
    from kernel_repos import write_repo

    layers = (
        "import torch\nfrom torch import nn\n\n\nclass Same(nn.Module):\n"
        "    def forward(self, input: torch.Tensor) -> torch.Tensor:\n"
        "        return nn.functional.linear(input, self.weight, self.bias)\n"
    )
    repo = write_repo(tmp_path, "magic-linear", layers=layers)
    shell.run_cell(
        "from torch import nn\nfrom kernels import LocalLayerRepository\nfrom pathlib import Path\n"
        f"dense = {{'cpu': LocalLayerRepository(Path({str(repo)!r}), layer_name='Same')}}"
    )
    dashboard = shell.run_line_magic("kernels", "explore model")
    shell.run_line_magic("kernels", "extend Dense nn.Linear --instances model.layers.1.* --candidates nope")
    assert "'nope' is not defined in this notebook" in capsys.readouterr().err
    shell.run_line_magic("kernels", "extend Dense nn.Linear --instances model.layer.1.*")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matches no Linear instance. Nearest: model.layers.1." in err
    inventory = shell.run_line_magic(
        "kernels", "extend Dense nn.Linear --instances model.layers.1.* --candidates dense"
    )
    assert inventory.row("Dense").kind == "module, added by you" and len(inventory.row("Dense").group) == 7
    inventory = shell.run_line_magic("kernels", "on Dense")
    assert inventory.row("Dense").running_summary == "user/magic-linear Same x7"
    inventory = shell.run_line_magic("kernels", "retract Dense")
    assert all(row.group.name != "Dense" for row in inventory.rows)
    assert type(shell.user_ns["model"].model.layers[1].mlp.up_proj).__module__ == "torch.nn.modules.linear"
    dashboard.close()


def test_compare_answers_one_line_per_layer_with_the_frame_one_attribute_away(shell: Any, hub: dict) -> None:
    """Issue 28 item 1: a 26-column DataFrame hid the verdict; the answer is a line per layer."""
    dashboard = shell.run_line_magic("kernels", "explore model")
    answer = shell.run_line_magic("kernels", "compare SiLU RMSNorm --pairs 2")
    text = str(answer)
    lines = text.splitlines()
    assert lines[0].startswith("Run ") and lines[-1].strip().startswith(".frame: the full table (2 rows")
    layer_lines = {line.split(":", 1)[0].strip(): line for line in lines[1:-1]}
    assert set(layer_lines) == {"SiLU", "RMSNorm"}
    for line in layer_lines.values():
        assert "x [" in line and "pairs over" in line and "noise floor" in line
        assert any(word in line for word in ("faster", "slower", "no difference"))
        assert "accurate" in line or "bitwise" in line  # the accuracy verdict, whole
    assert {"verdict", "accuracy", "speedup_low"} <= set(answer.frame.columns)
    html = answer._repr_html_()
    assert html.count("<tr>") == 2 and "text-align:left" in html and "SiLU" in html
    dashboard.close()


def test_compare_measures_the_kind_it_is_told_and_names_the_others(
    shell: Any, capsys: pytest.CaptureFixture, hub: dict
) -> None:
    """`--measure` takes every kind compare starts (the registry's), and answers with its summary."""
    from kernel_explorer.measure.kinds import measured_by_compare

    dashboard = shell.run_line_magic("kernels", "explore model")
    answer = shell.run_line_magic("kernels", "compare SiLU --measure values")
    (line,) = answer.lines
    assert line.startswith("SiLU: ") and "against float64" in line and "repeats bitwise" in line
    assert "x [" not in line and {"accuracy", "bitwise_equal"} <= set(answer.frame.columns)
    shell.run_line_magic("kernels", "compare SiLU --measure speed")
    err = capsys.readouterr().err
    assert "invalid choice: 'speed'" in err and all(name in err for name in measured_by_compare())
    dashboard.close()


def test_compare_takes_candidate_words_and_answers_a_line_per_kernel(shell: Any, hub: dict) -> None:
    """Issue 29: a kernel's code paths side by side from the magic (`bundled@<path>`)."""
    from isa_paths import runnable_isas

    paths = sorted({runnable_isas()[0], "portable"})
    if len(paths) < 2:
        pytest.skip("this CPU runs only the portable path")
    dashboard = shell.run_line_magic("kernels", "explore model")
    words = " ".join(f"bundled@{p}" for p in paths)
    answer = shell.run_line_magic("kernels", f"compare SiLU --pairs 2 --candidates {words}")
    assert sorted(answer.frame.kernel) == sorted(f"{hub['activation'].__name__}@{p}" for p in paths)
    assert all(f"@{p})" in str(answer) for p in paths)  # "SiLU (<kernel id>@avx2): 1.10x [...]"
    dashboard.close()


def test_bench_answers_one_line_per_measure(shell: Any, hub: dict, capsys: pytest.CaptureFixture) -> None:
    """It took 100-114 s and ended "only 50% sure: few pairs (2 pairs)": now it says how long it
    will take before it starts, and its pairs are enough for a 95% interval."""
    import re

    dashboard = shell.run_line_magic("kernels", "explore model")
    shell.run_line_magic("kernels", "on SiLU")
    capsys.readouterr()
    answer = shell.run_line_magic("kernels", "bench")
    said = capsys.readouterr().out
    assert re.match(r"%kernels bench: about \d+ (s|min) here, in this cell: prefill at 128 tokens", said), (
        said
    )
    whats = [line.split(":", 1)[0].strip() for line in str(answer).splitlines()[1:-1]]
    assert whats == ["prefill (128 tokens)", "decode (8 tokens)", "outputs"]
    assert "greedy tokens" in str(answer) and set(answer.frame.measure) == {"prefill", "decode"}
    assert list(answer.frame.pairs) == [6, 6], str(answer)  # enough for a 95% interval, not 2
    shell.run_line_magic("kernels", "reset")
    dashboard.close()


@pytest.mark.slow
def test_bench_compiled_answers_against_compiled_and_eager_pytorch(shell: Any, hub: dict) -> None:
    import torch

    torch._dynamo.reset()
    dashboard = shell.run_line_magic("kernels", "explore model --mode torch.compile")
    try:
        shell.run_line_magic("kernels", "on SiLU")
        answer = shell.run_line_magic("kernels", "bench --compiled")
        whats = [line.split(":", 1)[0].strip() for line in str(answer).splitlines()[1:-1]]
        assert sorted(whats) == sorted(
            [
                "compiled prefill (128 tokens)",
                "compiled prefill against eager PyTorch (128 tokens)",
                "compiled decode (8 tokens)",
                "compiled decode against eager PyTorch (8 tokens)",
                "outputs against compiled PyTorch",
                "outputs against eager PyTorch",
            ]
        ), str(answer)
    finally:
        shell.run_line_magic("kernels", "reset")
        dashboard.close()
        # `explore` without --mode keeps a reused explorer's mode: the module's later tests expect
        # the default one, as a fresh notebook has it.
        shell.run_line_magic("kernels", "explore model --mode inference").close()
        torch._dynamo.reset()


def test_bad_candidates_answer_in_one_line_that_lists_the_choices(
    shell: Any, capsys: pytest.CaptureFixture, hub: dict
) -> None:
    """Item 4: "...Candidates:" with nothing after it; an attention repo that cannot load: silence."""
    from huggingface_hub import constants

    dashboard = shell.run_line_magic("kernels", "explore model")
    capsys.readouterr()
    shell.run_line_magic("kernels", "on RMSNorm --candidate nope/nope")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No candidate 'nope/nope' for layer 'RMSNorm': name one of rmsnorm" in err
    was = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True  # the public Hub is unreachable here anyway: say so at once
    try:
        inventory = shell.run_line_magic("kernels", "on attention --candidate someorg/somerepo")
    finally:
        constants.HF_HUB_OFFLINE = was
    err = capsys.readouterr().err
    assert err.startswith("%kernels: attention stays on PyTorch: ") and err.count("\n") == 1
    assert not any(now.is_kernel for now in dashboard.explorer.running("attention"))
    assert inventory is not None and dashboard.explorer.running("attention")[0].reason
    shell.run_line_magic("kernels", "reset")  # the failed switch's reason stayed in the row
    assert not any(now.reason for now in dashboard.explorer.running("attention"))
    dashboard.close()


def test_explore_a_saved_model_folder_by_its_path(
    shell: Any, capsys: pytest.CaptureFixture, hub: dict, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 14: `%kernels explore ./my-model` loads it (from_pretrained, offline), steps shown."""
    from kernel_explorer.loading import tiny_llama

    tiny_llama(seed=7).save_pretrained(tmp_path / "my-model")
    monkeypatch.chdir(tmp_path)  # the shell runs in this process: the folder comes back after the test
    dashboard = shell.run_line_magic("kernels", "explore ./my-model --dtype bfloat16")
    steps = shell._kernel_explorer_magic.steps
    assert steps.names[0] == "loading ./my-model (from_pretrained)" and steps.bar.value == 4
    model = dashboard.explorer.model
    assert type(model).__name__ == "LlamaForCausalLM"
    assert str(next(model.parameters()).dtype) == "torch.bfloat16"
    assert "RMSNorm" in dashboard.explorer.layers
    dashboard.close()


def test_a_warning_from_a_line_points_at_the_users_cell(shell: Any) -> None:
    """Item 12: warnings named magics.py:307; the reader's own cell is where they belong."""
    import warnings

    from kernel_explorer.views.magics import _warn_at_the_cell

    def warner(line: str) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.warn("from inside the toolkit", UserWarning, stacklevel=1)
        _warn_at_the_cell(caught)

    shell.register_magic_function(warner, magic_kind="line", magic_name="kx_warner")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        shell.run_cell("x = 1\n%kx_warner")
    found = [w for w in shown if "from inside the toolkit" in str(w.message)]
    assert len(found) == 1 and "kernel_explorer" not in found[0].filename and found[0].lineno == 2


def test_a_measurement_in_a_cell_shows_its_progress_then_removes_it(shell: Any, hub: dict) -> None:
    """Item 7: 212 s of compare_model showed only a red Transformers line. A cell that measures
    with any Explorer of the notebook shows which step, how many of how many, pairs and time."""
    from kernel_explorer.views.progress import cell_progress, progress_text

    dashboard = shell.run_line_magic("kernels", "explore model")
    shell.run_line_magic("kernels", "compare SiLU RMSNorm --pairs 2")
    shown = cell_progress(dashboard.explorer.results).last
    assert shown is not None and shown.box.comm is None  # closed: a saved notebook keeps no widget
    assert "2/2 layers" in shown.label.value and "pairs" in shown.label.value
    assert shown.bar.value == shown.bar.max == 2
    shell.run_cell("from kernel_explorer import Explorer, tiny_llama\nmine = Explorer(tiny_llama())")
    shell.run_cell("mine.compare('SiLU', pairs=2)")  # plain Python in a cell: attached before it ran
    shown = cell_progress(shell.user_ns["mine"].results).last
    assert shown is not None and "1 layers done" in shown.label.value
    assert (
        progress_text("SiLU", 1, 3, "layers", 14, 6.0)
        == "SiLU · 1/3 layers · 14 pairs · 6 s, about 12 s left"
    )
    dashboard.close()


def test_export_writes_the_module_and_the_pins(
    shell: Any, capsys: pytest.CaptureFixture, hub: dict, tmp_path
) -> None:
    dashboard = shell.run_line_magic("kernels", "explore model")
    shell.run_line_magic("kernels", "on SiLU")
    capsys.readouterr()
    (tmp_path / "job").mkdir()
    shell.run_line_magic("kernels", f"export {tmp_path / 'chosen.py'} --pins {tmp_path / 'job'}")
    out = capsys.readouterr().out
    assert f"module written to {tmp_path / 'chosen.py'}" in out and "kernels lock" in out
    text = (tmp_path / "chosen.py").read_text()
    assert '"SiLU": {' in text and "import kernel_explorer" not in text and "from kernel_explorer" not in text
    assert "[tool.kernels.dependencies]" in (tmp_path / "job" / "pyproject.toml").read_text()
    shell.run_line_magic("kernels", f"export {tmp_path / 'nope' / 'x.py'}")
    err = capsys.readouterr().err
    assert err.startswith("%kernels: cannot write") and err.count("\n") == 1
    shell.run_line_magic("kernels", "reset")
    dashboard.close()


def test_loading_bars_in_a_notebook_are_plain_text_on_stdout(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """On stderr, JupyterLab drew the "Loading weights" bar in a red error-style box."""
    import IPython
    import tqdm.auto

    from kernel_explorer.loading import text_bars_in_notebooks

    monkeypatch.setattr(IPython, "get_ipython", lambda: type("Shell", (), {"kernel": object()})())
    with text_bars_in_notebooks():
        for _ in tqdm.auto.tqdm(range(3), desc="Loading weights"):
            pass
    printed = capsys.readouterr()
    assert "Loading weights" in printed.out and "Loading weights" not in printed.err


def test_side_by_side_and_the_picker_follow_a_switch_by_name(
    shell: Any, hub: dict, capsys: pytest.CaptureFixture, tmp_path
) -> None:
    """Issue 49: after `%kernels on SiLU --candidate peer` the row's picker still showed the bundled
    kernel while "runs now" said the peer; `--candidate plain-silu` (the repository's name) failed.
    Now the repository's name switches, the picker shows what runs, and `%kernels side` puts the
    candidates in one table, the one running marked, each with its own numbers after --compare."""
    from kernel_repos import write_noarch_repo

    # explicit: `explore` keeps a reused explorer's mode, and the peer has no torch.compile one
    dashboard = shell.run_line_magic("kernels", "explore model --mode inference")
    explorer = shell._kernel_explorer_magic.explorer
    explorer.add_peer(write_noarch_repo(tmp_path / "py-rmsnorm"))
    capsys.readouterr()
    try:
        shell.run_line_magic("kernels", "on RMSNorm --candidate py-rmsnorm")
        assert capsys.readouterr().err == ""
        row = next(r for r in dashboard.table.rows if r["name"] == "RMSNorm")
        peer = next(o["label"] for o in row["candidates"] if o["short"].startswith("peer/py-rmsnorm"))
        assert row["candidate"] == peer, row["candidate"]  # the picker shows the kernel that runs

        table = shell.run_line_magic("kernels", "side RMSNorm")
        rows = {(r["candidate"], r["source"]): r for r in table.rows}
        assert rows[("py-rmsnorm", "peer")]["now"].startswith("▶ all")
        assert not rows[("rmsnorm", "bundled")]["now"] and not rows[("PyTorch", "torch")]["now"]
        assert "▶" in table._repr_html_() and "candidate" in table.text()

        table = shell.run_line_magic("kernels", "side RMSNorm --compare")
        assert "measuring 2 candidates of RMSNorm" in capsys.readouterr().out
        rows = {(r["candidate"], r["source"]): r for r in table.rows}
        speeds = [rows[key]["speedup"] for key in (("rmsnorm", "bundled"), ("py-rmsnorm", "peer"))]
        assert all(s is not None for s in speeds) and speeds[0] != speeds[1]
        assert rows[("py-rmsnorm", "peer")]["now"].startswith("▶ all")  # put back as it was

        shell.run_line_magic("kernels", "on RMSNorm --candidate RMSNorm")  # both classes are RMSNorm
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "'RMSNorm' names 2 candidates" in err and "py-rmsnorm" in err
    finally:
        shell.run_line_magic("kernels", "reset")
        dashboard.close()
