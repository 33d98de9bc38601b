"""Attention as a row of the inventory: the model-wide door Transformers opens for attention kernels.

A Transformers model runs the attention function its config names (`eager`, `sdpa`, or a Hub
string `org/repo[@rev][:fn]` that Transformers loads through `kernels` and wraps with its own
`flash_attention_forward`). `AttentionDoor` lists the candidates (PyTorch's two, the bundled CPU
repository, the user's repositories, Transformers' flash-attention fallbacks) with their
availability, and switches through `model.set_attn_implementation` only: the model's own forward
looks the function up at every call, so a switch is model-wide, costs well under a millisecond
once loaded, and lands between two calls of a running measurement (the switchboard's lock).

A local repository (the bundled one, or the user's folder) that offers `attention_forward` (the
signature of Transformers' `sdpa_attention_forward`) is registered directly, with SDPA's mask, under
a name of its own (`attention_interface.register_direct`): the model calls the kernel without the
flash-attention glue (unpadding, cu_seqlens, dtype casts, kwargs processing), which at 16 tokens
cost more than SDPA's whole call. A repository offering only flash-attn functions (Hub kernels such
as kernels-community/flash-attn), or a model whose attention passes what the direct function would
hand back to PyTorch (sinks, softcap, a tensor no attention function names), goes through
Transformers' glue as before; the row says which (`RunningNow.through`).

Measured like any layer: `forwards(path)` gives the function the model runs now and PyTorch's,
bound to one attention module, called on that module's captured (query, key, value, mask) inputs.

The door keeps the explorer's promises model-wide: a candidate is tried on one attention module's
real inputs before the switch stands (flash-attn2's CPU build loads, then refuses float32 and has
no CPU `fwd`: the model stays on PyTorch with that reason), and the function the model calls is
wrapped so that a kernel raising on a forward switches the whole model back to PyTorch and that
call is answered by PyTorch.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from kernel_explorer._backend import attention_interface
from kernel_explorer._backend.hub import is_offline
from kernel_explorer.catalog.attention_candidates import AttentionCandidate, AttentionChoices, inference
from kernel_explorer.catalog.availability import State
from kernel_explorer.catalog.candidates import Candidate, names_one
from kernel_explorer.catalog.hub_access import cached_variant_dir
from kernel_explorer.errors import KernelExplorerWarning, KernelSwitchError, NoUsableKernelError
from kernel_explorer.inspect.kernel_paths import RunningPath, model_dtype
from kernel_explorer.inspect.layer_groups import ATTENTION, LayerGroup
from kernel_explorer.inspect.running import RunningNow
from kernel_explorer.switching import attention_trial, isolation
from kernel_explorer.switching.code_paths import check_path, pin, running_path, unpin
from kernel_explorer.switching.door import Door, DoorHost, SwitchState
from kernel_explorer.switching.exported import AttentionPlan, DoorExport
from kernel_explorer.switching.probe import ProbeVerdict, explain, settled
from kernel_explorer.switching.registry_guard import SwitchedModules

if TYPE_CHECKING:
    from kernels import Mode
    from torch import nn


#: module -> (its door, the candidate it was switched to), and the registered function's fallback
_GUARDED = SwitchedModules(
    ATTENTION, lambda door, module: attention_interface.attention_function(module, door.baseline)
)


#: a directly registered name -> (its candidate, kernel id): what a later door of a model on it reads
_DIRECT: dict[str, tuple[AttentionCandidate, str]] = {}

MODEL_WIDE = "model-wide: model.config._attn_implementation, through Transformers' AttentionInterface"


_call_class = attention_trial.call_class  # what a measurement times (one module's call of one function)
_kind = attention_trial.call_kind


class AttentionDoor(AttentionChoices, Door):
    """The attention row of one model: its candidates, what runs now, and the switch.

    Callers hold the switchboard's lock around every method (the switchboard does).
    """

    kind: ClassVar[str] = "attention"
    model_wide: ClassVar[bool] = True

    def __init__(self, host: DoorHost, paths: tuple[str, ...]) -> None:
        super().__init__(host, LayerGroup(ATTENTION, "attention", MODEL_WIDE, paths))
        model = host.model
        self.model = model
        self.catalog = host.catalog
        self.device = host.device
        self.original = attention_interface.implementation(model)
        self.baseline = (
            self.original if self.original in attention_interface.BUILTIN else "sdpa"
        )  # "PyTorch" here
        self._modules = {path: model.get_submodule(path) for path in paths}
        self._user: list[AttentionCandidate] = []
        self._names: dict[str, AttentionCandidate] = {}  # implementation string -> candidate
        self._kernel_ids: dict[str, str] = {}
        self._calls: dict[tuple[str, str], Any] = {}
        #: (candidate, mode, with calls) -> what its trial in the worker found (None: not isolable)
        self._isolated: dict[tuple[Any, Any, bool], ProbeVerdict | None] = {}
        self._trial = False  # a probe's trial call runs: a kernel's error is the verdict, not a fallback
        self.reason = ""  # why the baseline runs although a kernel was asked for
        self.warning = ""  # why the kernel that runs, named by the user, gives wrong results here
        self.mode: Any = inference()  # of the last switch (a snapshot keeps it)
        if attention_interface.is_hub_string(self.original):
            self._names[self.original] = self._hub_candidate(self.original, "registered")
        elif self.original in _DIRECT:  # another explorer of the model switched it: the same candidate
            self._names[self.original], self._kernel_ids[self.original] = _DIRECT[self.original]

    @classmethod
    def find(cls, host: DoorHost) -> AttentionDoor | None:
        """The door of the host's model, or None when it has no attention interface (a plain module)."""
        model = host.model
        if not attention_interface.has_attention_interface(model):
            return None
        paths = tuple(
            path
            for path, module in model.named_modules()
            if type(module).__name__.endswith("Attention") and hasattr(module, "config")
        )
        return cls(host, paths) if paths else None

    @classmethod
    def discover(cls, host: DoorHost, groups: Sequence[LayerGroup], known: Mapping[str, Door]) -> list[Door]:
        """The model's attention row (kept once found: it knows the switches it made)."""
        door = known.get(ATTENTION)
        if isinstance(door, cls):
            return [door]
        found = cls.find(host)
        return [found] if found is not None else []

    def export(self) -> DoorExport:
        """The implementation the model runs now; a local repository's folder said in a note."""
        now = self.switched()
        if now is None or getattr(now, "pytorch", False):
            return DoorExport(attention=AttentionPlan(attention_interface.implementation(self.model)))
        folder = getattr(now, "folder", None)
        ref = getattr(now, "hub", None)
        plan = AttentionPlan(
            now.implementation if folder is None else "",
            folder=None if folder is None else str(folder),
            code_path=now.path,
            label=now.label,
            allow_all_kernels=ref is not None and ref.trusts(self.catalog.trust_remote_code),
        )
        if plan.folder is None:
            return DoorExport(attention=plan)
        note = (
            f"attention runs a local repository ({plan.folder}): the export maps a Hub-shaped name to "
            "that folder through kernels' LOCAL_KERNELS variable; on another machine, build it there and "
            "change the folder"
        )
        return DoorExport(attention=plan, notes=(note,))

    # -- switching ---------------------------------------------------------------------------------

    @staticmethod
    def _is_pytorch(name: str) -> bool:
        return not (
            attention_interface.is_hub_string(name)
            or name.startswith("flash_attention")
            or attention_interface.is_direct(name)
        )

    def _loadable_name(self, chosen: AttentionCandidate, mode: Mode) -> tuple[str, bool]:
        """(the string to hand Transformers, whether to allow an untrusted publisher): a local
        repository's `attention_forward` registered directly where the model allows it, else the
        Hub-shaped alias Transformers' flash glue loads."""
        if chosen.folder is not None:
            module = attention_interface.load_local(Path(chosen.folder))
            direct = self._direct(chosen, mode)
            if direct is not None:
                name = attention_interface.register_direct(Path(chosen.folder), direct)
                self._kernel_ids[name] = getattr(module, "__name__", name)
                _DIRECT[name] = (chosen, self._kernel_ids[name])
                return name, False
            contract = attention_interface.contract_of(module)
            if contract is None:
                contracts = "; ".join(attention_interface.CONTRACT)
                why = f"it exposes none of Transformers' attention contracts ({contracts})"
                if attention_interface.direct_function(module) is not None:  # the model passes sinks...
                    why += ", and its attention_forward would hand SDPA what this model passes (sinks...)"
                raise RuntimeError(why)
            name = attention_interface.local_alias(Path(chosen.folder))
            self._kernel_ids[name] = getattr(module, "__name__", name)
            return name, False
        ref = chosen.hub
        if ref is None:
            return chosen.implementation, False
        cached = cached_variant_dir(ref)
        if is_offline() and cached is not None:  # kernels' offline load fails on partial snapshots
            attention_interface.map_to_folder(ref.repo_id, cached.parent.parent)
        return chosen.implementation, ref.trusts(self.catalog.trust_remote_code)

    def switch(self, candidate: Any, *, mode: Mode, strict: bool = False) -> AttentionCandidate | None:
        """Switch the model's attention to `candidate`; on failure the model keeps its implementation.

        Raises `KernelExplorerError` for a string of no accepted form. A candidate that cannot run
        here (`NoUsableKernelError`) or fails to load (`KernelSwitchError`, also kept as the
        candidate's "failed to load" reason) raises with `strict`; otherwise the reason is kept in
        `reason` (what the row's "runs now" says) and None returned.
        """
        chosen = self.choose(candidate, mode=mode) if candidate is not None else None
        named = candidate is not None and (isinstance(candidate, Path) or names_one(candidate))
        try:
            for _ in range(len(self.candidates()) + 1):  # a default choice found wrong: the next one
                done = self._switch_to(chosen or self.choose(None, mode=mode), mode, named, strict)
                if done is not None:
                    chosen = done
                    break
                chosen = None
        except (NoUsableKernelError, KernelSwitchError) as error:
            self.reason = str(error).splitlines()[0]
            if strict:
                raise
            return None
        self.reason, self.mode = "", mode
        return chosen

    def _switch_to(
        self, chosen: AttentionCandidate, mode: Mode, named: bool, strict: bool
    ) -> AttentionCandidate | None:
        """Switch to `chosen`; None when a default choice turned out wrong (the next one is tried).

        Wrong results (read before the switch, or found by the trial) switch only a candidate the
        user named, with a warning the row keeps; `strict` refuses it."""
        found = self.availability(chosen, mode=mode, query_hub=True)
        wrong = found.state is State.WRONG_RESULTS  # read before trust (Transformers drops sinks)
        if wrong and (strict or not named):
            if strict:
                raise KernelSwitchError(f"{chosen.label} {found}")
            return None
        if not found.state.usable and not wrong:
            raise NoUsableKernelError(f"{chosen.label} cannot run here: {found}")
        self._check_training(chosen, mode)
        if chosen.path is not None:  # a path the kernel lacks: the model keeps what it runs
            check_path(self._kernel_module(chosen), chosen.path)
        try:
            name, trust = self._loadable_name(chosen, mode)
            attention_interface.set_implementation(self.model, name, allow_all_kernels=trust)
        except Exception as error:
            reason = explain(error)
            self.catalog.record_failure(chosen, reason)
            raise KernelSwitchError(f"{chosen.label} failed to load: {reason}") from error
        self._pin(chosen)  # once it runs: a failed switch keeps the model's pin as it was
        self._names[name] = chosen
        self._guard(name, chosen)
        verdict = self._probe(chosen, mode, name)
        if verdict.refused or (verdict.distrusted and strict):
            self.to_pytorch()
            raise KernelSwitchError(f"{chosen.label} {verdict}")
        if verdict.distrusted and not named:  # the default choice passes over it
            self.to_pytorch()
            return None
        self.warning = ""
        if wrong or verdict.distrusted:  # named: on, and said (a warning, and the row's note)
            self.warning = str(verdict) if verdict.distrusted else f"{found.state.value}: {found.reason}"
            warnings.warn(
                f"{chosen.label} {self.warning}; switched on because you named it",
                KernelExplorerWarning,
                stacklevel=5,
            )
        return chosen

    @property
    def _holder(self) -> tuple[int, str]:
        """Who holds a pin: the model's attention (every explorer of the model lets go of the same)."""
        return (id(self.model), ATTENTION)

    def _pin(self, chosen: AttentionCandidate) -> None:
        """The code path `chosen` names ("bundled@avx2") pinned in its module while it is on; a path
        the module does not run leaves PyTorch and raises `KernelSwitchError`."""
        if chosen.path is None:
            unpin(self._holder)
            return
        try:
            pin(self._kernel_module(chosen), chosen.path, self._holder, chosen.label, owner=self.model)
        except KernelSwitchError:
            self.to_pytorch()
            raise

    # -- the probe and the fallback ----------------------------------------------------------------

    def _probe(self, chosen: AttentionCandidate, mode: Mode, name: str) -> ProbeVerdict:
        """Try the implementation the model now runs on one attention module's real inputs.

        Cached per candidate and model shape; kept in the catalog, so the row and the default
        choice read "cannot run here" with the reason after a failed trial.
        """
        return settled(self.host, chosen, ATTENTION, mode, lambda: self._try(chosen, name))

    def _try(self, chosen: AttentionCandidate, name: str) -> ProbeVerdict:
        """`attention_trial`'s trial, with the guard raising instead of falling back meanwhile."""
        module = self._kernel_module(chosen)
        self._trial = True
        try:
            verdict = attention_trial.OK_VERDICT
            for sample in (self.host.sample, self.host.long_sample):  # the capture's length, the longer
                found = attention_trial.try_each_kind(
                    ((path, self._modules[path], sample(ATTENTION, path)) for path in self.group.instances),
                    lambda path, sample: attention_trial.try_call(
                        path, sample, self._call(path, name), self._call(path, self.baseline), module
                    ),
                )
                # the longer trial counts where it found wrong values or side effects; one it cannot
                # run (a sliding window past the capture's keys) is a call the fallback answers
                if sample == self.host.sample or found.distrusted:
                    verdict = found
                if not verdict.runs:
                    break
            return attention_trial.try_model(self.model) if verdict.runs else verdict
        finally:
            self._trial = False

    def _stranger_trial(self, candidate: AttentionCandidate, mode: Mode) -> ProbeVerdict | None:
        """A stranger's candidate loaded and called in the trial worker (`isolation`) on copies of
        one attention module per kind and their captured calls, before anything of it loads here:
        what crashes, hangs or fails there reads "cannot run here" with the reason and never loads
        here. Kept per candidate, mode and whether there were calls to try (after a capture, the
        calls are tried too). None: PyTorch's or this package's own."""
        if candidate.pytorch or not isolation.isolated(candidate):
            return None
        calls = self._trial_calls()
        key = (candidate, mode, bool(calls))
        if key not in self._isolated:
            ref = candidate.hub
            cached = cached_variant_dir(ref) if ref is not None else None
            if ref is not None and cached is not None and is_offline():  # as `_loadable_name`: the
                attention_interface.map_to_folder(ref.repo_id, cached.parent.parent)  # worker reads it
            try:
                verdict = isolation.run_isolated(
                    attention_trial.isolated_trial,
                    candidate.folder,
                    candidate.implementation,
                    ref is not None and ref.trusts(self.catalog.trust_remote_code),
                    self._direct_allowed(mode),
                    calls,
                    self.baseline,
                    timeout=self.host.trial_timeout,
                )
            except isolation.Unisolable:  # a module the worker cannot rebuild: tried here, as before
                verdict = None
            self._isolated[key] = verdict if isinstance(verdict, ProbeVerdict) else None
        return self._isolated[key]

    def _trial_calls(self) -> list[tuple[str, nn.Module, attention_trial.Sample]]:
        """Copies of the first attention module of each kind with its captured call (none before a
        capture), without what runs on them here (hooks, an installed forward)."""
        calls, seen = [], set()
        for path in self.group.instances:
            sample = self.host.sample(ATTENTION, path)
            if sample is None:
                continue
            kind = attention_trial.kind_of(self._modules[path], *sample)
            if kind in seen:
                continue
            seen.add(kind)
            calls.append((path, isolation.sendable(copy.deepcopy(self._modules[path])), sample))
        return calls

    def captured_call(self) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The arguments and keywords the model passed in one captured attention call."""
        return self.host.sample(ATTENTION, self.group.instances[0]) if self.group.instances else None

    def _kernel_module(self, chosen: AttentionCandidate) -> Any | None:
        """The loaded kernel package behind `chosen`, to name the ops its build lacks."""
        try:
            return attention_interface.load_local(Path(chosen.folder)) if chosen.folder is not None else None
        except Exception:
            return None

    def _guard(self, name: str, chosen: AttentionCandidate) -> None:
        """Wrap the function registered as `name`: a kernel that raises in one of this model's
        attention modules switches the model back to PyTorch, and that call is answered by PyTorch.
        During a trial (`_probe`) the error is raised instead, so the trial can say why.

        The wrapper lives in Transformers' process-wide registry, so it finds the door through
        `_GUARDED` (attention module -> its door, both weak): every explorer's modules are guarded
        by one wrapper per name, and a dropped model leaves nothing of itself in the registry."""
        door = weakref.ref(self)
        for module in self._modules.values():
            _GUARDED[module] = (door, chosen)
        attention_interface.wrap_registered(name, _GUARDED.guarded)
        self._calls = {key: call for key, call in self._calls.items() if key[1] != name}

    def kernel_raised(self, path: str, chosen: Candidate, error: Exception) -> str:
        """The whole model back on PyTorch after `chosen` raised on a forward (attention is
        model-wide); returns the reason."""
        reason = f"{chosen.label} raised when run: {explain(error)}"
        self.catalog.record_failure(chosen, reason)
        self.to_pytorch()
        self.reason = reason
        return reason

    # -- the door protocol -------------------------------------------------------------------------

    def on(self, paths: list[str], *, mode: Mode, candidate: Any, allow_changes: bool = False) -> None:
        self.switch(candidate, mode=mode, strict=self.host.strict)

    def off(self, paths: list[str]) -> None:
        self.to_pytorch()

    def snapshot(self) -> SwitchState:
        switched = self.switched()
        return {(ATTENTION, "*"): (switched, self.mode)} if switched is not None else {}

    def running(self, paths: list[str]) -> list[RunningNow]:
        kernel_id, variant, name, reason = self.now()
        now = attention_interface.implementation(self.model)
        chosen = self._names.get(now) if kernel_id is not None else None
        through = attention_interface.through(now) if kernel_id is not None else ""
        module = self._kernel_module(chosen) if chosen is not None else None
        code_path = (
            running_path(module, ATTENTION, model_dtype(self.model)) if module is not None else RunningPath()
        )
        return [
            RunningNow(
                ATTENTION,
                p,
                kernel_id,
                variant,
                name,
                reason,
                name=name or "PyTorch",
                code_path=code_path,
                candidate=chosen.label if chosen is not None else "",
                note=self.warning if kernel_id is not None else "",
                through=through,
            )
            for p in paths
        ]

    def timed_modules(self) -> list[tuple[nn.Module, str]]:
        return [(module, ATTENTION) for module in self._modules.values()]

    def _check_training(self, chosen: AttentionCandidate, mode: Mode) -> None:
        """A local attention repository that declares `has_backward = False` (as kernels' layer
        classes do) refuses training modes: the model keeps its attention, and the row says why."""
        from kernels import Mode

        if chosen.folder is None or Mode.TRAINING not in mode:
            return
        if getattr(attention_interface.load_local(Path(chosen.folder)), "has_backward", True) is False:
            why = "the kernel does not support training (has_backward = False)"
            self.catalog.record_unsupported(chosen, mode, why)
            self.to_pytorch()  # as kernelize keeps PyTorch for a layer without backward
            raise NoUsableKernelError(f"{chosen.label} does not support training")

    def to_pytorch(self) -> None:
        """Back to PyTorch's implementation the model had (or sdpa, when it came with a kernel).

        A failed switch's reason goes too: after `off` or `reset` nothing was asked for."""
        self.reason = self.warning = ""
        if attention_interface.implementation(self.model) != self.baseline:
            attention_interface.set_implementation(self.model, self.baseline)
        unpin(self._holder)  # last: the kernel's own path back once nothing runs it

    def switched(self) -> AttentionCandidate | None:
        """The candidate running now when it is not the baseline (what a snapshot keeps)."""
        now = attention_interface.implementation(self.model)
        if now == self.baseline:
            return None
        return self._names.get(now) or self._builtin(now)

    # -- reading -----------------------------------------------------------------------------------

    def now(self) -> tuple[str | None, str | None, str, str]:
        """(kernel id or None for PyTorch, variant, implementation's name, reason): what a
        `RunningNow` of every attention module says (attention is model-wide)."""
        now = attention_interface.implementation(self.model)
        if self._is_pytorch(now):
            return None, None, now, self.reason
        chosen = self._names.get(now)
        return self._kernel_ids.get(now, now), "-", chosen.label if chosen is not None else now, ""

    def _call(self, path: str, name: str) -> Any:
        key = (path, name)
        if key not in self._calls:
            module = self._modules[path]
            self._calls[key] = _call_class()(
                module,
                attention_interface.attention_function(module, name),
                _kind(name, self._is_pytorch(name)),
            ).forward
        return self._calls[key]

    def forwards(self, path: str) -> tuple[Any, Any, bool]:
        """(what `path` runs now, PyTorch's, whether the former is a kernel), as the switchboard's."""
        now = attention_interface.implementation(self.model)
        return self._call(path, now), self._call(path, self.baseline), not self._is_pytorch(now)

    @contextlib.contextmanager
    def capturing(self, keep: Callable[[tuple[str, str], tuple, dict], None]) -> Iterator[None]:
        """For the block, each attention call hands (query, key, value, mask) and its keywords to
        `keep`, then runs PyTorch's implementation (so the capture's forward is PyTorch's)."""
        paths = {id(module): path for path, module in self._modules.items()}

        def record(module: nn.Module, args: tuple, kwargs: dict) -> None:
            if id(module) in paths:
                keep((ATTENTION, paths[id(module)]), args, kwargs)

        before = attention_interface.implementation(self.model)
        with attention_interface.capturing(
            record,
            lambda module: attention_interface.attention_function(module, self.baseline),
            mask_like=self.baseline,
        ) as name:
            attention_interface.set_implementation(self.model, name)
            try:
                yield
            finally:
                attention_interface.set_implementation(self.model, before)
