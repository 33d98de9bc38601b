"""`Explorer`: the one object that the widgets, the magics and scripts drive.

It owns one catalog (where kernels come from), one switchboard (what runs now) and the hardware
snapshot, and hands out inventories. It works the same without Jupyter. Every type its methods hand
back is importable from here by name (`__all__`), so the views, which import only the face, and a
user's type hints need nothing below it.

May import: _backend, build, catalog, errors, export, inspect, inventory, measure, numerics, switching
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend import quiet
from kernel_explorer._backend.modes import parse_mode
from kernel_explorer.catalog.availability import Availability, State
from kernel_explorer.catalog.candidates import Candidate, Catalog, without_scope
from kernel_explorer.catalog.kernel_config import is_kernel_config, mapping_from_kernel_config
from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.inspect.hardware import HardwareSnapshot
from kernel_explorer.inspect.layer_groups import LayerGroup, find_kernel_layers
from kernel_explorer.inspect.running import RunningNow
from kernel_explorer.inspect.variants import VariantsReport
from kernel_explorer.inventory.table import Inventory, InventoryRow
from kernel_explorer.measure.capture import DEFAULT_MEMORY_CAP, CapturedInputs
from kernel_explorer.measure.kinds import LayerRequest, Measurement, plan_for
from kernel_explorer.measure.layer_comparison import CALIBRATION_PAIRS
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.provenance import model_provenance
from kernel_explorer.measure.runner import RunHandle, Runner, leave_the_cpus_to_runs
from kernel_explorer.measure.stats import (
    DEFAULT_BUDGET_S,
    DEFAULT_PRECISION,
    NoisyMachineWarning,
    check_sampling,
    noise_warning,
)
from kernel_explorer.measure.summary import Summary
from kernel_explorer.switching import model_state
from kernel_explorer.switching.board import Switchboard
from kernel_explorer.switching.extension import adopt

if TYPE_CHECKING:
    from pathlib import Path

    from kernels import Mode
    from torch import nn

__all__ = [
    "Availability",
    "Candidate",
    "CapturedInputs",
    "Explorer",
    "HardwareSnapshot",
    "Inventory",
    "InventoryRow",
    "LayerGroup",
    "ResultLog",
    "RunHandle",
    "RunningNow",
    "State",
    "Summary",
    "VariantsReport",
    "check_sampling",
    "find_kernel_layers",
    "without_scope",
]


class Explorer:
    """See, switch and measure the kernels of one model.

    Args:
        model: any `torch.nn.Module` (Transformers or not).
        tokenizer: turns the default prompt (or yours) into inputs for captures and model comparisons.
        mapping: your own kernel mapping, in the dict form `kernels.use_kernel_mapping` takes
            (`{"RMSNorm": {"cpu": LocalLayerRepository(...)}}`) or as a Transformers `KernelConfig`;
            preferred over the other sources.
        mode: default mode for switching: "inference", "training" or "torch.compile".
        device: device type to choose kernels for; default: where the model's parameters are.
        strict: raise when a kernel fails to load or run, instead of keeping PyTorch for that layer.
        trust_remote_code: Hub repository ids you trust in addition to trusted publishers.
        include_bundled: read the bundled CPU kernels as a source.
        include_registered: read the mappings registered with `kernels` as a source.
        include_transformers: read Transformers' default mapping as a source.
        attention: your attention repositories for the attention row (see `attention_candidates`).
        peers: local kernel-builder repositories (sources or builds) offered next to the bundled
            kernels, as candidates of source "peer" (`add_peer`).
        project: a project folder whose kernel pins (`[tool.kernels]` in pyproject.toml,
            `kernels.lock`) the inventory shows.
        trial_timeout: seconds a candidate from outside this package may take to answer its first
            trial, which runs in a separate worker process (a crash there is the candidate's reason,
            not the notebook's end); default `kernel_explorer.switching.isolation.DEFAULT_TIMEOUT`
            (30 s).

    Example:
        ```python
        from kernel_explorer import Explorer, load_default_model

        model, tokenizer = load_default_model()
        explorer = Explorer(model, tokenizer=tokenizer)
        print(explorer.inventory())
        with explorer.using("RMSNorm"):
            ...  # every RMSNorm runs the kernel here; PyTorch again after
        ```
    """

    def __init__(
        self,
        model: nn.Module,
        mapping: dict[str, dict[Any, Any]] | Any | None = None,
        *,
        tokenizer: Any | None = None,
        mode: str | Mode = "inference",
        device: str | None = None,
        strict: bool = False,
        trust_remote_code: Iterable[str] = (),
        include_bundled: bool = True,
        include_registered: bool = True,
        include_transformers: bool = True,
        attention: Iterable[str | Path] = (),
        peers: Iterable[str | Path] = (),
        project: str | Path | None = None,
        trial_timeout: float | None = None,
    ) -> None:
        from torch import nn

        quiet.install()  # Transformers' no-op "Casting fp32 inputs back to torch.float32" line, dropped
        if not isinstance(model, nn.Module):
            raise KernelExplorerError(
                f"Explorer needs a torch.nn.Module, got {type(model).__name__}. "
                "For the default model: kernel_explorer.load_default_model()."
            )
        #: a Transformers KernelConfig given as the mapping: its fusions are inventory rows
        self._kernel_config = mapping if is_kernel_config(mapping) else None
        if is_kernel_config(mapping):  # the form Transformers users write for from_pretrained
            where = device or next((p.device.type for p in model.parameters()), "cpu")
            mapping = mapping_from_kernel_config(mapping, where)
        if mapping is not None and not isinstance(mapping, dict):
            raise KernelExplorerError(
                "mapping must be a dict like {'RMSNorm': {'cpu': LocalLayerRepository(...)}}, "
                f"got {type(mapping).__name__}."
            )
        self.model = model
        self._mode = parse_mode(mode)
        self._catalog = Catalog(
            mapping,
            include_registered=include_registered,
            include_bundled=include_bundled,
            include_transformers=include_transformers,
            trust_remote_code=trust_remote_code,
        )
        if trial_timeout is not None and not (isinstance(trial_timeout, (int, float)) and trial_timeout > 0):
            raise KernelExplorerError(
                f"trial_timeout must be a positive number of seconds, got {trial_timeout!r}."
            )
        self._switchboard = Switchboard(
            model, self._catalog, device=device, strict=strict, trial_timeout=trial_timeout
        )
        adopt(self._switchboard)  # rows an earlier explorer added keep their candidates
        self.project = project  # a folder whose kernels.lock / [tool.kernels] pins the inventory shows
        for path in peers:  # built for this CPU (cached); candidates of source "peer"
            self.add_peer(path)
        self.tokenizer = tokenizer
        self.results = ResultLog()
        self._runner = Runner(self.results, origin=lambda: model_provenance(self._switchboard))
        self._captured = None  # the layers' captured inputs (see `capture`)
        self._captured_grad = None  # the same with autograd on, for training mode
        self._capture_kwargs: dict[str, Any] | None = None
        # the model's latest explorer, weakly (the explorer holds the model: a strong reference
        # would keep both alive for ever)
        model_state.of(model).explorer = weakref.ref(self)
        self._switchboard.samples = self._sample
        self._switchboard.long_samples = self._long_sample
        self._switchboard.model_call = self._model_call
        self._switchboard.tokens = self._tokens
        self._captured_for: tuple[Any, ...] | None = None  # the model's dtype and device at capture
        self._longer: tuple[tuple[Any, ...], Any] | None = None  # (for, the longer trial's capture)
        if attention:
            self.attention_candidates(*attention)

    @classmethod
    def of(cls, model: nn.Module, **kwargs: Any) -> Explorer:
        """The explorer last made for `model`, or a new one (with `kwargs`) when it has none.

        What the magics use, so `%kernels explore model` twice, or after `Explorer(model)` in a
        cell, shows the same switches and results instead of a second, diverging copy.
        """
        ref = model_state.of(model).explorer
        found = ref() if ref is not None else None
        if found is not None:
            return found
        return cls(model, **kwargs)

    @cached_property
    def hardware(self) -> HardwareSnapshot:
        """The machine, and the code path each built bundled kernel runs on it (and why)."""
        from dataclasses import replace

        from kernel_explorer.inspect.hardware import detect_hardware
        from kernel_explorer.inspect.kernel_paths import bundled_kernel_paths
        from kernel_explorer.switching.code_paths import holders

        return replace(detect_hardware(), kernel_paths=bundled_kernel_paths(holders=holders))

    @property
    def layers(self) -> list[str]:
        """Kernel layer names this model has."""
        return list(self._switchboard.groups)

    @property
    def mode(self) -> Mode:
        """The kernels mode layers switch in (inference, training, torch.compile); set by name too."""
        return self._mode

    @mode.setter
    def mode(self, mode: str | Mode) -> None:
        self._mode = parse_mode(mode)

    def group(self, name: str) -> LayerGroup:
        """The kernel layer group `name`, or a clear error naming the groups this model has."""
        return self._switchboard.group(name)

    @property
    def device(self) -> str:
        """The device type kernels are picked for (where the model's parameters are, unless given)."""
        return self._switchboard.device

    def candidates(self, name: str | None = None) -> list[Candidate]:
        """Every candidate the catalog knows for layer `name` (all layers when None), from every source."""
        return self._catalog.candidates(name)

    def availability(self, candidate: Candidate, *, query_hub: bool = False) -> Availability:
        """Where `candidate` stands on this explorer's device and mode: one state and its reason."""
        return self._catalog.availability(candidate, device=self.device, mode=self.mode, query_hub=query_hub)

    def subscribe_switches(self, observer: Callable[[], None]) -> Callable[[], None]:
        """Call `observer()` after every switch of this model (by any explorer, magic or widget);
        returns the function that unsubscribes it. What views use to stay in step with the model."""
        return self._switchboard.subscribe(observer)

    def add_peer(self, path: str | Path, layers: dict[str, str] | None = None) -> list[Candidate]:
        """Offer a local kernel-builder repository (source or built path) as a candidate of source
        "peer" for the model's layers its classes serve (or `layers`: {layer name: class})."""
        from kernel_explorer.catalog.peers import peer_mapping
        from kernel_explorer.switching import events
        from kernel_explorer.switching.isolation import peer_classes

        timeout = self._switchboard.trial_timeout
        read = functools.partial(peer_classes, timeout=timeout)  # its Python runs in the worker
        mapping = peer_mapping(path, self.layers, layers=layers, read_classes=read)
        with events.changing(self.model):  # every view of the model redraws: a picker offers the peer
            return self._catalog.add_peer(mapping)

    def inventory(self, *, query_hub: bool = False) -> Inventory:
        """The model's kernel layers, their candidates here, what runs now and the last measured speedup."""
        from kernel_explorer._backend.locks import read_pins
        from kernel_explorer.inventory.table import build_inventory
        from kernel_explorer.measure.kinds.time import kernels_running

        pins = read_pins(self.project) if self.project is not None else ()
        self._catalog.use_pins(pins)  # each Hub candidate's lock column compares with them
        return build_inventory(
            self.model,
            self._catalog,
            self._switchboard,
            mode=self.mode,
            query_hub=query_hub,
            measured=self.results.latest_verdicts(kernels_running(self._switchboard.running())),
            shares=self.results.latest_shares(),
            pins=pins,
            kernel_config=self._kernel_config,
        )

    def attention_candidates(self, *repositories: str | Path) -> list[Candidate]:
        """Add attention repositories to the attention row: Hub strings `org/repo[@rev][:fn]` (loaded
        by Transformers through `kernels`) or local repository folders (a `Path`); returns them.

        Attention is model-wide: `on("attention", candidate=...)` switches every attention module.
        """
        door = self._switchboard.attention
        if door is None:
            raise KernelExplorerError(
                f"{type(self.model).__name__} has no attention interface (Transformers' "
                "set_attn_implementation), so it has no attention row to add candidates to."
            )
        return list(door.add(*repositories))

    def on(
        self,
        name: str,
        instances: str | list[str] | None = None,
        *,
        mode: str | Mode | None = None,
        candidate: str | Candidate | None = None,
        allow_changes: bool = False,
    ) -> list[RunningNow]:
        """Switch layer `name` (all instances, or those named or matched) to a kernel.

        `candidate`: a label, a source word ("bundled", "peer", ...) or a `Candidate` (default: the
        first that runs here). A kernel that changes its module (repacks weights) keeps the original
        tensors while on, to restore them exactly; `allow_changes=True` switches it even when that
        would hold more than a quarter of the memory available.
        """
        try:
            return self._switchboard.on(
                name, instances, mode=mode or self.mode, candidate=candidate, allow_changes=allow_changes
            )
        finally:
            leave_the_cpus_to_runs()

    def _sample(self, name: str, path: str) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """One real call of (layer, instance) from the captured inputs, for a probe's trial call."""
        calls = self.captured_inputs().calls.get((name, path))
        return calls[0] if calls else None

    def _model_call(self) -> dict[str, Any] | None:
        """The capture's model call (captured first when there is none), for a whole-model trial."""
        self.captured_inputs()
        return self._capture_kwargs

    def _tokens(self) -> int | None:
        """The length of the capture (or of the one the next trial makes), without running the model."""
        from kernel_explorer.measure.capture import model_inputs
        from kernel_explorer.switching.trial_inputs import tokens_of

        return tokens_of(self._capture_kwargs or model_inputs(self.model, None, self.tokenizer))

    def _long_sample(self, name: str, path: str) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The call of (layer, instance) when the capture's prompt is repeated to the longer trial
        length (`switching/trial_inputs.py`): one capture of the first instance of each row (every
        attention module), made once per capture and model dtype."""
        from kernel_explorer.inspect.layer_groups import ATTENTION
        from kernel_explorer.measure.capture import capture_inputs
        from kernel_explorer.switching.trial_inputs import LONGER_MEMORY_CAP, longer_kwargs

        self.captured_inputs()
        key = (self._capture_kwargs, *_state_key(self.model))  # this capture (by identity), this dtype
        if self._longer is None or self._longer[0][0] is not key[0] or self._longer[0][1:] != key[1:]:
            kwargs = longer_kwargs(self._capture_kwargs or {}, self.model)
            found = None
            if kwargs is not None:
                only = {
                    (row, path)
                    for row, group in self._switchboard.groups.items()
                    for path in (
                        self._one_per_kind(group.instances) if row == ATTENTION else group.instances[:1]
                    )
                }
                found = capture_inputs(self._switchboard, kwargs, memory_cap=LONGER_MEMORY_CAP, only=only)
            self._longer = (key, found)
        captured = self._longer[1]
        calls = captured.calls.get((name, path)) if captured is not None else None
        return calls[0] if calls else None

    def _one_per_kind(self, paths: Sequence[str]) -> list[str]:
        """The first attention module of each kind in the capture (a trial calls one per kind,
        `attention_trial.kind_of`): a sliding-window layer apart from a full one."""
        from kernel_explorer.inspect.layer_groups import ATTENTION
        from kernel_explorer.switching.attention_trial import kind_of

        calls = self.captured_inputs().calls
        first: dict[tuple[Any, ...], str] = {}
        for path in paths:
            found = calls.get((ATTENTION, path))
            kind = kind_of(self.model.get_submodule(path), *found[0]) if found else (path,)
            first.setdefault(kind, path)
        return list(first.values())

    def off(self, name: str, instances: str | list[str] | None = None) -> list[RunningNow]:
        """Switch layer `name` back to PyTorch."""
        try:
            return self._switchboard.off(name, instances)
        finally:
            leave_the_cpus_to_runs()

    def reset(self) -> None:
        """Every layer back to PyTorch."""
        try:
            self._switchboard.reset()
        finally:
            leave_the_cpus_to_runs()

    def extend(
        self,
        name: str,
        cls: type[nn.Module] | str | None = None,
        instances: str | list[str] | None = None,
        *,
        candidates: dict[Any, Any] | None = None,
    ) -> LayerGroup:
        """Give a kernel layer name to instances the model does not mark; they become a row.

        `explorer.extend("Linear", nn.Linear, instances="model.layers.*.mlp.*")`, then
        `explorer.on("Linear")` like any layer. `cls` is a module class or its name in the model
        (default: the class named `name`); `instances` paths or glob patterns (default: all);
        `candidates` a kernel per device, as one layer of a mapping (`{"cpu": LocalLayerRepository(
        ...)}`). Bundled kernels for the class join the candidates. Only the chosen instances
        change (see `switching/extension.py`); bad input raises one line and changes nothing.
        """
        from kernel_explorer.switching.extension import extend

        group = extend(self._switchboard, name, cls, instances, candidates=candidates)
        self._captured = self._captured_grad = None  # captured again (same inputs) with the new row
        return group

    def retract(self, name: str, instances: str | list[str] | None = None) -> list[str]:
        """Undo `extend` (all or some instances): PyTorch, and the instances' own class, again."""
        from kernel_explorer.switching.extension import retract

        return retract(self._switchboard, name, instances)

    def running(self, name: str | None = None) -> list[RunningNow]:
        """What each instance runs now."""
        return self._switchboard.running(name)

    def side_by_side(self, name: str) -> Summary:
        """Kernels side by side for layer `name`: PyTorch, then each candidate on this device, one row
        each: its speedup against PyTorch with its 95% interval and verdict (its latest run), its
        accuracy and error against float64, its peak memory per call once measured
        (`compare(name, measure="memory", candidates=[...])`), its state here; the rows that run now
        are marked. `compare(name, candidates=[...])` measures several in one run, the fairest way
        to set them side by side. A Summary, like every result: `.text()`, `.html()`, `.to_pandas()`.
        """
        from kernel_explorer.inventory.side_by_side import side_by_side

        self.group(name)  # an unknown layer: one line naming the model's layers
        door = self._switchboard.doors[name]
        found = door.found(mode=self.mode)
        return side_by_side(name, found, self.running(name), self.results, device=self.device)

    def variants(self, name: str, platform: str | None = None, *, query_hub: bool = False) -> VariantsReport:
        """Which build variant of each candidate of layer `name` a machine takes, and why the rest are
        rejected, in `kernels`' own words: this machine, or one described as `platform`
        ("cuda 13.0, sm_90, torch 2.13", "rocm 7.0, gfx942, torch 2.13", "metal, torch 2.13",
        "cpu, x86_64, torch 2.13"), so a laptop shows what a GPU job will load. Hub repositories'
        builds are listed with `query_hub=True` only (else: "the Hub has not been asked")."""
        from kernel_explorer.inspect.variants import variants_report

        self.group(name)  # an unknown layer: one line naming the model's layers
        return variants_report(name, self._catalog.candidates(name), platform, query_hub=query_hub)

    def hardware_for(self, platform: str, *, query_hub: bool = False) -> HardwareSnapshot:
        """The hardware panel with, for every layer, what a machine described as `platform` would take
        of each candidate (`variants`), under this machine's own rows."""
        from dataclasses import replace

        reports = [self.variants(name, platform, query_hub=query_hub) for name in self.layers]
        return replace(self.hardware, elsewhere=tuple(r for r in reports if r.candidates))

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

        with self._switchboard.holding(switch_on):
            yield running

    def capture(self, inputs: Any = None, *, memory_cap: int = DEFAULT_MEMORY_CAP) -> CapturedInputs:
        """Run the model once on `inputs` (default: a short prompt) and keep each layer's real inputs."""
        from kernel_explorer.measure.capture import capture_inputs, model_inputs

        kwargs = model_inputs(self.model, inputs, self.tokenizer)
        self._captured = capture_inputs(self._switchboard, kwargs, memory_cap=memory_cap)
        self._captured_grad = None  # training mode recaptures these inputs with autograd on
        self._capture_kwargs = kwargs
        self._captured_for = _state_key(self.model)
        return self._captured

    def captured_inputs(self, *, grad: bool = False) -> CapturedInputs:
        """The layers' captured inputs: the last `capture()`, or a new one on the default prompt.

        With `grad`: captured with autograd on (inputs that required grad are leaves that do), once.
        """
        from kernel_explorer.measure.capture import capture_inputs, model_inputs

        if self._captured_for is not None and self._captured_for != _state_key(self.model):
            # the model was converted (`.to(torch.bfloat16)`): inputs of the old dtype are stale
            self._captured = self._captured_grad = None
        if not grad:
            if self._captured is None and self._capture_kwargs is not None:  # dropped by extend()
                self._captured = capture_inputs(self._switchboard, self._capture_kwargs)
                self._captured_for = _state_key(self.model)
            return self._captured if self._captured is not None else self.capture()
        if self._captured_grad is None:
            kwargs = self._capture_kwargs or model_inputs(self.model, None, self.tokenizer)
            self._captured_grad = capture_inputs(self._switchboard, kwargs, grad=True)
            self._captured_for = _state_key(self.model)
        return self._captured_grad

    def compare(
        self,
        *names: str,
        measure: str = "time",
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
        **options: Any,
    ) -> RunHandle:
        """Kernel against PyTorch on captured activations, per layer name (all when none is given),
        in one kind of measurement (`measure`, default "time"; `kernel_explorer.measure.kinds`).

        "time": records stream into `explorer.results`: divergence per instance,
        `calibration_pairs` A/A pairs (PyTorch against PyTorch: the noise floor), interleaved
        latency pairs, then a `LayerVerdict` per layer (the speedup's 95% interval, "faster",
        "slower" or "no difference we can detect here", accuracy against float64, notes to look
        twice), then (with `determinism_runs`) repeat-run identity. "values": each instance's
        output against PyTorch and float64, then determinism, without timing. A kind added to
        `measure/kinds/` is measured here by its name; `explorer.results.summary(measure)` reads it.

        Args:
            measure: the kind of measurement; an unknown one is one line naming those there are.
            pairs: rounds of latency pairs over the instances; None (default): until the interval's
                half-width is within `precision` of the median, or `budget_s` seconds per layer.
            precision: target half-width of the interval, relative (0.05: +-5%).
            budget_s: the most seconds of latency pairs per layer, whatever else stops it.
            name: the run's id in every summary (default: run-N).
            mode: "training": forward+backward pairs with kernels in training mode, and gradients
                (inputs and weights) against float64 (a `LayerVerdict` in mode "training"); see
                measure/layer_training.py.
            candidates: compare each layer once per candidate matching these sources or labels
                (e.g. ["bundled", "peer"]), each switched on for its turn; `layer_summary()` then
                has a row per kernel (its `kernel` column).
            options: what a kind takes besides these (its module says); one it does not take is
                one line naming those it does.
        """
        for layer in names:
            self._switchboard.group(layer)  # unknown names fail here, before anything runs
        request = LayerRequest(
            self._switchboard,
            lambda grad: self.captured_inputs(grad=grad),
            list(names or self.layers),
            mode=mode,
            candidates=candidates,
            instances=instances,
            measure=measure,
            options={
                "pairs": pairs,
                "precision": precision,
                "budget_s": budget_s,
                "calibration_pairs": calibration_pairs,
                "determinism_runs": determinism_runs,
                **options,
            },
        )
        return self._measure(plan_for(measure)(request), background=background, name=name)

    def _measure(self, measurements: list[Measurement], *, background: bool, name: str | None) -> RunHandle:
        """Run `measurements`; a foreground run warns (one line) when its machine was noisy."""
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
            warnings.warn(warning, NoisyMachineWarning, stacklevel=4)  # compare's caller, through _measure

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
        compiled: bool = False,
    ) -> RunHandle:
        """The model as switched now against all-PyTorch: prefill, decode tok/s, logits, greedy agreement.

        Prefill runs an A/A calibration and `pairs` interleaved pairs per length, decode
        `decode_pairs` pairs (each a whole generation); each closes with a `ModelVerdict` whose
        interval says how sure it is (three decode pairs cover the median with 75%, and say so).
        `mode="training"`: a training step per length instead (loss and gradient agreement, then
        step pairs); `mode="torch.compile"`: compiled-with-kernels against compiled PyTorch prefill.

        `compiled=True`: inference under torch.compile, three sides: the model as switched (its
        kernels in torch.compile mode) compiled, against an all-PyTorch copy compiled (the headline)
        and that copy eagerly, on a static KV cache (one graph per prefill length, one for the
        decode step; eager PyTorch runs Transformers' dynamic cache). Records: `CompileTime` (seconds
        per side and graph: compiling is paid before any timing, once), `ModelAgreement` against each
        reference (KL, top-1, identical greedy tokens over `decode_tokens`), then `ModelPair`s and a
        `ModelVerdict` per measure: "compiled prefill" per length and "compiled decode"
        (`decode_tokens` steps after the prompt), each also "... against eager PyTorch". The prompt
        (`inputs`) must be one sequence; its length is one more graph per compiled side. Slow on
        a CPU: each graph takes seconds (tiny model) to minutes to compile. Inference modes only.
        See measure/model_modes.py.
        """
        from kernel_explorer.measure.capture import check_runnable, model_inputs
        from kernel_explorer.measure.kinds.model import plan_model

        check_sampling(pairs, DEFAULT_PRECISION, DEFAULT_BUDGET_S)
        check_sampling(decode_pairs, DEFAULT_PRECISION, DEFAULT_BUDGET_S)
        if not isinstance(compiled, bool):
            raise KernelExplorerError(f"compiled is True or False, not {compiled!r}.")
        check_runnable(self.model)
        kwargs = model_inputs(self.model, inputs, self.tokenizer)
        measurements = plan_model(
            self._switchboard,
            kwargs,
            mode=mode,
            lengths=lengths,
            pairs=pairs,
            vocab_size=self._vocab_size("compare_model"),
            decode_tokens=decode_tokens,
            decode_pairs=decode_pairs,
            compiled=compiled,
            floor_so_far=lambda run_id: max(
                (r.values.noise_floor for r in self.results.records("model_verdict", run_id)), default=0.0
            ),
        )
        return self._measure(measurements, background=background, name=name)

    def compare_model_seconds(
        self,
        *,
        lengths: tuple[int, ...] = (128, 512),
        decode_tokens: int = 32,
        pairs: int = 7,
        decode_pairs: int = 3,
    ) -> float:
        """About how many seconds `compare_model` with these arguments takes here, said before it
        starts: one prefill per length and a 4-token greedy decode are timed now (a second or two on
        the default model), then multiplied by what the comparison runs: per length a warm-up, 3 A/A
        and `pairs` pairs (two prefills each); the outputs' two 24-token generations and two
        prefills of the prompt; a warm-up decode and `decode_pairs` pairs of two `decode_tokens`
        generations. The machine's load moves it (a shared machine: by 2x and more)."""
        import time

        import torch

        from kernel_explorer.measure.capture import check_runnable, model_inputs, run_model
        from kernel_explorer.measure.model_comparison import token_ids

        check_runnable(self.model)
        vocab = self._vocab_size("compare_model_seconds")
        kwargs = model_inputs(self.model, None, self.tokenizer)
        model: Any = self.model
        prefill: dict[int, float] = {}
        with self._switchboard.lock, torch.no_grad():
            for length in lengths:
                ids = {"input_ids": token_ids(vocab, length)}
                started = time.perf_counter()
                run_model(model, ids)
                prefill[length] = time.perf_counter() - started
            started = time.perf_counter()
            run_model(model, kwargs)
            prompt = time.perf_counter() - started
            started = time.perf_counter()
            model.generate(**kwargs, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
            per_token = (time.perf_counter() - started) / 4
        prefills = sum((1 + 2 * 3 + 2 * pairs) * seconds for seconds in prefill.values())
        outputs = 2 * prompt + 2 * 24 * per_token
        decode = (2 + 2 * decode_pairs * decode_tokens) * per_token
        return prefills + outputs + decode

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
        board = self._switchboard
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
        board = self._switchboard
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

    def export(self, path: str | Path) -> Path:
        """Write one Python module that applies what is switched on now to a freshly loaded model.

        The module uses only Transformers' and `kernels`' public API (it never imports
        kernel_explorer): the mapping with repository ids and versions (or local folders, said so),
        `kernelize`, the classes `extend` marked, the attention implementation and pinned code
        paths; `apply(model)` and `python PATH MODEL_FOLDER`. What a mapping cannot express (a
        choice for some instances only) is a comment naming the instances and what the module does.
        Returns the path; a path that cannot be written raises one line.
        """
        from kernel_explorer.export.plan import export_plan
        from kernel_explorer.export.script import render

        target = Path(path).expanduser()
        if target.suffix != ".py":
            raise KernelExplorerError(
                f"export writes a Python module: give a path ending in .py, not {target}"
            )
        if not target.parent.is_dir():
            raise KernelExplorerError(f"cannot write {target}: the folder {target.parent} does not exist")
        text = render(export_plan(self._switchboard))
        try:
            target.write_text(text)
        except OSError as error:
            raise KernelExplorerError(f"cannot write {target}: {error.strerror}") from None
        return target

    def export_pins(self, project: str | Path) -> Path:
        """Write the Hub kernels switched on now as `[tool.kernels.dependencies]` in `project`'s
        pyproject.toml (for `kernels lock`); local builds are listed as comments. Returns the file."""
        from kernel_explorer.export.pins import write_pins
        from kernel_explorer.export.plan import export_plan

        return write_pins(export_plan(self._switchboard), project)

    def __repr__(self) -> str:
        on = sum(r.is_kernel for r in self.running())
        total = sum(len(g) for g in self._switchboard.groups.values())
        model = type(self.model).__name__
        return f"<Explorer {model}: {len(self.layers)} kernel layers, {on}/{total} instances on kernels>"


def _state_key(model: Any) -> tuple[Any, ...]:
    """What makes captured inputs stale when it changes: the model's dtype and device."""
    first = next(model.parameters(), None)
    return (None, None) if first is None else (first.dtype, first.device)
