"""Switch kernels on and off per layer name or per instance, through `kernels`' own `kernelize`.

Switching on runs `kernelize`'s per-layer step on each chosen instance with one candidate mapped,
so the forward that runs is exactly the one `kernelize` (and Transformers' `use_kernels=True`)
would install. Switching off deletes the instance's `forward` attribute, which is how the class's
own PyTorch forward comes back, and every attribute the kernel added to the instance while it ran
(packed weights a kernel caches, say), so their memory goes: nothing of the explorer stays behind.

Failures never leave a model half-switched: a kernel that fails to load leaves that layer on
PyTorch with the reason kept; a kernel that raises when run is switched off on the spot and that
call is answered by PyTorch; a `ValueError` declines one instance (weights it cannot pack): that
one alone goes back. Only `strict=True` turns these into exceptions.

All methods hold one re-entrant lock; a measurement thread holds the same lock (`board.lock`)
around its forward calls, so a switch never lands in the middle of one.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kernel_explorer import function_routes, switch_events
from kernel_explorer._backend.functions import function_key, kernel_functions
from kernel_explorer._backend.hub import hub_session
from kernel_explorer._backend.layers import bound_function, kernelize_each, model_device
from kernel_explorer._backend.modes import mode_name, parse_mode
from kernel_explorer.attention import ATTENTION, AttentionDoor
from kernel_explorer.errors import KernelExplorerError, KernelSwitchError, NoUsableKernelError
from kernel_explorer.extension import probe, release_added
from kernel_explorer.forwards import KernelForward, RunningNow, describe_forward, kernel_class
from kernel_explorer.layer_groups import LayerGroup, find_kernel_layers

if TYPE_CHECKING:
    from kernels import Mode
    from torch import nn

    from kernel_explorer.catalog import Candidate, Catalog

#: the switches that are on: (layer name, instance path) -> (candidate, mode)
SwitchState = dict[tuple[str, str], tuple["Candidate", "Mode"]]


def _announced(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a switching method inside `switch_events.changing`, so every view of the model hears of it."""

    @functools.wraps(method)
    def wrapper(self: Switchboard, *args: Any, **kwargs: Any) -> Any:
        with switch_events.changing(self.model):
            return method(self, *args, **kwargs)

    return wrapper


class Switchboard:
    """Kernel switches for one model.

    Args:
        model: any `nn.Module` with kernel layers (see `find_kernel_layers`).
        catalog: where candidates come from and whether they can run here.
        device: the device type to pick kernels for; default: where the model's parameters are.
        strict: raise `KernelSwitchError` instead of falling back to PyTorch.
    """

    def __init__(
        self, model: nn.Module, catalog: Catalog, *, device: str | None = None, strict: bool = False
    ):
        self.model = model
        self.catalog = catalog
        self.strict = strict
        self.device = device or model_device(model)
        self.lock = threading.RLock()
        self.groups: dict[str, LayerGroup] = {g.name: g for g in find_kernel_layers(model)}
        self._modules: dict[str, nn.Module] = dict(model.named_modules())
        self._on: dict[tuple[str, str], tuple[Candidate, Mode]] = {}
        self._reasons: dict[tuple[str, str], str] = {}
        self._keys: dict[tuple[str, str], frozenset[str]] = {}  # instance attributes before switching on
        self.attention = AttentionDoor.find(model, catalog, self.device)  # model-wide; None: no interface
        if self.attention is not None:
            self.groups[ATTENTION] = self.attention.group

    def rescan(self) -> None:
        """Find the kernel layers again (after `extension.extend` or `retract` renamed some)."""
        with self.lock:
            self.groups = {g.name: g for g in find_kernel_layers(self.model)}
            if self.attention is not None:
                self.groups[ATTENTION] = self.attention.group
            self._modules = dict(self.model.named_modules())

    # -- choosing what to switch ------------------------------------------------------------------

    def group(self, name: str) -> LayerGroup:
        """The layer group `name`, or a clear error naming the ones this model has."""
        try:
            return self.groups[name]
        except KeyError:
            have = ", ".join(self.groups) or "none"
            raise KernelExplorerError(
                f"The model has no kernel layer {name!r}. Its kernel layers: {have}."
            ) from None

    def select(self, name: str, instances: str | list[str] | tuple[str, ...] | None = None) -> list[str]:
        """Instance paths of `name` matching `instances` (paths or glob patterns; None: all)."""
        group = self.group(name)
        if instances is None:
            return list(group.instances)
        patterns = [instances] if isinstance(instances, str) else list(instances)
        chosen: list[str] = []
        for pattern in patterns:
            matched = [p for p in group.instances if p == pattern or fnmatch.fnmatchcase(p, pattern)]
            if not matched:
                sample = ", ".join(group.instances[:3]) + (", ..." if len(group) > 3 else "")
                raise KernelExplorerError(
                    f"{pattern!r} matches no instance of {name!r}. Its instances: {sample} "
                    "(exact module paths or glob patterns such as 'model.layers.1*')."
                )
            chosen.extend(p for p in matched if p not in chosen)
        return chosen

    def _target(self, name: str, path: str, *, for_switching: bool) -> nn.Module:
        """The module whose forward a switch replaces: the instance, or its own function copy."""
        module = self._modules[path]
        if self.groups[name].kind == "module":
            return module
        key = self.function_key(module, name)
        if for_switching:
            return function_routes.copy_for(module, key)
        return kernel_functions(module)[key]

    @staticmethod
    def function_key(holder: nn.Module, name: str) -> str:
        key = function_key(holder, name)
        if key is None:
            raise KernelExplorerError(f"{type(holder).__name__} has no kernel function {name!r}")
        return key

    # -- switching -----------------------------------------------------------------------------

    @_announced
    def on(
        self,
        name: str,
        instances: str | list[str] | tuple[str, ...] | None = None,
        *,
        mode: str | Mode = "inference",
        candidate: str | Candidate | None = None,
    ) -> list[RunningNow]:
        """Switch `name` to a kernel on all or some instances; returns what each one runs now."""
        paths = self.select(name, instances)
        kernel_mode = parse_mode(mode)
        with self.lock:
            if self.groups[name].kind == "attention":  # model-wide, through Transformers' own switch
                self.attention.switch(candidate, mode=kernel_mode, strict=self.strict)  # type: ignore[union-attr]
                return self.running(name)
            try:
                chosen, entry = self.catalog.resolve(
                    name, device=self.device, mode=kernel_mode, candidate=candidate
                )
            except NoUsableKernelError as error:
                if self.strict:
                    raise
                self._fall_back(name, paths, str(error))
                return self.running(name, paths)
            targets = {path: self._target(name, path, for_switching=True) for path in paths}
            for path, target in targets.items():
                self._keys.setdefault((name, path), frozenset(target.__dict__))
            by_target = {id(t): p for p, t in targets.items()}
            failure: str | None = None
            with hub_session():
                results = list(kernelize_each(list(targets.values()), entry, kernel_mode))
            for target, error in results:
                path = by_target[id(target)]
                if error is not None:
                    failure = f"{type(error).__name__}: {error}".strip()
                    self._to_pytorch(name, path)
                    self._reasons[(name, path)] = f"{chosen.repo_label} failed to load: {failure}"
                    continue
                self._install_guard(name, path, target, chosen, kernel_mode)
            if self.groups[name].added:  # a declined instance shows it now, not at the first call
                probe([self._modules[p] for p in paths if (name, p) in self._on])
            if failure is not None:
                self.catalog.record_failure(chosen, failure)
                if self.strict:
                    raise KernelSwitchError(f"{chosen.label} failed to load: {failure}")
            return self.running(name, paths)

    def _install_guard(self, name: str, path: str, target: nn.Module, chosen: Candidate, mode: Mode) -> None:
        forward = target.__dict__.get("forward")
        if forward is None or bound_function(forward) is type(target).forward:
            # kernelize kept PyTorch: the kernel does not support this mode
            self._to_pytorch(name, path)
            self._reasons[(name, path)] = f"{chosen.repo_label} does not support {mode_name(mode)}"
            self.catalog.record_unsupported(chosen, mode, f"the kernel does not support {mode_name(mode)}")
            return
        from kernels import Mode

        if Mode.TORCH_COMPILE in mode:
            # torch.compile guards a callable object by identity: a wrapper per instance made every
            # decoder layer a recompile (and, past dynamo's recompile limit, eager). Keep kernelize's
            # bound forward, as kernels does; in this mode a kernel's error is raised, not fallen back.
            self._on[(name, path)] = (chosen, mode)
            self._reasons.pop((name, path), None)
            return
        original = type(target).forward.__get__(target)

        def on_error(
            error: Exception, name: str = name, path: str = path, chosen: Candidate = chosen
        ) -> None:
            self._kernel_raised(name, path, chosen, error)

        target.forward = KernelForward(forward, original, on_error)
        self._on[(name, path)] = (chosen, mode)
        self._reasons.pop((name, path), None)

    @_announced
    def _kernel_raised(self, name: str, path: str, chosen: Candidate, error: Exception) -> None:
        declined = isinstance(error, ValueError)  # this instance only; the kernel stays usable
        what = "declined this instance" if declined else f"raised when run: {type(error).__name__}"
        reason = f"{chosen.repo_label} {what}: {error}"
        with self.lock:
            if not declined:
                self.catalog.record_failure(chosen, reason)
            on = [p for (n, p), (c, _) in self._on.items() if n == name and c == chosen]
            self._fall_back(name, [path] if declined else on, reason)
        if self.strict:
            raise KernelSwitchError(reason) from error

    def _fall_back(self, name: str, paths: list[str], reason: str) -> None:
        for path in paths:
            self._to_pytorch(name, path)
            self._reasons[(name, path)] = reason

    def _to_pytorch(self, name: str, path: str) -> None:
        """Back to the class's own forward, exactly: no attribute of ours stays on the module."""
        self._on.pop((name, path), None)
        self._reasons.pop((name, path), None)
        kind = self.groups[name].kind
        if kind == "attention":
            self.attention.to_pytorch()  # type: ignore[union-attr]  # model-wide
        elif kind == "module":
            self._modules[path].__dict__.pop("forward", None)
            release_added(self._modules[path], self._keys.pop((name, path), None))  # packed weights
        else:
            self._keys.pop((name, path), None)  # the holder's copy goes, and all it cached with it
            function_routes.detach(self._modules[path], self.function_key(self._modules[path], name))

    @_announced
    def off(self, name: str, instances: str | list[str] | tuple[str, ...] | None = None) -> list[RunningNow]:
        """Switch `name` back to PyTorch on all or some instances."""
        paths = self.select(name, instances)
        with self.lock:
            for path in paths:
                self._to_pytorch(name, path)
            return self.running(name, paths)

    @_announced
    def reset(self) -> None:
        """Every layer back to PyTorch."""
        with self.lock:
            for name, group in self.groups.items():
                for path in group.instances:
                    self._to_pytorch(name, path)

    def subscribe(self, observer: Callable[[], None]) -> Callable[[], None]:
        """Call `observer()` after any change of this model's switches (from any switchboard)."""
        return switch_events.subscribe(self.model, observer)

    def snapshot(self) -> SwitchState:
        """The switches that are on, to hand back to `restore`."""
        with self.lock:
            switched = self.attention.switched() if self.attention is not None else None
            return dict(self._on) | ({(ATTENTION, "*"): (switched, self.attention.mode)} if switched else {})

    @_announced
    def restore(self, state: SwitchState) -> None:
        """Return to a `snapshot`: instances on there are switched on with the same candidate and mode."""
        with self.lock:
            for name, path in [*self._on, *([(ATTENTION, "*")] if self.attention is not None else [])]:
                if state.get((name, path)) != self.snapshot().get((name, path)):
                    self._to_pytorch(name, path)
            for (name, path), (chosen, mode) in state.items():
                known = name == ATTENTION or path in getattr(self.groups.get(name), "instances", ())
                if (name, path) not in self.snapshot() and known:  # (a retracted one is gone)
                    self.on(name, [path], mode=mode, candidate=chosen)

    @contextlib.contextmanager
    def holding(
        self, change: Callable[[], object] | None = None, *, keep_others: bool = False
    ) -> Iterator[SwitchState]:
        """Make `change` (a function that switches) for the block; the state before comes back after.

        The one save/restore of the switchboard: `Explorer.using`, a model comparison's all-PyTorch
        side and a layer comparison's temporary switches all go through it. The state comes back
        also when `change` or the block raises or is interrupted. With `keep_others=True`, only the
        switches `change` made are undone, and only where nobody switched them since (a user's
        switch made while a measurement runs stays as the user made it). Yields the state the
        change left.
        """
        with self.lock:
            before = self.snapshot()
            try:
                if change is not None:
                    change()
            except BaseException:
                self.restore(before)
                raise
            made = self.snapshot()
        try:
            yield made
        finally:
            with self.lock:
                if not keep_others:
                    self.restore(before)
                else:
                    now = self.snapshot()
                    target = dict(now)
                    for key in before.keys() | made.keys():
                        if before.get(key) != made.get(key) and now.get(key) == made.get(key):
                            if key in before:
                                target[key] = before[key]
                            else:
                                target.pop(key, None)
                    self.restore(target)

    def forwards(self, name: str, path: str) -> tuple[Any, Any, bool]:
        """(what the instance runs now, its PyTorch forward, whether the former is a kernel).

        Read under the lock at each measurement sample, so a switch made mid-run shows in the
        next sample.
        """
        with self.lock:
            if self.groups[name].kind == "attention":
                return self.attention.forwards(path)  # type: ignore[union-attr]
            target = self._target(name, path, for_switching=False)
            pytorch = type(target).forward.__get__(target)
            current = target.forward
            if self.groups[name].kind == "function" and function_routes.is_routed(target):
                stand_in = function_routes.stand_in(target)
                current = pytorch if stand_in is None else stand_in.forward
                return current, pytorch, stand_in is not None and describe_forward(stand_in) is not None
            return current, pytorch, describe_forward(target) is not None

    # -- reporting -----------------------------------------------------------------------------

    def running(self, name: str | None = None, paths: list[str] | None = None) -> list[RunningNow]:
        """What each instance runs now, read from the model's forwards (not from our records)."""
        names = [name] if name is not None else list(self.groups)
        found: list[RunningNow] = []
        with self.lock:
            for layer in names:
                group = self.group(layer)
                if group.kind == "attention":
                    now = self.attention.now()  # type: ignore[union-attr]
                    found += [RunningNow(layer, p, *now) for p in (name and paths) or group.instances]
                    continue
                for path in paths if paths is not None and name is not None else group.instances:
                    target = self._target(layer, path, for_switching=False)
                    if group.kind == "function" and function_routes.is_routed(target):
                        target = function_routes.stand_in(target)
                    described = None if target is None else describe_forward(target)
                    if described is None:
                        found.append(RunningNow(layer, path, reason=self._reasons.get((layer, path), "")))
                    else:
                        found.append(RunningNow(layer, path, *described, layer_class=kernel_class(target)))
        return found
