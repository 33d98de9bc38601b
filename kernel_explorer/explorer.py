"""`Explorer`: the one object that the widgets, the magics and scripts drive.

It owns one catalog (where kernels come from), one switchboard (what runs now) and the hardware
snapshot, and hands out inventories. It works the same without Jupyter.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable, Iterator
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.modes import parse_mode
from kernel_explorer.catalog import Catalog
from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.measure.capture import DEFAULT_MEMORY_CAP, CapturedInputs
from kernel_explorer.measure.layers import CALIBRATION_PAIRS
from kernel_explorer.measure.runner import Measurement, RunHandle, Runner
from kernel_explorer.measure.stats import (
    DEFAULT_BUDGET_S,
    DEFAULT_PRECISION,
    NoisyMachineWarning,
    check_sampling,
    noise_warning,
)
from kernel_explorer.results import ResultLog
from kernel_explorer.switchboard import RunningNow, Switchboard

if TYPE_CHECKING:
    from kernels import Mode
    from torch import nn

    from kernel_explorer.catalog import Candidate
    from kernel_explorer.hardware import HardwareSnapshot
    from kernel_explorer.inventory import Inventory


# model -> its latest explorer (weak both ways: the explorer holds the model, so a strong value
# would keep both alive for ever)
_latest: weakref.WeakKeyDictionary[nn.Module, weakref.ref[Explorer]] = weakref.WeakKeyDictionary()


class Explorer:
    """See, switch and measure the kernels of one model.

    Args:
        model: any `torch.nn.Module` (Transformers or not).
        tokenizer: turns the default prompt (or yours) into inputs for captures and model comparisons.
        mapping: your own kernel mapping, in the dict form `kernels.use_kernel_mapping` takes
            (`{"RMSNorm": {"cpu": LocalLayerRepository(...)}}`); preferred over the other sources.
        mode: default mode for switching: "inference", "training" or "torch.compile".
        device: device type to choose kernels for; default: where the model's parameters are.
        strict: raise when a kernel fails to load or run, instead of keeping PyTorch for that layer.
        trust_remote_code: Hub repository ids you trust in addition to trusted publishers.
        include_bundled / include_registered / include_transformers: which other sources to read.

    Example:
        ```python
        from kernel_explorer import Explorer, load_default_model

        explorer = Explorer(load_default_model())
        print(explorer.inventory())
        with explorer.using("RMSNorm"):
            ...  # every RMSNorm runs the kernel here; PyTorch again after
        ```
    """

    def __init__(
        self,
        model: nn.Module,
        mapping: dict[str, dict[Any, Any]] | None = None,
        *,
        tokenizer: Any | None = None,
        mode: str | Mode = "inference",
        device: str | None = None,
        strict: bool = False,
        trust_remote_code: Iterable[str] = (),
        include_bundled: bool = True,
        include_registered: bool = True,
        include_transformers: bool = True,
    ) -> None:
        from torch import nn

        if not isinstance(model, nn.Module):
            raise KernelExplorerError(
                f"Explorer needs a torch.nn.Module, got {type(model).__name__}. "
                "For the default model: kernel_explorer.load_default_model()."
            )
        if mapping is not None and not isinstance(mapping, dict):
            raise KernelExplorerError(
                "mapping must be a dict like {'RMSNorm': {'cpu': LocalLayerRepository(...)}}, "
                f"got {type(mapping).__name__}."
            )
        self.model = model
        self.mode = parse_mode(mode)
        self.catalog = Catalog(
            mapping,
            include_registered=include_registered,
            include_bundled=include_bundled,
            include_transformers=include_transformers,
            trust_remote_code=trust_remote_code,
        )
        self.switchboard = Switchboard(model, self.catalog, device=device, strict=strict)
        self.tokenizer = tokenizer
        self.results = ResultLog()
        self._runner = Runner(self.results)
        self._captured: CapturedInputs | None = None
        self._captured_grad: CapturedInputs | None = None  # with autograd on, for training mode
        self._capture_kwargs: dict[str, Any] | None = None
        _latest[model] = weakref.ref(self)

    @classmethod
    def of(cls, model: nn.Module, **kwargs: Any) -> Explorer:
        """The explorer last made for `model`, or a new one (with `kwargs`) when it has none.

        What the magics use, so `%kernels explore model` twice, or after `Explorer(model)` in a
        cell, shows the same switches and results instead of a second, diverging copy.
        """
        ref = _latest.get(model)
        found = ref() if ref is not None else None
        if found is not None:
            return found
        return cls(model, **kwargs)

    @cached_property
    def hardware(self) -> HardwareSnapshot:
        from kernel_explorer.hardware import detect_hardware

        return detect_hardware()

    @property
    def layers(self) -> list[str]:
        """Kernel layer names this model has."""
        return list(self.switchboard.groups)

    def inventory(self, *, query_hub: bool = False) -> Inventory:
        """The model's kernel layers, their candidates here, what runs now and the last measured speedup."""
        from kernel_explorer.inventory import build_inventory

        return build_inventory(
            self.model,
            self.catalog,
            self.switchboard,
            mode=self.mode,
            query_hub=query_hub,
            measured=self.results.latest_verdicts(),
        )

    def on(
        self,
        name: str,
        instances: str | list[str] | None = None,
        *,
        mode: str | Mode | None = None,
        candidate: str | Candidate | None = None,
    ) -> list[RunningNow]:
        """Switch layer `name` (all instances, or those named or matched) to a kernel."""
        return self.switchboard.on(name, instances, mode=mode or self.mode, candidate=candidate)

    def off(self, name: str, instances: str | list[str] | None = None) -> list[RunningNow]:
        """Switch layer `name` back to PyTorch."""
        return self.switchboard.off(name, instances)

    def reset(self) -> None:
        """Every layer back to PyTorch."""
        self.switchboard.reset()

    def running(self, name: str | None = None) -> list[RunningNow]:
        """What each instance runs now."""
        return self.switchboard.running(name)

    @contextlib.contextmanager
    def using(
        self,
        *names: str,
        instances: str | list[str] | None = None,
        mode: str | Mode | None = None,
        candidate: str | Candidate | None = None,
    ) -> Iterator[list[RunningNow]]:
        """Kernels on for the block (all kernel layers when no name is given); the state before, after.

        The previous state comes back also when the block raises or is interrupted.
        """
        running: list[RunningNow] = []

        def switch_on() -> None:
            for name in names or self.layers:
                running.extend(self.on(name, instances, mode=mode, candidate=candidate))

        with self.switchboard.holding(switch_on):
            yield running

    # -- measuring -----------------------------------------------------------------------------

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
                (inputs and weights) against float64 (`TrainingVerdict`); see measure/training.py.
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

        found = self.results.records("layer_verdict", run_id) + self.results.records(
            "training_verdict", run_id
        )
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
        vocab = int(getattr(getattr(self.model, "config", None), "vocab_size", 0) or 0)
        if vocab <= 0:
            raise KernelExplorerError("compare_model needs model.config.vocab_size to make prefill inputs.")
        measurements = model_plan(
            self.switchboard,
            kwargs,
            mode=mode,
            lengths=lengths,
            pairs=pairs,
            vocab_size=vocab,
            decode_tokens=decode_tokens,
            decode_pairs=decode_pairs,
            floor_so_far=lambda run_id: max(
                (r.values.noise_floor for r in self.results.records("model_verdict", run_id)), default=0.0
            ),
        )
        return self.run(measurements, background=background, name=name)

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
        from pathlib import Path

        from kernel_explorer.report import ReportContext, write_report

        parameters = sum(p.numel() for p in self.model.parameters()) / 1e6
        context = ReportContext(
            model=f"{type(self.model).__name__} ({parameters:.1f}M parameters, {self.switchboard.device})",
            hardware=tuple(self.hardware.rows()),
            switches=tuple(
                (row.group.name, row.running_summary, row.measured_summary) for row in self.inventory().rows
            ),
        )
        written = write_report(self.results, Path(path), title="kernel_explorer report", context=context)
        return str(written)

    def __repr__(self) -> str:
        on = sum(r.is_kernel for r in self.running())
        total = sum(len(g) for g in self.switchboard.groups.values())
        model = type(self.model).__name__
        return f"<Explorer {model}: {len(self.layers)} kernel layers, {on}/{total} instances on kernels>"
