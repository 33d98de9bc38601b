"""The MoE experts implementation as a row of the inventory: the model-wide door Transformers opens
for experts kernels (`set_experts_implementation`).

A MoE model whose experts class is decorated with `use_experts_implementation` looks its experts
function up at every call, by its config's `_experts_implementation`: Transformers' PyTorch ones
(`eager`, the class's own loop; `batched_mm`; `grouped_mm`, the default) or a Hub kernel
(`deepgemm`, `sonicmoe`, `deepgemm_megamoe`) that Transformers loads lazily at the first call.
`ExpertsDoor` lists them with where each stands here and switches the whole model through
`set_experts_implementation` only, so a switch lands between two calls of a running measurement.

"PyTorch" in this row is the implementation the model came with (its original); any other one
switched on is the row's "on" side, which a comparison times against the original. The default
choice of `on("experts")` is a Hub kernel only: Transformers' other PyTorch implementations are
switched by name (`on("experts", candidate="batched_mm")`).

The door keeps the explorer's promises model-wide: a candidate is tried on each kind of experts
module's captured inputs (its values against the original's, both against a float64 run of the
class's own loop) and on one forward of the model before the switch stands; the function the model
calls is wrapped so that one raising on a forward puts the original back and that call is answered
by the original; `off` sets the original implementation back, which gives the original logits
bitwise (the implementation is the only state a switch changes).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from kernel_explorer._backend import experts
from kernel_explorer.catalog import experts_candidates
from kernel_explorer.catalog.availability import Availability, State
from kernel_explorer.catalog.experts_candidates import ExpertsCandidate
from kernel_explorer.errors import (
    KernelExplorerError,
    KernelExplorerWarning,
    KernelSwitchError,
    NoUsableKernelError,
)
from kernel_explorer.inspect.layer_groups import EXPERTS, LayerGroup
from kernel_explorer.inspect.running import RunningNow
from kernel_explorer.switching import model_state
from kernel_explorer.switching.door import Door, DoorHost, Keep, SwitchState, hooks_for_the_block
from kernel_explorer.switching.exported import DoorExport, ExpertsPlan
from kernel_explorer.switching.probe import (
    CANNOT_RUN,
    OK,
    UNVERIFIED,
    ProbeVerdict,
    cached,
    describe_call,
    explain,
    settled,
    trial_verdict,
)
from kernel_explorer.switching.registry_guard import SwitchedModules

if TYPE_CHECKING:
    from kernels import Mode
    from torch import nn

    from kernel_explorer.catalog.candidates import Candidate

MODEL_WIDE = "model-wide: config._experts_implementation, through Transformers' ExpertsInterface"
#: what a Transformers implementation's RunningNow names as its repository
BUILT_IN = "Transformers (PyTorch)"

#: module -> (its door, the candidate it was switched to), and the registered function's fallback
_GUARDED = SwitchedModules(EXPERTS, lambda door, module: experts.function(module, door.baseline(module)))


@functools.cache
def _call_class() -> type:
    import torch
    from torch import nn

    from kernel_explorer.numerics.divergence import float64_shadow

    class ExpertsCall(nn.Module):
        """One experts module's call of one implementation: what a measurement times.

        In float64 (the reference run a comparison and a trial make of PyTorch's side) it runs the
        class's own loop on float64 weights: the definition, and the one implementation with a
        float64 CPU path (`grouped_mm` has none)."""

        def __init__(
            self, experts_module: nn.Module, function: Callable[..., Any], eager: Callable[..., Any]
        ):
            super().__init__()
            self.experts = experts_module
            self.function = function
            self.eager = eager

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            first = args[0] if args else next(iter(kwargs.values()), None)
            if getattr(first, "dtype", None) is torch.float64:
                return self.eager(float64_shadow(self.experts), *args, **kwargs)
            return self.function(self.experts, *args, **kwargs)

    return ExpertsCall


class ExpertsDoor(Door):
    """The experts row of one MoE model: its implementations, what runs now, and the switch.

    Callers hold the switchboard's lock around every method (the switchboard does).
    """

    kind: ClassVar[str] = "experts"
    model_wide: ClassVar[bool] = True

    def __init__(self, host: DoorHost, modules: list[tuple[str, nn.Module]]) -> None:
        super().__init__(host, LayerGroup(EXPERTS, "experts", MODEL_WIDE, tuple(p for p, _ in modules)))
        self.model = host.model
        self._modules = dict(modules)
        shared = model_state.of(self.model)
        with shared.lock:  # the first explorer of the model records what it came with
            if shared.experts_original is None:
                shared.experts_original = {
                    "model": experts.model_implementation(self.model),
                    "modules": {p: experts.module_implementation(m) for p, m in modules},
                }
            self.original: dict[str, Any] = dict(shared.experts_original["model"])
            self._baselines: dict[str, str] = dict(shared.experts_original["modules"])
        self._calls: dict[tuple[str, str], Any] = {}
        self._failures: dict[ExpertsCandidate, str] = {}
        self._trial = False  # a trial runs: an implementation's error is the verdict, not a fallback
        self.reason = ""  # why the original runs although another implementation was asked for
        self.warning = ""  # why the implementation that runs, named by the user, gives wrong results
        self.mode: Any = None  # of the last switch (a snapshot keeps it)

    @classmethod
    def find(cls, host: DoorHost) -> ExpertsDoor | None:
        """The door of the host's model, or None: no experts modules, or a Transformers without
        `set_experts_implementation`."""
        if not experts.has_experts_interface(host.model):
            return None
        modules = experts.experts_modules(host.model)
        return cls(host, modules) if modules else None

    @classmethod
    def discover(cls, host: DoorHost, groups: Sequence[LayerGroup], known: Mapping[str, Door]) -> list[Door]:
        """The model's experts row (kept once found: it knows the switch it made)."""
        door = known.get(EXPERTS)
        if isinstance(door, cls):
            return [door]
        found = cls.find(host)
        return [found] if found is not None else []

    def export(self) -> DoorExport:
        """The experts implementation the model runs now, and whether the explorer chose it."""
        switched = self.switched()
        repository = switched.repo if switched is not None else ""
        return DoorExport(experts=ExpertsPlan(self.implementation(), switched is not None, repository))

    # -- candidates ----------------------------------------------------------------------------------

    def baseline(self, module: nn.Module) -> str:
        """The implementation `module` had when the model's first explorer came (the row's PyTorch)."""
        path = next(p for p, m in self._modules.items() if m is module)
        return self._baselines[path]

    def _known(self) -> list[str]:
        first = next(iter(self._modules.values()))
        return experts.valid_names(first)

    def candidates(self) -> list[Candidate]:
        return list(experts_candidates.candidates(self.host.device, self._known()))

    def matching(self, word: str) -> list[Candidate]:
        """The candidates a word names: an implementation ("batched_mm"), its label, or the source
        "transformers" (all of them)."""
        return [c for c in self._typed() if word in (c.implementation, c.label, c.source, str(c))]

    def _typed(self) -> list[ExpertsCandidate]:
        return experts_candidates.candidates(self.host.device, self._known())

    def availability(self, chosen: ExpertsCandidate, *, mode: Mode) -> Availability:
        failure = self._failures.get(chosen)
        if failure is not None:
            return Availability(State.FAILED, failure)
        return experts_candidates.availability(chosen, cached(self.host, chosen, EXPERTS, mode))

    def found(self, *, mode: Mode, query_hub: bool = False) -> tuple[tuple[Candidate, Availability], ...]:
        return tuple((c, self.availability(c, mode=mode)) for c in self._typed())

    def choose(self, candidate: Any, *, mode: Mode) -> ExpertsCandidate:
        """The candidate named (an implementation or label), or the first usable Hub kernel."""
        if isinstance(candidate, ExpertsCandidate):
            return candidate
        if candidate is None:
            options = [(c, self.availability(c, mode=mode)) for c in self._typed() if not c.pytorch]
            for option, found in options:
                if found.state.usable:
                    return option
            detail = "; ".join(f"{c.label}: {str(found).rstrip('.')}" for c, found in options)
            raise NoUsableKernelError(
                f"No experts kernel can run here ({self.host.device}): {detail}. Transformers' PyTorch "
                "implementations switch by name: on('experts', candidate='batched_mm')"
            )
        name = str(candidate).strip()
        for option in self.matching(name):
            if isinstance(option, ExpertsCandidate):
                return option
        if name in self._known():  # a name a user registered in the interface
            return experts_candidates.candidate(name, self.host.device)
        raise KernelExplorerError(
            f"{name!r} is not an experts implementation of this model: use one of {', '.join(self._known())}."
        )

    # -- switching ---------------------------------------------------------------------------------

    def on(self, paths: list[str], *, mode: Mode, candidate: Any, allow_changes: bool = False) -> None:
        self.switch(candidate, mode=mode, strict=self.host.strict)

    def switch(self, candidate: Any, *, mode: Mode, strict: bool = False) -> ExpertsCandidate | None:
        """Switch the model's experts to `candidate`; on failure the model keeps what it runs.

        Raises `KernelExplorerError` for a name the model does not know. One that cannot run here
        (`NoUsableKernelError`) or fails (`KernelSwitchError`) raises with `strict`; otherwise its
        reason is kept in `reason` (what the row's "runs now" says) and None returned.
        """
        named = candidate is not None
        try:
            chosen = self.choose(candidate, mode=mode)
            self._switch_to(chosen, mode, named, strict)
        except (NoUsableKernelError, KernelSwitchError) as error:
            self.reason = str(error).splitlines()[0]
            if strict:
                raise
            return None
        self.reason, self.mode = "", mode
        return chosen

    def _switch_to(self, chosen: ExpertsCandidate, mode: Mode, named: bool, strict: bool) -> None:
        found = self.availability(chosen, mode=mode)
        wrong = found.state is State.WRONG_RESULTS
        if wrong and (strict or not named):
            raise KernelSwitchError(f"{chosen.label} {found}")
        if not found.state.usable and not wrong:
            raise NoUsableKernelError(f"{chosen.label} cannot run here: {found}")
        before = experts.model_implementation(self.model)
        try:
            experts.set_implementation(self.model, chosen.implementation)
        except Exception as error:
            reason = explain(error)
            self._failures[chosen] = reason
            raise KernelSwitchError(f"{chosen.label} failed to switch: {reason}") from error
        self._guard(chosen)
        verdict = settled(self.host, chosen, EXPERTS, mode, lambda: self._try(chosen))
        if verdict.refused or (verdict.wrong and (strict or not named)):
            self._back(before)
            raise KernelSwitchError(f"{chosen.label} {verdict}")
        self.warning = ""
        if verdict.wrong:  # named: on, and said (a warning, and the row's note)
            self.warning = str(verdict)
            warnings.warn(
                f"{chosen.label} {self.warning}; switched on because you named it",
                KernelExplorerWarning,
                stacklevel=5,
            )

    def _guard(self, chosen: ExpertsCandidate) -> None:
        """Wrap the function registered as `chosen`'s name: one that raises in this model's experts
        falls back to the original (during a trial it raises, so the trial can say why)."""
        door = weakref.ref(self)
        for module in self._modules.values():
            _GUARDED[module] = (door, chosen)
            experts.wrap_registered(module, chosen.implementation, _GUARDED.guarded)
        self._calls = {key: call for key, call in self._calls.items() if key[1] != chosen.implementation}

    def _back(self, implementation: dict[str, Any]) -> None:
        if experts.model_implementation(self.model) != implementation:
            experts.set_implementation(self.model, implementation)
        if implementation == self.original:
            for module in self._modules.values():
                _GUARDED.pop(module, None)

    def to_original(self) -> None:
        """The implementation the model came with, and no reason kept (nothing is asked for)."""
        self.reason = self.warning = ""
        self._back(self.original)

    def off(self, paths: list[str]) -> None:
        self.to_original()

    def kernel_raised(self, path: str, chosen: Candidate, error: Exception) -> str:
        """The whole model back on its original after `chosen` raised on a forward; the reason."""
        reason = f"{chosen.label} raised when run: {explain(error)}"
        if isinstance(chosen, ExpertsCandidate):
            self._failures[chosen] = reason
        self.to_original()
        self.reason = reason
        return reason

    def snapshot(self) -> SwitchState:
        switched = self.switched()
        return {(EXPERTS, "*"): (switched, self.mode)} if switched is not None else {}

    def implementation(self) -> str:
        """What `set_experts_implementation` would take to make the model run what it runs now."""
        now = experts.model_implementation(self.model)
        return str(now.get("", None) or next(iter(now.values())))

    def switched(self) -> ExpertsCandidate | None:
        """The candidate the model runs now when it is not its original (what a snapshot keeps)."""
        if experts.model_implementation(self.model) == self.original:
            return None
        return experts_candidates.candidate(self.implementation(), self.host.device)

    # -- the trial ---------------------------------------------------------------------------------

    def _try(self, chosen: ExpertsCandidate) -> ProbeVerdict:
        """One captured call per kind of experts module (class, input shape), judged on its values,
        then one forward of the whole model with it."""
        verdict = ProbeVerdict(UNVERIFIED, "no experts inputs to try it on (capture() first)")
        seen: set[tuple[Any, ...]] = set()
        self._trial = True
        try:
            for path, module in self._modules.items():
                sample = self.host.sample(EXPERTS, path)
                if sample is None:
                    continue
                args = sample[0]
                kind = (type(module), tuple(getattr(args[0], "shape", ())) if args else ())
                if kind in seen:
                    continue
                seen.add(kind)
                verdict = self._try_call(path, sample, chosen.implementation)
                if not verdict.runs:
                    return verdict
            return self._try_model() if verdict.runs else verdict
        finally:
            self._trial = False

    def _try_call(self, path: str, sample: tuple[tuple[Any, ...], dict[str, Any]], name: str) -> ProbeVerdict:
        import torch

        from kernel_explorer.numerics.divergence import float64_reference

        args, kwargs = sample
        try:
            with torch.no_grad():
                got = self._call(path, name)(*args, **kwargs)
                expected = self._call(path, self._baselines[path])(*args, **kwargs)
        except Exception as error:
            return ProbeVerdict(CANNOT_RUN, explain(error))
        reference = None
        with contextlib.suppress(Exception):  # the class's own loop in float64
            reference = float64_reference(self._call(path, "eager").__self__, args, kwargs)
        return trial_verdict(got, expected, reference=reference, where=describe_call(path, args, kwargs))

    def _try_model(self) -> ProbeVerdict:
        """One forward of the whole model on 8 tokens with the implementation it runs now."""
        import torch

        vocab = getattr(getattr(self.model, "config", None), "vocab_size", None)
        forward = getattr(self.model, "forward", None)
        if (
            not isinstance(vocab, int)
            or forward is None
            or "input_ids" not in inspect.signature(forward).parameters
        ):
            return ProbeVerdict(OK)
        first = next(self.model.parameters(), None)
        tokens = torch.arange(1, 9, device=None if first is None else first.device).remainder(vocab)[None]
        try:
            with torch.no_grad():
                self.model(input_ids=tokens)
        except Exception as error:
            return ProbeVerdict(CANNOT_RUN, f"the model fails with it: {explain(error)}")
        return ProbeVerdict(OK)

    # -- reading -----------------------------------------------------------------------------------

    def running(self, paths: list[str]) -> list[RunningNow]:
        found = []
        for path in paths:
            now = experts.module_implementation(self._modules[path])
            if now == self._baselines[path]:
                found.append(RunningNow(EXPERTS, path, None, None, None, self.reason, name=now))
                continue
            chosen = experts_candidates.candidate(now, self.host.device)
            found.append(
                RunningNow(
                    EXPERTS,
                    path,
                    now,
                    "-",
                    chosen.repo or BUILT_IN,
                    name=now,
                    candidate=chosen.label,
                    note=self.warning,
                )
            )
        return found

    def _call(self, path: str, name: str) -> Any:
        key = (path, name)
        if key not in self._calls:
            module = self._modules[path]
            call = _call_class()(module, experts.function(module, name), experts.function(module, "eager"))
            self._calls[key] = call.forward
        return self._calls[key]

    def forwards(self, path: str) -> tuple[Any, Any, bool]:
        """(what `path` runs now, the original implementation, whether they differ)."""
        now = experts.module_implementation(self._modules[path])
        base = self._baselines[path]
        return self._call(path, now), self._call(path, base), now != base

    @contextlib.contextmanager
    def capturing(self, keep: Keep) -> Iterator[None]:
        """For the block, each experts call hands (hidden states, top-k index, top-k weights) to
        `keep`, and the model runs its original implementation (the capture's forward is PyTorch's)."""
        handles = []
        for path, module in self._modules.items():

            def pre(module: Any, args: Any, kwargs: Any, key: tuple[str, str] = (EXPERTS, path)) -> None:
                keep(key, args, kwargs)

            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        before = experts.model_implementation(self.model)
        if before != self.original:
            experts.set_implementation(self.model, self.original)
        try:
            with hooks_for_the_block(handles):
                yield
        finally:
            if experts.model_implementation(self.model) != before:
                experts.set_implementation(self.model, before)

    def timed_modules(self) -> list[tuple[nn.Module, str]]:
        return [(module, EXPERTS) for module in self._modules.values()]

    def covered_paths(self) -> set[str]:
        return set(self._modules)
