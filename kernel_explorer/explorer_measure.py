"""The measuring half of `Explorer`: compare layers and the model, profile, run live, report.

A mixin, so `Explorer` stays one object for its users while its two jobs (switching, measuring)
live in two files a reader can take in at once. It reads the explorer's model, switchboard,
tokenizer and results; it switches nothing itself beyond what a measurement puts back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.measure.capture import DEFAULT_MEMORY_CAP, CapturedInputs
from kernel_explorer.measure.layer_comparison import CALIBRATION_PAIRS
from kernel_explorer.measure.runner import Measurement, RunHandle, Runner
from kernel_explorer.measure.stats import (
    DEFAULT_BUDGET_S,
    DEFAULT_PRECISION,
    NoisyMachineWarning,
    check_sampling,
    noise_warning,
)

if TYPE_CHECKING:
    from torch import nn

    from kernel_explorer.measure.log import ResultLog
    from kernel_explorer.switching.board import Switchboard


class Measuring:
    """Measurements of one explorer's model; records stream into `self.results`."""

    model: nn.Module
    switchboard: Switchboard
    tokenizer: Any
    results: ResultLog
    layers: list[str]
    _runner: Runner
    _captured: CapturedInputs | None
    _captured_grad: CapturedInputs | None
    _capture_kwargs: dict[str, Any] | None

    def capture(self, inputs: Any = None, *, memory_cap: int = DEFAULT_MEMORY_CAP) -> CapturedInputs:
        """Run the model once on `inputs` (default: a short prompt) and keep each layer's real inputs."""
        from kernel_explorer.measure.capture import capture_inputs, model_inputs

        kwargs = model_inputs(self.model, inputs, self.tokenizer)
        self._captured = capture_inputs(self.switchboard, kwargs, memory_cap=memory_cap)
        self._captured_grad = None  # training mode recaptures these inputs with autograd on
        self._capture_kwargs = kwargs
        return self._captured

    def captured_inputs(self, *, grad: bool = False) -> CapturedInputs:
        """The layers' captured inputs: the last `capture()`, or a new one on the default prompt.

        With `grad`: captured with autograd on (inputs that required grad are leaves that do), once.
        """
        from kernel_explorer.measure.capture import capture_inputs, model_inputs

        if not grad:
            if self._captured is None and self._capture_kwargs is not None:  # dropped by extend()
                self._captured = capture_inputs(self.switchboard, self._capture_kwargs)
            return self._captured if self._captured is not None else self.capture()
        if self._captured_grad is None:
            kwargs = self._capture_kwargs or model_inputs(self.model, None, self.tokenizer)
            self._captured_grad = capture_inputs(self.switchboard, kwargs, grad=True)
        return self._captured_grad

    def compare(
        self,
        *names: str,
        instances: str | list[str] | None = None,
        pairs: int | None = None,
        precision: float = DEFAULT_PRECISION,
        budget_s: float = DEFAULT_BUDGET_S,
        calibration_pairs: int = CALIBRATION_PAIRS,
        determinism_runs: int = 0,
        background: bool = False,
        name: str | None = None,
        mode: str = "inference",
        candidates: list[str] | None = None,
    ) -> RunHandle:
        """Kernel against PyTorch on captured activations, per layer name (all when none is given).

        Records stream into `explorer.results`: divergence per instance, `calibration_pairs` A/A
        pairs (PyTorch against PyTorch: the noise floor), interleaved latency pairs, then a
        `LayerVerdict` per layer (the speedup's 95% interval, "faster", "slower" or "no difference
        we can detect here", accuracy against float64, notes to look twice), then (with
        `determinism_runs`) repeat-run identity.

        Args:
            pairs: rounds of latency pairs over the instances; None (default): until the interval's
                half-width is within `precision` of the median, or `budget_s` seconds per layer.
            precision: target half-width of the interval, relative (0.05: +-5%).
            budget_s: the most seconds of latency pairs per layer, whatever else stops it.
            name: the run's id in every summary (default: run-N).
            mode: "training": forward+backward pairs with kernels in training mode, and gradients
                (inputs and weights) against float64 (a `LayerVerdict` in mode "training"); see
                measure/training.py.
            candidates: compare each layer once per candidate matching these sources or labels
                (e.g. ["bundled", "peer"]), each switched on for its turn; `layer_summary()` then
                has a row per kernel (its `kernel` column).
        """
        from kernel_explorer.measure.plans import layer_plan

        check_sampling(pairs, precision, budget_s)
        for layer in names:
            self.switchboard.group(layer)  # unknown names fail here, before anything runs
        measurements = layer_plan(
            self.switchboard,
            lambda grad: self.captured_inputs(grad=grad),
            list(names or self.layers),
            mode=mode,
            determinism_runs=determinism_runs,
            candidates=candidates,
            instances=instances,
            pairs=pairs,
            precision=precision,
            budget_s=budget_s,
            calibration_pairs=calibration_pairs,
        )
        handle = self.run(measurements, background=background, name=name)
        if not background:
            self._warn_if_noisy(handle.run_id)
        return handle

    def _warn_if_noisy(self, run_id: str) -> None:
        """One line (a `NoisyMachineWarning`) when this run's A/A noise floor is high."""
        import warnings

        kinds = ("layer_verdict", "model_verdict")
        found = [r for kind in kinds for r in self.results.records(kind, run_id)]
        floors = [r.values.noise_floor for r in found]
        warning = noise_warning(max(floors, default=0.0))
        if warning:
            warnings.warn(warning, NoisyMachineWarning, stacklevel=3)

    def compare_model(
        self,
        *,
        inputs: Any = None,
        lengths: tuple[int, ...] = (128, 512),
        decode_tokens: int = 32,
        pairs: int = 7,
        decode_pairs: int = 3,
        background: bool = False,
        name: str | None = None,
        mode: str = "inference",
    ) -> RunHandle:
        """The model as switched now against all-PyTorch: prefill, decode tok/s, logits, greedy agreement.

        Prefill runs an A/A calibration and `pairs` interleaved pairs per length, decode
        `decode_pairs` pairs (each a whole generation); each closes with a `ModelVerdict` whose
        interval says how sure it is (three decode pairs cover the median with 75%, and say so).
        `mode="training"`: a training step per length instead (loss and gradient agreement, then
        step pairs); `mode="torch.compile"`: compiled-with-kernels against compiled PyTorch prefill.
        See measure/training_model.py.
        """
        from kernel_explorer.measure.capture import check_runnable, model_inputs
        from kernel_explorer.measure.plans import model_plan

        check_sampling(pairs, DEFAULT_PRECISION, DEFAULT_BUDGET_S)
        check_sampling(decode_pairs, DEFAULT_PRECISION, DEFAULT_BUDGET_S)
        check_runnable(self.model)
        kwargs = model_inputs(self.model, inputs, self.tokenizer)
        measurements = model_plan(
            self.switchboard,
            kwargs,
            mode=mode,
            lengths=lengths,
            pairs=pairs,
            vocab_size=self._vocab_size("compare_model"),
            decode_tokens=decode_tokens,
            decode_pairs=decode_pairs,
            floor_so_far=lambda run_id: max(
                (r.values.noise_floor for r in self.results.records("model_verdict", run_id)), default=0.0
            ),
        )
        handle = self.run(measurements, background=background, name=name)
        if not background:
            self._warn_if_noisy(handle.run_id)
        return handle

    def breakdown(self, *, tokens: int = 512, repeats: int = 2, background: bool = False) -> RunHandle:
        """Where the model's time goes: each kernel layer's share of a prefill of `tokens` tokens and
        of one decode step, and what no kernel covers (Linear, attention, embedding, the rest).

        Records stream into `explorer.results` (`TimeShare`); `results.breakdown_summary()` adds
        Amdahl's model speedups from the last measured kernel speedups (run `compare` first, on
        activations of the same length: `capture(token ids of that length)`; a kernel's speedup
        depends on the shape, and the default capture is a short prompt).
        """
        from kernel_explorer.measure.breakdown import time_breakdown
        from kernel_explorer.measure.capture import check_runnable

        if not isinstance(tokens, int) or tokens <= 0 or not isinstance(repeats, int) or repeats <= 0:
            raise KernelExplorerError(
                f"tokens and repeats must be positive whole numbers, got {tokens!r}, {repeats!r}."
            )
        check_runnable(self.model)
        vocab = self._vocab_size("breakdown")
        board = self.switchboard
        return self.run(
            [
                lambda run_id: time_breakdown(
                    board, run_id=run_id, vocab_size=vocab, tokens=tokens, repeats=repeats
                )
            ],
            background=background,
        )

    def _vocab_size(self, what: str) -> int:
        vocab = int(getattr(getattr(self.model, "config", None), "vocab_size", 0) or 0)
        if vocab <= 0:
            raise KernelExplorerError(f"{what} needs model.config.vocab_size to make prefill inputs.")
        return vocab

    def run(
        self, measurements: list[Measurement], *, background: bool = True, name: str | None = None
    ) -> RunHandle:
        """Start measurements (generators of records) on the worker thread, or here."""
        return self._runner.start(measurements, background=background, name=name)

    def run_live(
        self,
        *,
        cycles: int | None = None,
        precision: float = DEFAULT_PRECISION,
        budget_s: float = DEFAULT_BUDGET_S,
        name: str | None = None,
    ) -> RunHandle:
        """On the worker thread: `compare` every layer as switched now, cycle after cycle, until cancelled.

        The same measurement and statistics as `compare`, so the two agree within their intervals;
        nothing is switched by the run, and a switch made while it runs shows in the next pair.
        This is what the dashboard's Run button starts; it returns at once (inputs are captured on
        the run's thread when none are yet).
        """
        from kernel_explorer.measure.capture import model_inputs
        from kernel_explorer.measure.live import live_cycles

        check_sampling(None, precision, budget_s)
        board = self.switchboard
        return self.run(
            [
                lambda run_id: live_cycles(
                    board,
                    self.captured_inputs,
                    lambda: model_inputs(self.model, None, self.tokenizer),
                    run_id=run_id,
                    cycles=cycles,
                    precision=precision,
                    budget_s=budget_s,
                )
            ],
            background=True,
            name=name,
        )

    def report(self, path: str) -> str:
        """Write every result so far, with the model, machine, date and switch state, to one
        self-contained HTML file; returns its path. A path that cannot be written: one line."""
        from kernel_explorer.views.report import write_explorer_report

        return str(write_explorer_report(self, path))
