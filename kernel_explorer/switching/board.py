"""Switch kernels on and off per layer name or per instance, whatever door the kernel enters by.

The switchboard keeps what every door shares: choosing instances, one re-entrant lock, snapshot,
restore and `holding`, and telling every view of the model about each change. How a kernel goes in
and out is each door's (`switching/`: the layer forwards `kernelize` replaces, function layers,
Transformers' attention interface, classes `extend` names), and the switchboard asks the door,
never which kind of door it is.

Failures never leave a model half-switched: every door probes a candidate on the model before it
trusts it, answers a forward whose kernel raises with PyTorch and stays there with the reason, and
restores a module exactly (its original tensors, attributes the kernel added removed) when it goes
back to PyTorch. Only `strict=True` turns these into exceptions.

All methods hold one re-entrant lock; a measurement thread holds the same lock (`board.lock`)
around its forward calls, so a switch never lands in the middle of one. Every change of what an
instance runs (a switch, a kernel's fallback, a rescan) counts one more in `changes` before the
lock is let go: a measurement compares two readings of it taken under the lock to know, without
reading the switches, whether anything changed in between.
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.layer_forwards import model_device
from kernel_explorer._backend.modes import parse_mode
from kernel_explorer.errors import KernelExplorerError, KernelSwitchError
from kernel_explorer.inspect.layer_groups import LayerGroup, find_kernel_layers
from kernel_explorer.inspect.running import RunningNow
from kernel_explorer.switching import events, model_state
from kernel_explorer.switching.attention_door import ATTENTION, AttentionDoor
from kernel_explorer.switching.door import Door, SwitchState
from kernel_explorer.switching.door_classes import DOORS
from kernel_explorer.switching.experts_door import EXPERTS, ExpertsDoor
from kernel_explorer.switching.fair_lock import HandingRLock

if TYPE_CHECKING:
    from kernels import Mode
    from torch import nn

    from kernel_explorer.catalog.candidates import Candidate, Catalog

__all__ = ["RunningNow", "SwitchState", "Switchboard"]

#: one real call of (layer name, instance path): (args, kwargs), or None
Sample = Callable[[str, str], "tuple[tuple[Any, ...], dict[str, Any]] | None"]


def _announced(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a switching method inside `events.changing`, so every view of the model hears of it."""

    @functools.wraps(method)
    def wrapper(self: Switchboard, *args: Any, **kwargs: Any) -> Any:
        with events.changing(self.model):
            return method(self, *args, **kwargs)

    return wrapper


class Switchboard:
    """Kernel switches for one model.

    Args:
        model: any `nn.Module` with kernel layers (see `find_kernel_layers`).
        catalog: where candidates come from and whether they can run here.
        device: the device type to pick kernels for; default: where the model's parameters are.
        strict: raise `KernelSwitchError` instead of falling back to PyTorch.
        trial_timeout: seconds a stranger's candidate may take to answer its trial in the worker
            process (`isolation.py`); None: `isolation.DEFAULT_TIMEOUT`.
    """

    def __init__(
        self,
        model: nn.Module,
        catalog: Catalog,
        *,
        device: str | None = None,
        strict: bool = False,
        trial_timeout: float | None = None,
    ):
        self.model = model
        self.catalog = catalog
        self.strict = strict
        self.trial_timeout = trial_timeout
        self.device = device or model_device(model)
        self.lock = HandingRLock()  # a switch clicked mid-run gets it between two pairs
        #: one real call of (layer, instance) for a probe's trial; the explorer sets it
        self.samples: Sample | None = None
        #: the same calls at the longer trial length; the capture's model call; its length in tokens
        self.long_samples: Sample | None = None
        self.model_call: Callable[[], dict[str, Any] | None] | None = None
        self.tokens: Callable[[], int | None] | None = None
        self._modules: dict[str, nn.Module] = dict(model.named_modules())
        self.doors: dict[str, Door] = {}
        self._shared = model_state.of(model)  # the change count every explorer of the model shares
        self.rescan()

    @property
    def changes(self) -> int:
        """How many times what the model runs has changed (from any switchboard of it): read under
        the lock, two equal readings mean no switch, fallback or rescan landed between them."""
        return self._shared.changes

    @contextlib.contextmanager
    def _changing(self) -> Iterator[None]:
        """The lock around a change of what instances run; the change count goes up before the lock
        is let go (also when the change raises half-way), so no reader under the lock sees a change
        the count does not show."""
        with self.lock:
            try:
                yield
            finally:
                self._shared.changes += 1

    def rescan(self) -> None:
        """Find the kernel layers again (after `extension.extend` or `retract` renamed some).

        Every door class finds its own rows (`Door.discover`); a row that is still there keeps its
        door (and what that door knows of its switches). Rows come in the model's order, the
        model-wide ones (attention, experts) after."""
        with self._changing():
            self._modules = dict(self.model.named_modules())
            groups = find_kernel_layers(self.model)
            found = [door for cls in DOORS for door in cls.discover(self, groups, self.doors)]
            order = {group.name: i for i, group in enumerate(groups)}
            found.sort(key=lambda door: order.get(door.name, len(order)))  # stable: model-wide last
            self.doors = {door.name: door for door in found}

    @property
    def attention(self) -> AttentionDoor | None:
        """The model's attention row (Transformers' attention interface), or None."""
        door = self.doors.get(ATTENTION)
        return door if isinstance(door, AttentionDoor) else None

    @property
    def experts(self) -> ExpertsDoor | None:
        """The model's MoE experts row (Transformers' experts interface), or None."""
        door = self.doors.get(EXPERTS)
        return door if isinstance(door, ExpertsDoor) else None

    @property
    def groups(self) -> dict[str, LayerGroup]:
        """Every kernel layer group, by name."""
        return {name: door.group for name, door in self.doors.items()}

    def module(self, path: str) -> nn.Module:
        return self._modules[path]

    def sample(self, name: str, path: str) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """One real call of `path` for a probe's trial, or None when there is none to try."""
        if self.samples is None:
            return None
        try:
            return self.samples(name, path)
        except Exception:  # a capture that cannot run leaves the probe unsettled, not broken
            return None

    def long_sample(self, name: str, path: str) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The call of `path` at the longer trial length, or None."""
        return _quietly(lambda: self.long_samples(name, path) if self.long_samples else None)

    def model_inputs(self) -> dict[str, Any] | None:
        """The capture's model call, for a trial of the whole model, or None."""
        return _quietly(lambda: self.model_call() if self.model_call else None)

    def trial_tokens(self) -> int | None:
        """The capture's length in tokens, or None."""
        return _quietly(lambda: self.tokens() if self.tokens else None)

    # -- choosing what to switch ------------------------------------------------------------------

    def group(self, name: str) -> LayerGroup:
        """The layer group `name`, or a clear error naming the ones this model has."""
        try:
            return self.groups[name]
        except KeyError:
            have = ", ".join(self.groups) or "none"
            hint = _did_you_mean(name, self.groups)
            raise KernelExplorerError(
                f"The model has no kernel layer {name!r}.{hint} Its kernel layers: {have}."
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

    # -- switching -----------------------------------------------------------------------------

    @_announced
    def on(
        self,
        name: str,
        instances: str | list[str] | tuple[str, ...] | None = None,
        *,
        mode: str | Mode = "inference",
        candidate: str | Candidate | None = None,
        allow_changes: bool = False,
    ) -> list[RunningNow]:
        """Switch `name` to a kernel on all or some instances; returns what each one runs now.

        `candidate`: a label, a source word ("bundled", "peer", ...) or a `Candidate`; None: the first
        that can run here. `allow_changes`: switch a kernel that changes its module even when the
        original weights it keeps exceed the memory share the door allows.
        """
        paths = self.select(name, instances)
        with self._changing():
            self.doors[name].on(
                paths, mode=parse_mode(mode), candidate=candidate, allow_changes=allow_changes
            )
            return self.running(name, paths)

    @_announced
    def kernel_raised(self, name: str, path: str, chosen: Candidate, error: Exception) -> None:
        """A kernel raised on a forward: its door puts PyTorch back (the call is answered by PyTorch)."""
        with self._changing():
            reason = self.doors[name].kernel_raised(path, chosen, error)
        if self.strict:
            raise KernelSwitchError(reason) from error

    @_announced
    def off(self, name: str, instances: str | list[str] | tuple[str, ...] | None = None) -> list[RunningNow]:
        """Switch `name` back to PyTorch on all or some instances."""
        paths = self.select(name, instances)
        with self._changing():
            self.doors[name].off(paths)
            return self.running(name, paths)

    @_announced
    def reset(self) -> None:
        """Every layer back to PyTorch."""
        with self._changing():
            for door in self.doors.values():
                door.off(list(door.group.instances))

    def subscribe(self, observer: Callable[[], None]) -> Callable[[], None]:
        """Call `observer()` after any change of this model's switches (from any switchboard)."""
        return events.subscribe(self.model, observer)

    def snapshot(self) -> SwitchState:
        """The switches that are on, to hand back to `restore`."""
        with self.lock:
            state: SwitchState = {}
            for door in self.doors.values():
                state.update(door.snapshot())
            return state

    @_announced
    def restore(self, state: SwitchState) -> None:
        """Return to a `snapshot`: instances on there are switched on with the same candidate and mode."""
        with self.lock:
            now = self.snapshot()
            for name, path in now:
                if state.get((name, path)) != now[(name, path)]:
                    self.off(name, None if self.doors[name].model_wide else [path])
            now = self.snapshot()
            for (name, path), (chosen, mode) in state.items():
                door = self.doors.get(name)
                if door is None or (name, path) in now:  # (a retracted one is gone)
                    continue
                if door.model_wide or path in door.group.instances:
                    self.on(name, None if door.model_wide else [path], mode=mode, candidate=chosen)

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
        """(what the instance runs now, PyTorch's forward on the original state, whether the former
        is a kernel).

        Read under the lock at each measurement sample, so a switch made mid-run shows in the
        next sample.
        """
        with self.lock:
            return self.doors[name].forwards(path)

    # -- reporting -----------------------------------------------------------------------------

    def running(self, name: str | None = None, paths: list[str] | None = None) -> list[RunningNow]:
        """What each instance runs now, read from the model's forwards (not from our records)."""
        names = [name] if name is not None else list(self.doors)
        found: list[RunningNow] = []
        with self.lock:
            for layer in names:
                group = self.group(layer)
                chosen = paths if paths is not None and name is not None else list(group.instances)
                found += self.doors[layer].running(chosen)
        return found


def _quietly(read: Callable[[], Any]) -> Any:
    """`read()`, or None when it raises: a capture that cannot run leaves a trial unsettled, not broken."""
    try:
        return read()
    except Exception:
        return None


def _did_you_mean(word: str, names: Iterable[str]) -> str:
    """' Did you mean X?' for the layer name nearest to a mistyped one (case aside: 'rmsnorm',
    'RMSnorm' and 'RMSNorms' all mean RMSNorm), or ''."""
    by_lower = {name.lower(): name for name in names}
    near = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" Did you mean {by_lower[near[0]]!r}?" if near else ""
