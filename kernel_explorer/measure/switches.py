"""What a measurement needs from the switches of a model: a Protocol the switchboard satisfies.

A measurement switches kernels on for its side of a pair, reads what each instance runs, times the
forward each side runs, and holds the board's lock around each call so a switch never lands in the
middle of one. It needs those few members, not the switchboard's module: naming them here lets
`measure` stand beside `switching` instead of on top of it (`switching.board.Switchboard` is the
one implementation; a test may hand in any object with these members).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from torch import nn

    from kernel_explorer.catalog.candidates import Candidate
    from kernel_explorer.inspect.layer_groups import LayerGroup
    from kernel_explorer.inspect.running import RunningNow

#: the switches that are on: (layer name, instance path) -> (candidate, mode)
SwitchState = dict[tuple[str, str], tuple[Any, Any]]
#: hands one call's (args, kwargs) to a capture, keyed by (layer name, instance path)
Keep = Callable[[tuple[str, str], tuple[Any, ...], dict[str, Any]], None]
#: instance paths or glob patterns; None: every instance
Instances = str | list[str] | tuple[str, ...] | None


class Lock(Protocol):
    """The board's re-entrant lock, as a context manager and by hand (around each layer's call)."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...

    def release(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Any: ...


class DoorView(Protocol):
    """What a measurement asks of one row's door: its candidates, its calls, its timed modules."""

    def candidates(self) -> list[Candidate]: ...

    def matching(self, word: str) -> list[Candidate]: ...

    def capturing(self, keep: Keep) -> contextlib.AbstractContextManager[None]: ...

    def timed_modules(self) -> list[tuple[nn.Module, str]]: ...


class Switches(Protocol):
    """The switches of one model, as a measurement drives them (`switching.board.Switchboard`)."""

    @property
    def model(self) -> nn.Module: ...

    @property
    def device(self) -> str: ...

    @property
    def lock(self) -> Lock: ...

    @property
    def changes(self) -> int:
        """How many times what the model runs has changed; read under `lock`."""
        ...

    @property
    def doors(self) -> Mapping[str, DoorView]: ...

    @property
    def groups(self) -> Mapping[str, LayerGroup]: ...

    def select(self, name: str, instances: Instances = None) -> list[str]: ...

    def on(
        self,
        name: str,
        instances: Instances = None,
        *,
        mode: Any = "inference",
        candidate: Any = None,
        allow_changes: bool = False,
    ) -> list[RunningNow]: ...

    def reset(self) -> None: ...

    def subscribe(self, observer: Callable[[], None]) -> Callable[[], None]: ...

    def snapshot(self) -> SwitchState: ...

    def holding(
        self, change: Callable[[], object] | None = None, *, keep_others: bool = False
    ) -> contextlib.AbstractContextManager[SwitchState]: ...

    def running(self, name: str | None = None, paths: list[str] | None = None) -> list[RunningNow]: ...

    def forwards(self, name: str, path: str) -> tuple[Any, Any, bool]: ...
