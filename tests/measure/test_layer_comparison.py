"""Layer comparison and determinism on captured activations."""

from __future__ import annotations

import pytest
import torch

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama


@pytest.fixture
def explorer(hub: dict) -> Explorer:
    found = Explorer(tiny_llama(), include_transformers=False)
    found.capture(torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(3)))
    yield found
    found.reset()


def test_compare_streams_divergence_then_interleaved_pairs(explorer: Explorer) -> None:
    handle = explorer.compare("RMSNorm", pairs=3)
    assert handle.outcome == "finished"
    divergence = explorer.results.records("layer_divergence")
    latency = explorer.results.records("layer_latency")
    assert len(divergence) == 5 and len(latency) == 5 * 3
    assert all(r.values.kernel_on for r in divergence + latency)
    for record in divergence:
        values = record.values
        assert values.dtype == "float32" and values.allclose is True
        # the kernel sums in another order: a few ULP at most, and as close to float64 as PyTorch
        assert values.max_ulp <= 8
        assert values.kernel_err64 <= 4 * values.pytorch_err64 + 1e-7
    for record in latency:
        assert record.values.pytorch_s > 0 and record.values.kernel_s > 0
        assert record.values.speedup == pytest.approx(record.values.pytorch_s / record.values.kernel_s)
    assert not any(now.is_kernel for now in explorer.running())  # switched on for the run only


def test_switches_the_user_made_are_kept(explorer: Explorer) -> None:
    explorer.on("RMSNorm", "model.norm")
    explorer.compare("RMSNorm", pairs=1)
    assert [now.instance for now in explorer.running("RMSNorm") if now.is_kernel] == ["model.norm"]


def test_unknown_layer_fails_before_anything_runs(explorer: Explorer) -> None:
    with pytest.raises(KernelExplorerError, match="has no kernel layer 'LayerNorm'"):
        explorer.compare("LayerNorm")
    assert len(explorer.results) == 0


def test_determinism_of_the_bundled_kernels(explorer: Explorer) -> None:
    explorer.compare("SiLU", "rotary_pos_emb", pairs=1, determinism_runs=4)
    records = explorer.results.records("layer_determinism")
    assert len(records) == 2 + 2
    for record in records:
        assert record.values.runs == 4
        assert record.values.kernel_identical == 1.0
        assert record.values.pytorch_deterministic_identical == 1.0
    assert not torch.are_deterministic_algorithms_enabled()


def _rmsnorm_board(rows: int, on: bool):  # type: ignore[no-untyped-def]
    """One 4096-wide RMSNorm (the bundled kernel on or off) and a captured input of `rows` rows."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from kernel_explorer.catalog.candidates import Catalog
    from kernel_explorer.measure.capture import CapturedInputs
    from kernel_explorer.switching.board import Switchboard

    board = Switchboard(torch.nn.Sequential(LlamaRMSNorm(4096)), Catalog(include_transformers=False))
    if on:
        board.on("RMSNorm")
    x = torch.randn(rows, 4096, generator=torch.Generator().manual_seed(0))
    return board, CapturedInputs(calls={("RMSNorm", "0"): [((x,), {})]})


def test_a_verdict_closes_each_layer_with_interval_floor_and_provenance(explorer: Explorer) -> None:
    explorer.compare("RMSNorm", pairs=4, calibration_pairs=5)
    (verdict,) = explorer.results.records("layer_verdict")
    v = verdict.values
    assert v.pairs == 5 * 4 and v.instances == 5 and v.stopped_by == "pairs" and v.kernel_on
    assert v.speedup_low <= v.speedup <= v.speedup_high and v.confidence >= 0.95
    assert v.noise_floor >= 0 and v.verdict in ("faster", "slower", "no difference we can detect here")
    assert v.accuracy.startswith(("bitwise equal", "rounds differently", "less accurate"))
    assert len(explorer.results.records("layer_calibration")) == 5
    origin = explorer.results.records("layer_latency")[0].provenance
    assert origin is not None and origin.dtype == "float32" and origin.shape == (1, 12, 64)
    assert origin.threads == torch.get_num_threads() and origin.isa in (
        "avx512bf16",
        "avx512",
        "avx2",
        "portable",
    )
    assert origin.kernel_id and origin.variant == "torch213-cxx11-cpu-x86_64-linux"
    assert (
        origin.torch == torch.__version__
        and origin.kernels == __import__("kernels").__version__
        and origin.machine
    )
    frame = explorer.results.to_pandas("layer_latency")
    assert {"isa", "threads", "kernel_id", "machine"} <= set(frame.columns)  # exported with the data
    (row,) = explorer.results.layer_summary().to_dict("records")
    assert row["speedup_low"] == v.speedup_low and row["verdict"] == v.verdict and row["aa_pairs"] == 5


def test_pytorch_against_itself_is_no_difference_in_at_least_38_of_40(hub: dict) -> None:
    """A/A is never called a difference; a run the machine stalled says so instead of a number (on
    a loaded 2-core guest, 4 of 40 here), and that is no claim of a difference either."""
    from kernel_explorer.measure.layer_comparison import compare_layer
    from kernel_explorer.measure.stats import FASTER, SLOWER

    board, captured = _rmsnorm_board(16, on=False)  # the "kernel" side is PyTorch: a known-equal pair
    wrong = unmeasurable = 0
    for index in range(40):
        records = list(
            compare_layer(board, captured, "RMSNorm", run_id=f"aa{index}", pairs=7, switch_on=False)
        )
        verdict = records[-1].values
        assert not verdict.kernel_on
        wrong += verdict.verdict in (FASTER, SLOWER)
        unmeasurable += not verdict.measurable
    assert wrong <= 2
    assert unmeasurable < 20  # most runs measure something, even here


def test_adaptive_sampling_stops_on_precision_or_budget_and_says_which(hub: dict) -> None:
    from kernel_explorer.measure.layer_comparison import compare_layer
    from kernel_explorer.measure.stats import FASTER

    board, captured = _rmsnorm_board(64, on=True)
    records = list(compare_layer(board, captured, "RMSNorm", run_id="r", precision=0.25, budget_s=5.0))
    verdict = records[-1].values
    latency = [r for r in records if r.kind == "layer_latency"]
    assert verdict.stopped_by in ("precision", "budget") and verdict.pairs == len(latency) >= 6
    if verdict.stopped_by == "precision":
        assert (verdict.speedup_high - verdict.speedup_low) / 2 / verdict.speedup <= 0.25
    assert verdict.verdict == FASTER  # the bundled RMSNorm is several times eager's speed
    records = list(compare_layer(board, captured, "RMSNorm", run_id="b", precision=1e-6, budget_s=0.2))
    assert records[-1].values.stopped_by == "budget"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pairs": 0}, "pairs must be a positive"),
        ({"precision": 1.5}, "precision must be between 0 and 1"),
        ({"budget_s": -1}, "budget_s must be a positive"),
    ],
)
def test_bad_sampling_input_runs_nothing(explorer: Explorer, kwargs: dict, message: str) -> None:
    with pytest.raises(KernelExplorerError, match=message):
        explorer.compare("RMSNorm", **kwargs)
    assert len(explorer.results) == 0


def test_a_high_noise_floor_is_one_warning_line_from_compare(explorer: Explorer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The warning path end to end: every floor counts as high when the threshold is below zero."""
    from kernel_explorer.measure import stats

    monkeypatch.setattr(stats, "HIGH_NOISE", -1.0)
    with pytest.warns(stats.NoisyMachineWarning) as caught:
        explorer.compare("RMSNorm", pairs=2, calibration_pairs=3)
    (warning,) = caught.list
    message = str(warning.message)
    assert message.startswith("This machine is noisy: PyTorch against itself moves") and "\n" not in message
    monkeypatch.setattr(stats, "HIGH_NOISE", float("inf"))  # no floor is high: no warning
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", stats.NoisyMachineWarning)
        explorer.compare("RMSNorm", pairs=2, calibration_pairs=3)


def test_instances_of_different_sizes_are_not_stalls_of_each_other() -> None:
    """Each instance has its own stall watch: a model's lm_head may take 80x its k_proj, which is
    no stall; a pair 100x slower than its own instance's time is. The times here are given, not
    measured (the loop's bookkeeping is what is tested)."""
    from kernel_explorer.measure.layer_comparison import interleaved_series
    from kernel_explorer.measure.stats import StallWatch, StopRule

    base = {"small": 1e-6, "large": 80e-6}
    rounds: list[int] = []

    def pair(item: str, index: int, aa: bool) -> tuple[float, float, bool, int]:
        rounds.append(index)
        slow = 100 if (item == "large" and index == 3 and not aa) else 1
        return base[item], base[item] / 2 * slow, not aa, 1

    series = interleaved_series(
        pair,
        ["small", "large"],
        lambda item, values: values,  # type: ignore[arg-type, return-value]
        calibration_pairs=2,
        stop=StopRule(5, 0.05, 60.0),
        stalls=lambda item: StallWatch(),
    )
    samples = [v for v in series if hasattr(v, "stalled")]
    assert [s.stalled for s in samples] == [False] * 7 + [True] + [False] * 2


def test_a_switch_mid_comparison_names_the_pairs_measured_after_it(hub: dict) -> None:
    """A dashboard's Run measures as things are (switch_on=False); a click mid-Run switches the
    kernel in: the pairs from then on carry its kernel id, those before carry none, and the verdict
    speaks for the kernel's pairs only (not PyTorch's before the click under the kernel's name)."""
    from kernel_explorer.measure.layer_comparison import compare_layer

    board, captured = _rmsnorm_board(rows=4, on=False)
    records = compare_layer(
        board, captured, "RMSNorm", run_id="r", pairs=8, calibration_pairs=2, switch_on=False
    )
    latencies, verdicts = [], []
    for record in records:
        if type(record.values).__name__ == "LayerVerdict":
            verdicts.append(record)
        if type(record.values).__name__ != "LayerLatency":
            continue
        latencies.append(record)
        if len(latencies) == 3:
            board.on("RMSNorm")
    before, after = latencies[:3], latencies[3:]
    assert after, "the comparison ended before the switch"
    assert all(r.provenance.kernel_id is None for r in before)
    assert all(r.provenance.kernel_id for r in after[1:])  # the pair in flight at the click may be either
    assert all(bool(r.provenance.kernel_id) == r.values.kernel_on for r in latencies)  # named as it ran
    (verdict,) = verdicts
    on_kernel = [r for r in latencies if r.provenance.kernel_id]
    assert verdict.provenance.kernel_id and verdict.values.kernel_on
    assert verdict.values.pairs == len(on_kernel) < len(latencies)
    board.reset()


class _SwitchAfterRelease:
    """The board's lock, making a switch right after a chosen hold of it is let go: where a click
    from another thread lands when it waited for the pair timed under that hold."""

    def __init__(self, lock, switch) -> None:  # type: ignore[no-untyped-def]
        self.lock, self.switch, self.armed, self.depth = lock, switch, False, 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        taken = self.lock.acquire(blocking, timeout)
        self.depth += taken
        return taken

    def release(self) -> None:
        self.depth -= 1
        self.lock.release()
        if self.depth == 0 and self.armed:
            self.armed = False
            self.switch()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _silu_as_a_run(explorer: Explorer, pairs: int) -> list:
    """SiLU compared as a dashboard's Run compares it (nothing switched for it), two A/A pairs."""
    from kernel_explorer.measure import layer_comparison

    return list(
        layer_comparison.compare_layer(
            explorer._switchboard,
            explorer.captured_inputs(),
            "SiLU",
            run_id="r",
            pairs=pairs,
            calibration_pairs=2,
            switch_on=False,
        )
    )


@pytest.mark.parametrize("change", ["on-to-off", "off-to-on", "candidate-to-candidate"])
def test_a_switch_right_after_a_pair_never_names_it(
    explorer: Explorer, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A dashboard's click during a Run, forced at the worst point: the moment a pair's timed
    calls let go of the lock, before its record is made (a Run once recorded a SiLU pair timed
    on the kernel under no kernel at a switch-off: a bare 'SiLU' trace, 'SiLU ·  · run-1' in the
    report). Every pair is named by what ran it: kernel on or off, and which candidate; and its
    time is before the switch when it ran before it (the live plots place a switch's change by
    the pairs' times: a pair stamped after the lock was let go read as run after the switch)."""
    import time

    from isa_paths import runnable_isas

    from kernel_explorer.measure import layer_comparison

    board = explorer._switchboard
    other = f"bundled@{runnable_isas()[-1]}"  # the bundled kernel with a path pinned: a second candidate
    first, then = {
        "on-to-off": ("bundled", None),
        "off-to-on": (None, "bundled"),
        "candidate-to-candidate": ("bundled", other),
    }[change]
    if first is not None:
        explorer.on("SiLU", candidate=first)
    clicked: list[float] = []

    def click() -> None:
        explorer.off("SiLU") if then is None else explorer.on("SiLU", candidate=then)
        clicked.append(time.time())

    lock = board.lock = _SwitchAfterRelease(board.lock, click)  # type: ignore[assignment]
    real, ran_with = layer_comparison.interleaved_pair, []

    def pair_then_click(*args, **kwargs):  # type: ignore[no-untyped-def]
        found = real(*args, **kwargs)
        labels = {c.label for (row, _), (c, _) in board.snapshot().items() if row == "SiLU"}
        assert len(labels) <= 1
        ran_with.append(next(iter(labels), None))  # what this pair's calls ran (every instance alike)
        lock.armed = len(ran_with) == 5  # the 3rd latency pair (2 calibration pairs before it)
        return found

    monkeypatch.setattr(layer_comparison, "interleaved_pair", pair_then_click)
    records = _silu_as_a_run(explorer, pairs=4)
    paired = [r for r in records if type(r.values).__name__ in ("LayerCalibration", "LayerLatency")]
    assert len(ran_with) > 5 and len(paired) == len(ran_with), "a pair went unrecorded or the run ended early"
    assert len(set(ran_with)) == 2, ran_with  # the click landed mid-run
    for record, label in zip(paired, ran_with, strict=True):
        if type(record.values).__name__ == "LayerCalibration":
            continue  # PyTorch against itself: named by the instance, whatever it runs
        named = record.provenance
        assert record.values.kernel_on == bool(named.kernel_id) == (label is not None), (label, named)
        assert named.candidate == label, (label, named.candidate)
        assert (record.time < clicked[0]) == (label == ran_with[0]), (record.time, clicked, label)


def test_a_pair_a_switch_lands_in_is_dropped(explorer: Explorer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A change inside a pair's lock hold (a kernel that raised falls back to PyTorch mid-pair, on
    the pair's own thread): its halves ran different things, so it is neither recorded nor counted."""
    from kernel_explorer.measure import layer_comparison

    board = explorer._switchboard
    explorer.on("SiLU")
    real, timed = layer_comparison.interleaved_pair, []

    def pair_then_fall_back(*args, **kwargs):  # type: ignore[no-untyped-def]
        found = real(*args, **kwargs)
        timed.append(found)
        if len(timed) == 5:  # inside the 3rd latency pair's hold, as a kernel's fallback is
            explorer.off("SiLU")
        return found

    monkeypatch.setattr(layer_comparison, "interleaved_pair", pair_then_fall_back)
    records = _silu_as_a_run(explorer, pairs=3)
    latencies = [r for r in records if type(r.values).__name__ == "LayerLatency"]
    assert len(latencies) == 3 * len(board.group("SiLU")) - 1  # the pair the switch landed in
    assert all(r.values.kernel_on == bool(r.provenance.kernel_id) for r in latencies)
    assert records[-1].values.pairs == len([r for r in latencies if not r.values.kernel_on])  # now: off
