"""The door protocol: one interface for every way a kernel enters a model.

A kernel enters a Transformers model by one of five doors: a layer's forward replaced by
`kernelize` (`module_door.ModuleDoor`), a function layer the model attaches to its modules
(`function_door.FunctionDoor`), the attention implementation Transformers looks up at each call
(`attention_door.AttentionDoor`, model-wide), the MoE experts implementation it looks up the same
way (`experts_door.ExpertsDoor`, model-wide), and a class the model does not mark, named by
`Explorer.extend` (`module_door.ExtensionDoor`). Each door knows how its kernels go in and out; the
switchboard keeps what is the same for all (choosing instances, the lock, snapshot/restore/holding,
events) and asks the door, never which kind of door it is.

Every door keeps the explorer's promises in its own way: it probes a candidate on the model as it
is before calling it usable, answers a forward whose kernel raises with PyTorch and stays there
with the reason, and leaves a module exactly as it found it when switched off.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from kernels import Mode
    from torch import nn

    from kernel_explorer.catalog.availability import Availability
    from kernel_explorer.catalog.candidates import Candidate, Catalog
    from kernel_explorer.inspect.layer_groups import LayerGroup
    from kernel_explorer.inspect.running import RunningNow
    from kernel_explorer.switching.exported import DoorExport

#: the switches that are on: (layer name, instance path) -> (candidate, mode)
SwitchState = dict[tuple[str, str], tuple[Any, Any]]
#: hands one call's (args, kwargs) to a capture, keyed by (layer name, instance path)
Keep = Callable[[tuple[str, str], tuple[Any, ...], dict[str, Any]], None]


class DoorHost(Protocol):
    """What a door needs from whoever holds it (the board implements it).

    A door never names the board: it reaches the model, the catalog, where kernels run and the
    captured samples through these few members, so the board can import every door and no door
    imports the board.
    """

    model: nn.Module
    catalog: Catalog
    device: str
    strict: bool
    trial_timeout: float | None  # seconds a stranger's trial may take in the worker (None: the default)

    def module(self, path: str) -> nn.Module:
        """The model's submodule at `path`."""
        ...

    def sample(self, name: str, path: str) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """One real call of instance `path` of layer `name` for a probe's trial, or None."""

    def long_sample(self, name: str, path: str) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The same call at the longer trial length (`switching/trial_inputs.py`), or None."""

    def model_inputs(self) -> dict[str, Any] | None:
        """The capture's model call (keywords), for a trial of the whole model, or None."""

    def trial_tokens(self) -> int | None:
        """The capture's length in tokens (verdicts are cached per its bucket), or None."""

    def kernel_raised(self, name: str, path: str, chosen: Candidate, error: Exception) -> None:
        """A kernel raised on a forward: the door's layer goes back to PyTorch with the reason."""


@contextlib.contextmanager
def hooks_for_the_block(handles: list[Any]) -> Iterator[None]:
    """The forward hooks in `handles` last for the block (removed also when it raises)."""
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class Door(ABC):
    """How kernels enter and leave one kernel layer group of one model.

    Callers hold the switchboard's lock around every method that changes or reads the model.
    """

    kind: ClassVar[str]  # "module", "function", "attention", "experts": the inventory's kind column
    #: whether one switch serves every instance (attention): snapshots keep it as (name, "*")
    model_wide: ClassVar[bool] = False

    def __init__(self, host: DoorHost, group: LayerGroup) -> None:
        self.host = host
        self.group = group

    @property
    def name(self) -> str:
        return self.group.name

    # -- finding ------------------------------------------------------------------------------------

    @classmethod
    @abstractmethod
    def discover(cls, host: DoorHost, groups: Sequence[LayerGroup], known: Mapping[str, Door]) -> list[Door]:
        """The doors of this class on the host's model: one per layer group of `groups` it serves, or
        its model-wide one. A door of this class in `known` for the same row is kept (with what it
        knows of its switches), its group brought up to date."""

    # -- switching ---------------------------------------------------------------------------------

    @abstractmethod
    def on(self, paths: list[str], *, mode: Mode, candidate: Any, allow_changes: bool = False) -> None:
        """Switch `paths` to `candidate` (None: the first that can run here). Failures leave PyTorch
        with the reason kept; raise `KernelSwitchError`/`NoUsableKernelError` only in strict mode."""

    @abstractmethod
    def off(self, paths: list[str]) -> None:
        """Back to PyTorch, exactly as the module was before the kernel came."""

    @abstractmethod
    def kernel_raised(self, path: str, chosen: Candidate, error: Exception) -> str:
        """A kernel raised on a forward of `path`: back to PyTorch (the door says how far); the reason."""

    @abstractmethod
    def snapshot(self) -> SwitchState:
        """The switches this door has on (what `restore` hands back to `on`)."""

    # -- reading -----------------------------------------------------------------------------------

    @abstractmethod
    def running(self, paths: list[str]) -> list[RunningNow]:
        """What each instance runs now, read from the model (not from the door's records)."""

    @abstractmethod
    def forwards(self, path: str) -> tuple[Any, Any, bool]:
        """(what `path` runs now, PyTorch's forward on the original state, whether the former is a
        kernel): the two sides a measurement times and compares."""

    @abstractmethod
    def found(self, *, mode: Mode, query_hub: bool = False) -> tuple[tuple[Candidate, Availability], ...]:
        """This layer's candidates and where each stands here, probed on this model."""

    def candidates(self) -> list[Candidate]:
        """Every candidate of this layer, in preference order (not probed: a list for an error)."""
        return self.host.catalog.candidates(self.name)

    def matching(self, word: str) -> list[Candidate]:
        """The candidates a user's word names ("bundled", a label, the repository's name,
        "bundled@avx2"): what `compare`'s `candidates=` reads. A word naming none, or several
        repositories, is one line listing the names that work here."""
        catalog, device = self.host.catalog, self.host.device
        found = catalog.matching(self.name, word, device)
        if not found:
            raise catalog.no_match(self.name, word, device)
        return found

    def capturing(self, keep: Keep) -> contextlib.AbstractContextManager[None]:
        """For the block, hand each call's inputs of this door's instances to `keep`."""
        return contextlib.nullcontext()

    def timed_modules(self) -> list[tuple[nn.Module, str]]:
        """(module, category) the time breakdown hooks to time this layer."""
        return []

    def covered_paths(self) -> set[str]:
        """Module paths whose whole forward this door can replace (the inventory counts the rest)."""
        return set()

    # -- exporting ---------------------------------------------------------------------------------

    @abstractmethod
    def export(self) -> DoorExport:
        """What this door runs now, as data an exported module is written from (`switching/exported.py`),
        with what a `kernels` mapping cannot say about it. Read under the board's lock."""
