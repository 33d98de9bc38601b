"""A kernel's code paths as candidates (switching/code_paths.py): "bundled@<path>" runs the bundled
kernel with that path pinned while it is on, on the real bundled kernels and the tiny model; off
gives the measured choice back; a path the kernel lacks, or one another layer holds differently,
leaves PyTorch with the reason; `compare` puts two paths of one kernel side by side."""

from __future__ import annotations

import pytest
import torch
from isa_paths import runnable_isas

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.explorer import Explorer
from kernel_explorer.inspect.layer_groups import ATTENTION
from kernel_explorer.loading import tiny_llama

TOKENS = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79]])
PATHS = runnable_isas()  # widest first; "portable" last, run by every CPU
PINNED = PATHS[-1]


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(TOKENS).logits


@pytest.fixture
def explorer() -> Explorer:
    explorer = Explorer(tiny_llama(), include_transformers=False)
    explorer.capture(TOKENS)
    yield explorer
    explorer.reset()


def test_a_path_candidate_pins_the_path_while_on_and_off_gives_the_choice_back(
    explorer: Explorer, hub: dict
) -> None:
    activation = hub["activation"]
    chosen, reason = activation.isa(), activation.isa_reason()
    expected = logits(explorer.model)
    running = explorer.on("SiLU", candidate=f"bundled@{PINNED}")
    assert all(now.is_kernel and now.code_path.path == PINNED for now in running)
    assert activation.isa() == PINNED and "pinned while bundled/activation@" in running[0].code_path.why
    torch.testing.assert_close(logits(explorer.model), expected, atol=1e-4, rtol=1e-4)
    row = explorer.inventory().row("SiLU")
    assert row.code_path_summary == f"code path {PINNED} (pinned)"
    assert f"code path {PINNED} (pinned)</small>" in explorer.inventory()._repr_html_()
    assert f"SiLU code path {PINNED}: pinned while" in str(explorer.inventory())

    explorer.off("SiLU", running[0].instance)  # one holder left: still pinned
    assert activation.isa() == PINNED
    explorer.off("SiLU")
    assert activation.isa() == chosen and activation.isa_reason().startswith(reason.split(";")[0])


def test_a_plain_candidate_reports_the_path_its_own_op_chose(explorer: Explorer, hub: dict) -> None:
    """A kernel that chooses op by op: the row reads the op's choice ("rms_norm float32: avx512:
    ..."), not `isa()` (the path most of the repository's ops run)."""
    (own,) = [line for line in hub["rmsnorm"].isa_choices() if line.startswith("rms_norm float32: ")]
    (now, *_) = explorer.on("RMSNorm")
    assert (now.code_path.path, now.code_path.why) == (own.split(": ")[1].split()[0], own)
    frame = explorer.inventory().to_pandas()
    assert set(frame[frame.layer == "RMSNorm"].code_path) == {now.code_path.path}
    assert frame[frame.layer == "SiLU"].code_path.isna().all()  # PyTorch runs: no path
    from kernel_explorer.views.layer_table import table_rows

    (norm,) = [row for row in table_rows(explorer) if row["name"] == "RMSNorm"]
    assert f"code path {own}" in norm["runs_title"]  # the widget's hover
    silu = [line for line in hub["activation"].isa_choices() if line.startswith("silu float32: ")]
    (act, *_) = explorer.on("SiLU")
    assert act.code_path.why == silu[0]  # silu's own line, not silu_and_mul's


def test_a_path_the_kernel_lacks_leaves_pytorch_and_says_which_it_has(explorer: Explorer) -> None:
    running = explorer.on("SiLU", candidate="bundled@avx1024")
    assert not any(now.is_kernel for now in running)
    assert f"no code path 'avx1024' on this CPU; its paths here: {', '.join(PATHS)}" in running[0].reason
    explorer._switchboard.strict = True
    with pytest.raises(KernelExplorerError, match="no code path 'avx1024'"):
        explorer.on("SiLU", candidate="bundled@avx1024")


def test_two_layers_cannot_pin_one_kernel_to_two_paths(explorer: Explorer, hub: dict) -> None:
    if len(PATHS) < 2:
        pytest.skip("this CPU runs one code path")
    first, second = explorer._switchboard.group("SiLU").instances
    assert explorer.on("SiLU", first, candidate=f"bundled@{PATHS[0]}")[0].is_kernel
    (refused,) = explorer.on("SiLU", second, candidate=f"bundled@{PATHS[-1]}")
    assert not refused.is_kernel
    assert f"runs one code path at a time, and bundled/activation@{PATHS[0]}" in refused.reason
    assert hub["activation"].isa() == PATHS[0]  # the first holder's pin stands
    assert explorer.on("SiLU", second, candidate=f"bundled@{PATHS[0]}")[0].is_kernel  # the same: shared


def test_compare_puts_two_paths_of_one_kernel_side_by_side(explorer: Explorer, hub: dict) -> None:
    if len(PATHS) < 2:
        pytest.skip("this CPU runs one code path")
    words = [f"bundled@{PATHS[0]}", f"bundled@{PATHS[-1]}"]
    handle = explorer.compare("SiLU", ATTENTION, candidates=words, pairs=3, calibration_pairs=2)
    summary = explorer.results.layer_summary()
    rows = summary[summary.run_id == handle.run_id]
    for layer, repo in (("SiLU", "activation"), (ATTENTION, "flash_attn")):
        kernels = sorted(rows[rows.layer == layer].kernel)
        assert kernels == sorted(f"{hub[repo].__name__}@{p}" for p in (PATHS[0], PATHS[-1])), layer
    latencies = explorer.results.records("layer_latency", handle.run_id)
    assert {r.provenance.isa for r in latencies} == {PATHS[0], PATHS[-1]}
    assert all(not now.is_kernel for now in explorer.running("SiLU"))  # as before the run
    assert "set by set_isa()" not in hub["activation"].isa_reason()  # let go after


def test_attention_takes_a_path_too(explorer: Explorer, hub: dict) -> None:
    expected = logits(explorer.model)
    (now, *_) = explorer.on(ATTENTION, candidate=f"bundled@{PINNED}")
    assert now.is_kernel and now.code_path.path == PINNED and hub["flash_attn"].isa() == PINNED
    assert explorer.inventory().row(ATTENTION).kernel_name(now) == f"bundled/flash_attn@{PINNED}"
    torch.testing.assert_close(logits(explorer.model), expected, atol=1e-4, rtol=1e-4)
    explorer.off(ATTENTION)
    assert "set by set_isa()" not in hub["flash_attn"].isa_reason()


class StrangerKernel:
    """A kernel module of someone else's making: it names paths, and one of them fails to switch."""

    __name__ = "stranger"

    def __init__(self) -> None:
        self.path = "fast"

    def isa(self) -> str:
        return self.path

    def isa_paths(self) -> list[str]:
        return ["fast", "broken"]

    def isa_reason(self) -> str:
        return f"{self.path}: measured"

    def set_isa(self, name: str) -> str:
        if name == "broken":
            raise RuntimeError("cannot switch to broken\nsecond line")
        self.path = name
        return name

    def reset_isa(self) -> str:
        self.path = "fast"
        return self.path


def test_a_kernel_whose_switch_raises_is_refused_in_one_line_with_nothing_pinned() -> None:
    from kernel_explorer.switching import code_paths

    kernel = StrangerKernel()
    with pytest.raises(KernelExplorerError, match=r"^set_isa\('broken'\) failed: cannot switch to broken$"):
        code_paths.pin(kernel, "broken", "holder", "stranger@broken")
    assert code_paths.running_path(kernel) == code_paths.RunningPath(
        "fast", "fast: measured"
    )  # nobody holds it
    code_paths.pin(kernel, "fast", "holder", "stranger@fast")
    assert code_paths.running_path(kernel).why == "fast: pinned while stranger@fast is on"
    code_paths.unpin("holder")
    assert code_paths.running_path(kernel) == code_paths.RunningPath("fast", "fast: measured")


def test_bundled_and_bundled_at_its_own_path_are_two_rows(explorer: Explorer, hub: dict) -> None:
    """The path plain "bundled" runs, named too: the same code, two candidates, two rows (not one
    row pooling both runs' pairs)."""
    (own,) = [line for line in hub["activation"].isa_choices() if line.startswith("silu float32: ")]
    chosen = own.split(": ")[1].split()[0]  # the path a plain bundled SiLU runs (float32 model)
    handle = explorer.compare(
        "SiLU", candidates=["bundled", f"bundled@{chosen}"], pairs=3, calibration_pairs=2
    )
    summary = explorer.results.layer_summary()
    rows = summary[summary.run_id == handle.run_id]
    kid = hub["activation"].__name__
    assert sorted(rows.kernel) == sorted(
        [
            f"{kid}@{chosen} (bundled/activation:Silu (cpu, any mode))",
            f"{kid}@{chosen} (bundled/activation@{chosen}:Silu (cpu, any mode))",
        ]
    )
    assert set(rows.pairs) == {3 * len(explorer._switchboard.group("SiLU"))}  # each its own pairs


def test_a_pin_another_layer_holds_refuses_in_strict_mode_and_two_explorers_let_go_alike(
    explorer: Explorer, hub: dict
) -> None:
    if len(PATHS) < 2:
        pytest.skip("this CPU runs one code path")
    first, second = explorer._switchboard.group("SiLU").instances
    explorer.on("SiLU", first, candidate=f"bundled@{PATHS[0]}")
    explorer._switchboard.strict = True
    with pytest.raises(KernelExplorerError, match="runs one code path at a time"):
        explorer.on("SiLU", second, candidate=f"bundled@{PATHS[-1]}")
    assert not explorer._switchboard.running("SiLU", [second])[0].is_kernel  # refused: PyTorch there
    explorer._switchboard.strict = False
    other = Explorer(explorer.model, include_transformers=False)  # a second explorer of the model
    other.off("SiLU")
    assert "set by set_isa()" not in hub["activation"].isa_reason()  # its off let go of the pin


def test_a_users_own_set_isa_comes_back_after_a_pin(explorer: Explorer, hub: dict) -> None:
    activation = hub["activation"]
    activation.set_isa(PATHS[0])  # the user's own pin, by hand
    try:
        explorer.on("SiLU", candidate=f"bundled@{PINNED}")
        assert activation.isa() == PINNED
        explorer.off("SiLU")
        assert activation.isa() == PATHS[0] and "set by set_isa()" in activation.isa_reason()
    finally:
        activation.reset_isa()


def test_a_failed_attention_switch_keeps_the_pin_the_model_had(explorer: Explorer, hub: dict) -> None:
    explorer.on(ATTENTION, candidate=f"bundled@{PINNED}")
    (refused,) = explorer.on(ATTENTION, candidate="bundled@avx1024")[:1]
    assert refused.is_kernel and refused.code_path.pinned  # the model still runs the pinned kernel
    assert hub["flash_attn"].isa() == PINNED
    assert "no code path 'avx1024'" in explorer._switchboard.doors[ATTENTION].reason


class BrokenReporter(StrangerKernel):
    """A stranger's kernel whose reason and reset raise."""

    def isa_reason(self) -> str:
        raise RuntimeError("no reason today\nsecond line")

    def reset_isa(self) -> str:
        raise RuntimeError("cannot reset")


def test_a_kernel_whose_reason_or_reset_raises_is_read_and_let_go_of_in_one_line() -> None:
    from kernel_explorer.switching import code_paths

    kernel = BrokenReporter()
    assert code_paths.running_path(kernel).why == "fast: its reason could not be read (no reason today)"
    code_paths.pin(kernel, "fast", "holder", "stranger@fast")
    with pytest.warns(RuntimeWarning, match=r"stays on code path fast: .*\(cannot reset\)"):
        code_paths.unpin("holder")
    assert not code_paths.running_path(kernel).pinned  # let go of all the same


def test_a_model_dropped_while_pinned_lets_go_of_its_pin(hub: dict) -> None:
    """A notebook cell run again drops its model and explorer with a `@path` still on: the pin goes
    with the model, so a new explorer neither reads "pinned while ..." nor is refused its own path."""
    import gc

    if len(PATHS) < 2:
        pytest.skip("this CPU runs one code path")
    activation = hub["activation"]
    chosen = activation.isa()
    other = next(path for path in PATHS if path != PINNED)
    dropped = Explorer(tiny_llama(), include_transformers=False)
    dropped.on("SiLU", candidate=f"bundled@{PINNED}")
    dropped.on(ATTENTION, candidate=f"bundled@{PINNED}")
    assert activation.isa() == PINNED
    del dropped
    gc.collect()

    explorer = Explorer(tiny_llama(), include_transformers=False)
    try:
        (now, *_) = explorer.on("SiLU")
        assert not now.code_path.pinned and "pinned while" not in now.code_path.why
        assert activation.isa() == chosen  # the measured choice is back
        running = explorer.on("SiLU", candidate=f"bundled@{other}")  # not refused: nobody holds it
        assert all(now.is_kernel and now.code_path.path == other for now in running)
    finally:
        explorer.reset()
