"""Doors that switch one instance at a time through `kernels`' own per-layer `kernelize` step.

What the layer door, the extension door and the function door share: the candidate is chosen by
the catalog and probed on this model before it is trusted; each chosen instance's target module
(the instance itself, or the holder's own copy of a function) gets the forward `kernelize` would
install, wrapped so that a kernel that raises is switched off on the spot and that call answered
by PyTorch; a guard records each target's state before the kernel first runs, tells what the
kernel changed, and restores it exactly when the instance goes back to PyTorch.
"""

from __future__ import annotations

import copy
import warnings
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.hub import hub_session
from kernel_explorer._backend.layer_forwards import (
    class_forward,
    installed_forward,
    kernelize_each,
    runs_class_forward,
    set_forward,
)
from kernel_explorer._backend.modes import compiles, mode_name
from kernel_explorer.catalog.availability import Availability, State
from kernel_explorer.catalog.candidates import names_one, shown_label
from kernel_explorer.errors import KernelExplorerWarning, KernelSwitchError, NoUsableKernelError
from kernel_explorer.inspect.kernel_paths import RunningPath, model_dtype
from kernel_explorer.inspect.running import RunningNow
from kernel_explorer.switching import isolation, model_trial
from kernel_explorer.switching.code_paths import pin, pinned, running_path, unpin
from kernel_explorer.switching.door import Door, DoorHost, SwitchState
from kernel_explorer.switching.exported import DoorExport, LayerPlan, layer_plan, some
from kernel_explorer.switching.forwards import (
    KernelForward,
    describe_forward,
    kernel_class,
    kernel_forward,
)
from kernel_explorer.switching.guard import DEFAULT_MEMORY_SHARE, ModuleGuard, available_memory
from kernel_explorer.switching.probe import (
    CANNOT_RUN,
    OK,
    WRONG,
    ProbeVerdict,
    cached,
    explain,
    kernel_package,
    settled,
    try_layer,
)
from kernel_explorer.switching.trial_checks import preserved_session

if TYPE_CHECKING:
    from kernels import Mode
    from torch import nn

    from kernel_explorer._backend.mappings import MappingEntry
    from kernel_explorer.catalog.candidates import Candidate
    from kernel_explorer.inspect.layer_groups import LayerGroup


class InstanceDoor(Door):
    """A door whose kernels replace one target module's forward per instance."""

    def __init__(self, host: DoorHost, group: LayerGroup) -> None:
        super().__init__(host, group)
        self._on: dict[str, tuple[Candidate, Mode]] = {}
        self._reasons: dict[str, str] = {}
        self._guards: dict[str, ModuleGuard] = {}
        self._notes: dict[str, str] = {}  # what the kernel did to the module, after its first call
        self._pytorch: dict[str, Any] = {}  # PyTorch's forward on the original state, for changed modules

    # -- what each door says for itself ---------------------------------------------------------

    @classmethod
    @abstractmethod
    def serves(cls, group: LayerGroup) -> bool:
        """Whether this class is the door of `group` (a layer group the model's marks make)."""

    @classmethod
    def discover(cls, host: DoorHost, groups: Sequence[LayerGroup], known: Mapping[str, Door]) -> list[Door]:
        found: list[Door] = []
        for group in groups:
            if not cls.serves(group):
                continue
            door = known.get(group.name)
            if isinstance(door, cls) and type(door) is cls:
                door.group = group
            else:
                door = cls(host, group)
            found.append(door)
        return found

    @abstractmethod
    def target(self, path: str, *, for_switching: bool) -> nn.Module:
        """The module whose forward a switch replaces (the instance, or the holder's function copy)."""

    @abstractmethod
    def release(self, path: str) -> None:
        """Take the kernel's forward off `path` (and what switching on made for it: a function copy)."""

    def trial_module(self, path: str) -> nn.Module:
        """A module to try a candidate on, never the model's own: a deep copy of the target."""
        return copy.deepcopy(self.target(path, for_switching=False))

    def trial_inputs(self, path: str) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """One real call of `path` (from the explorer's captured inputs), or None."""
        return self.host.sample(self.name, path)

    def after_switch(self, paths: list[str]) -> None:
        """Called once the chosen instances are switched (the extension door tries them at once)."""

    # -- the probe ------------------------------------------------------------------------------

    def probe(self, chosen: Candidate, entry: MappingEntry, mode: Mode) -> ProbeVerdict:
        """Try `chosen` on a copy of the first instance with its real inputs; cached per model shape."""
        return settled(self.host, chosen, self.name, mode, lambda: self._try(entry, mode, chosen))

    def _try(self, entry: MappingEntry, mode: Mode, chosen: Candidate) -> ProbeVerdict:
        """The trial on a copy of the first instance (`probe.try_layer`: the capture's length and a
        longer one, the checks of `trial_checks` around each call), a stranger's candidate first in
        the worker (`isolation`): what does not pass there is never loaded here; then, when it runs,
        the model's answers with it on every instance (`_on_model`)."""
        path = self.group.instances[0]
        samples = [self.trial_inputs(path), self.host.long_sample(self.name, path)]
        where = {"where": path, "code_path": chosen.path, "label": chosen.label}
        if isolation.isolated(chosen):
            try:
                verdict = isolation.try_layer_isolated(
                    self.trial_module(path), entry, mode, samples, timeout=self.host.trial_timeout, **where
                )
            except isolation.Unisolable:  # a class the worker cannot import: tried here, as before
                verdict = None
            if verdict is not None and (verdict.refused or verdict.wrong or verdict.distrusted):
                return verdict
        original = self.target(path, for_switching=False)
        verdict = try_layer(self.trial_module(path), original, entry, mode, samples, **where)
        if verdict.outcome != OK:
            return verdict
        return self._on_model(entry, mode, chosen, verdict)

    def model_paths(self) -> list[str] | None:
        """The instances a whole-model trial switches in a shadow of the model (None: not judged on
        the model, for a door whose kernel the model reaches otherwise than through its modules)."""
        return list(self.group.instances)

    def _on_model(
        self, entry: MappingEntry, mode: Mode, chosen: Candidate, verdict: ProbeVerdict
    ) -> ProbeVerdict:
        """The model's answers with `chosen` on every instance (`model_trial`): "wrong results here:
        changes the model's answers (top-1 94%; ...)" when they move more than in bfloat16."""
        paths = self.model_paths()
        kwargs = self.host.model_inputs() if paths and "training" not in mode_name(mode) else None
        if paths is None or kwargs is None or compiles(mode):
            return verdict
        model = self.host.model
        try:  # the references run the model on PyTorch; what fails there is not the candidate's
            refs = model_trial.cached_references(model, kwargs)
        except Exception:  # e.g. a process-wide kernel someone else switched refuses float64
            return verdict
        if refs is None:
            return verdict
        try:
            shadow, targets = model_trial.with_candidate(model, paths, copy_tensors=verdict.in_place)
            with preserved_session(), hub_session():
                loaded = list(kernelize_each(targets, entry, mode))
                if any(error is not None for _, error, _ in loaded):
                    return verdict
                forward = installed_forward(targets[0])
                with pinned(_kernel_package(forward), chosen.path, ("probe", id(shadow)), chosen.label):
                    found = model_trial.logits(shadow, kwargs)
        except Exception as failure:
            return ProbeVerdict(CANNOT_RUN, f"the model fails with it on every instance: {explain(failure)}")
        if found is None:
            return verdict
        got, changed = model_trial.judged(found, refs)
        if changed:
            return ProbeVerdict(WRONG, changed, verdict.changes, verdict.kept_bytes, verdict.in_place)
        return replace(verdict, answers=f"{got} against {refs.against}")

    # -- switching ------------------------------------------------------------------------------

    def on(self, paths: list[str], *, mode: Mode, candidate: Any, allow_changes: bool = False) -> None:
        host = self.host
        self._refresh(mode)
        while True:
            try:
                chosen, entry = host.catalog.resolve(
                    self.name, device=host.device, mode=mode, candidate=candidate
                )
            except NoUsableKernelError as error:
                if host.strict:
                    raise
                self._fall_back(paths, one_line(str(error)))  # the row's reason: one line
                return
            verdict = self.probe(chosen, entry, mode)
            named = names_one(candidate)
            if verdict.distrusted and named and not host.strict:  # asked for by name: on, and said
                warnings.warn(
                    f"{chosen.repo_label} {verdict}; switched on because you named it",
                    KernelExplorerWarning,
                    stacklevel=4,
                )
                break
            if not (verdict.refused or verdict.distrusted):
                break
            if named or host.strict:  # the user named it (or wants no silent choice): say why it is off
                reason = f"{chosen.repo_label} {verdict}"
                if host.strict:
                    raise KernelSwitchError(reason)
                self._fall_back(paths, reason)
                return
            # the default choice passes over it: the catalog reads "cannot run here" (or "wrong") now
        refusal = self._memory_refusal(verdict, len(paths), allow_changes)
        if refusal:
            if host.strict:
                raise KernelSwitchError(f"{chosen.repo_label} {refusal}")
            self._fall_back(paths, f"{chosen.repo_label} {refusal}")
            return
        for path in paths:  # another kernel's state never carries over: from PyTorch, exactly
            if path in self._on or path in self._guards:
                self._to_pytorch(path)
        targets = {path: self.target(path, for_switching=True) for path in paths}
        for path, target in targets.items():
            if path not in self._guards:
                self._guards[path] = ModuleGuard(target, copy_tensors=verdict.in_place, model=self.host.model)
        by_target = {id(t): p for p, t in targets.items()}
        failure: str | None = None
        refused: str | None = None  # a code path another layer pins otherwise (not the kernel's fault)
        with hub_session():
            results = list(kernelize_each(list(targets.values()), entry, mode))
        for target, error, fallback in results:
            path = by_target[id(target)]
            if error is not None:
                failure = explain(error)
                self._to_pytorch(path)
                self._reasons[path] = f"{chosen.repo_label} failed to load: {failure}"
                continue
            refused = self._install(path, target, chosen, mode, verdict, fallback) or refused
        self.after_switch([p for p in paths if p in self._on])
        if failure is not None:
            host.catalog.record_failure(chosen, failure)
            if host.strict:
                raise KernelSwitchError(f"{chosen.label} failed to load: {failure}")
        if refused is not None and host.strict:
            raise KernelSwitchError(f"{chosen.label}: {refused}")

    def _memory_refusal(self, verdict: ProbeVerdict, instances: int, allow: bool) -> str:
        """Why a kernel that changes its module is refused here (""; allowed)."""
        if allow or not verdict.kept_bytes:
            return ""
        need = verdict.kept_bytes * instances
        free = available_memory()
        if free is None or need <= DEFAULT_MEMORY_SHARE * free:
            return ""
        return (
            f"{verdict.changes}: it would keep {need / 2**20:.0f} MB of original weights, more than "
            f"{DEFAULT_MEMORY_SHARE:.0%} of the {free / 2**20:.0f} MB available; "
            "on(..., allow_changes=True) to switch it anyway"
        )

    def _install(
        self,
        path: str,
        target: nn.Module,
        chosen: Candidate,
        mode: Mode,
        verdict: ProbeVerdict,
        fallback: str = "",
    ) -> str | None:
        """Put the kernel's forward on `path`, wrapped; returns why not, where its code path is refused."""
        forward = installed_forward(target)
        if runs_class_forward(target):  # kernelize kept PyTorch (`fallback`: which flag and why)
            self._to_pytorch(path)
            said = f"; {fallback}" if fallback else ""
            self._reasons[path] = f"{chosen.repo_label} does not support {mode_name(mode)}{said}"
            self.host.catalog.record_unsupported(
                chosen, mode, f"the kernel does not support {mode_name(mode)}"
            )
            return None
        if chosen.path is not None:  # "bundled@avx2": the kernel module runs that path while on
            try:
                pin(
                    _kernel_package(forward),
                    chosen.path,
                    self._holder(path),
                    chosen.label,
                    owner=self.host.model,
                )
            except KernelSwitchError as refused:
                self._to_pytorch(path)
                self._reasons[path] = str(refused)
                return str(refused)
        self._on[path] = (chosen, mode)
        self._reasons.pop(path, None)
        guard = self._guards[path]
        if verdict.changes:  # known from the probe: PyTorch's side runs on the original state from now
            self._pytorch[path] = class_forward(guard.original())
            self._notes[path] = f"{verdict.changes}; restored on off"
        if verdict.distrusted:  # switched because it was named: every view of the row says so
            self._notes[path] = "; ".join(n for n in (str(verdict), self._notes.get(path, "")) if n)
        if compiles(mode):
            # torch.compile guards a callable object by identity: a wrapper per instance made every
            # decoder layer a recompile (and, past dynamo's recompile limit, eager). Keep kernelize's
            # bound forward, as kernels does; in this mode a kernel's error is raised, not fallen back.
            return None

        def on_error(error: Exception, path: str = path, chosen: Candidate = chosen) -> None:
            self.host.kernel_raised(self.name, path, chosen, error)

        def after_first(path: str = path, guard: ModuleGuard = guard) -> None:
            if guard.changes():
                kept = f"{guard.kept_bytes / 2**20:.1f} MB kept while on"
                said = f"{verdict}; " if verdict.distrusted else ""
                self._notes[path] = f"{said}{guard.summary()}; restored on off; {kept}"
                self._pytorch.setdefault(path, class_forward(guard.original()))

        set_forward(target, KernelForward(forward, class_forward(target), on_error, after_first=after_first))
        return None

    def kernel_raised(self, path: str, chosen: Candidate, error: Exception) -> str:
        """Back to PyTorch after `chosen` raised on `path`; returns the reason."""
        declined = isinstance(error, ValueError)  # this instance only; the kernel stays usable
        what = "declined this instance" if declined else f"raised when run: {type(error).__name__}"
        reason = f"{chosen.repo_label} {what}: {error}".strip().splitlines()[0]
        if not declined:
            self.host.catalog.record_failure(chosen, reason)
        on = [p for p, (c, _) in self._on.items() if c == chosen]
        self._fall_back([path] if declined else on, reason)
        return reason

    def _fall_back(self, paths: list[str], reason: str) -> None:
        for path in paths:
            self._to_pytorch(path)
            self._reasons[path] = reason

    def _to_pytorch(self, path: str) -> None:
        """Back to the class's own forward, exactly: the module's state as before, nothing of ours."""
        self._on.pop(path, None)
        self._reasons.pop(path, None)
        self._notes.pop(path, None)
        self._pytorch.pop(path, None)
        guard = self._guards.pop(path, None)
        self.release(path)
        if guard is not None:
            guard.restore()
        unpin(self._holder(path))  # last: the kernel's own path back once nothing runs it

    def _holder(self, path: str) -> tuple[int, str, str]:
        """Who holds a `@path` pin: the model's instance (every explorer of the model lets go of it)."""
        return (id(self.host.model), self.name, path)

    def off(self, paths: list[str]) -> None:
        for path in paths:
            self._to_pytorch(path)

    def snapshot(self) -> SwitchState:
        return {(self.name, path): switched for path, switched in self._on.items()}

    # -- reading --------------------------------------------------------------------------------

    def running_target(self, path: str) -> nn.Module | None:
        """The module whose forward says what `path` runs (None: PyTorch)."""
        return self.target(path, for_switching=False)

    def described(self, path: str) -> tuple[str, str, str] | None:
        target = self.running_target(path)
        return None if target is None else describe_forward(target)

    def running(self, paths: list[str]) -> list[RunningNow]:
        found = []
        dtype = model_dtype(self.host.model) if paths else ""
        paths_of: dict[tuple[int, str], RunningPath] = {}  # per kernel and layer class, not per instance
        shown: dict[str, str] = {}  # per candidate switched on: the name a person reads, found once
        for path in paths:
            target = self.running_target(path)
            described = None if target is None else describe_forward(target)
            if target is None or described is None:
                found.append(RunningNow(self.name, path, reason=self._reasons.get(path, "")))
                continue
            note = self._notes.get(path, "")
            layer_class = kernel_class(target)
            module = _kernel_package(kernel_forward(target))
            key = (id(module), layer_class)
            if key not in paths_of:  # ~0.1 ms a read (isa_choices parsed): 30 instances share one
                paths_of[key] = running_path(module, layer_class or self.name, dtype)
            code_path = paths_of[key]
            chosen = self._on[path][0] if path in self._on else None
            if chosen is not None and chosen.label not in shown:
                shown[chosen.label] = shown_label(chosen, self.candidates())
            found.append(
                RunningNow(
                    self.name,
                    path,
                    *described,
                    note=note,
                    layer_class=layer_class,
                    candidate=chosen.label if chosen is not None else "",
                    short=shown[chosen.label] if chosen is not None else "",
                    code_path=code_path,
                )
            )
        return found

    def export(self) -> DoorExport:
        instances = tuple(self.group.instances)
        plan = layer_plan(self.name, self.kind, instances, self.snapshot(), self.running(list(instances)))
        if plan is None:
            return DoorExport()
        return DoorExport(layers=(plan,), notes=() if plan.whole else self.export_notes(plan))

    def export_notes(self, plan: LayerPlan) -> tuple[str, ...]:
        """What a mapping cannot say about `plan` (some instances on PyTorch, a second choice), and
        what the export does instead."""
        notes = []
        if plan.pytorch:
            notes.append(
                f"{plan.layer}: {plan.total - len(plan.pytorch)} of {plan.total} instances ran a kernel; a "
                f"mapping names a layer, not instances, so the export kernelizes the model and then puts "
                f"PyTorch back on the {len(plan.pytorch)} others ({some(plan.pytorch)}) by kernelizing each "
                "of them with an empty mapping"
            )
        for other in plan.choices[1:]:
            notes.append(
                f"{plan.layer}: {len(other.instances)} instances ran {other.label} in mode {other.mode} "
                f"({some(other.instances)}), beside {plan.main.label} on the rest; a mapping holds one "
                "repository per layer and mode, so the export kernelizes those instances one by one with "
                "a mapping of their own"
            )
        return tuple(notes)

    def forwards(self, path: str) -> tuple[Any, Any, bool]:
        target = self.target(path, for_switching=False)
        pytorch = self._pytorch.get(path) or class_forward(target)
        return installed_forward(target) or pytorch, pytorch, self.described(path) is not None

    def found(self, *, mode: Mode, query_hub: bool = False) -> tuple[tuple[Candidate, Availability], ...]:
        host = self.host
        found = []
        self._refresh(mode)
        for candidate in host.catalog.candidates(self.name):
            availability = host.catalog.availability(
                candidate, device=host.device, mode=mode, query_hub=query_hub
            )
            if availability.state in (State.READY, State.UNVERIFIED):
                availability = self._probed(candidate, availability, mode)
            found.append((candidate, availability))
        return tuple(found)

    def _refresh(self, mode: Mode) -> None:
        """The catalog's verdicts as they hold for the model now: one of another dtype or capture
        length is dropped (tried again), one another explorer of the model made is taken."""
        for candidate in self.host.catalog.candidates(self.name):
            cached(self.host, candidate, self.name, mode)

    def _probed(self, candidate: Candidate, availability: Availability, mode: Mode) -> Availability:
        """A ready candidate's availability once probed on this model (a failure to probe is one line)."""
        if cached(self.host, candidate, self.name, mode) is not None:  # tried on this model already
            return self.host.catalog.availability(candidate, device=self.host.device, mode=mode)
        try:
            chosen, entry = self.host.catalog.resolve(
                self.name, device=self.host.device, mode=mode, candidate=candidate
            )
            self.probe(chosen, entry, mode)
        except Exception as error:  # a stranger's code: never let it break the inventory
            self.host.catalog.record_probe(candidate, mode, ProbeVerdict(CANNOT_RUN, explain(error)))
        return self.host.catalog.availability(candidate, device=self.host.device, mode=mode)


def one_line(text: str) -> str:
    """A multi-line answer ("No kernel ... can run here:\n  candidate: why") as the one line a row shows."""
    head, *rest = text.strip().splitlines() or [""]
    return " ".join([head, "; ".join(line.strip() for line in rest)]).strip()


def _kernel_package(forward: Any) -> Any | None:
    """The loaded kernel package a (bound) layer forward comes from (`probe.kernel_package`)."""
    return kernel_package(forward)
