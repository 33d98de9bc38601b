"""Tell every view of a model when its switches change, whoever changed them.

Views (the dashboard's layer table, ...) subscribe per model, not per switchboard: a switch made
from Python, a magic, a widget, a measurement or a second explorer on the same model reaches them
all. One notification per outermost change: `restore` switching 60 instances one by one notifies
once, when it is done. Callbacks run on the thread that switched, after the change; an exception
in one is kept (`errors(model)`) and never undoes or blocks the switch.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from kernel_explorer.switching import model_state

if TYPE_CHECKING:
    from torch import nn

Observer = Callable[[], None]

_depth = threading.local()  # how deep in nested changes this thread is (not per model: per call)


def subscribe(model: nn.Module, observer: Observer) -> Callable[[], None]:
    """Call `observer()` after every change of `model`'s switches; returns the unsubscribe function."""
    state = model_state.of(model)
    with state.lock:
        state.observers.append(observer)

    def unsubscribe() -> None:
        with state.lock:
            if observer in state.observers:
                state.observers.remove(observer)

    return unsubscribe


def errors(model: nn.Module) -> list[BaseException]:
    """The exceptions observers of `model` raised (kept, never raised into the switch)."""
    return model_state.of(model).errors


@contextlib.contextmanager
def changing(model: nn.Module) -> Iterator[None]:
    """Wrap a change of `model`'s switches; observers hear of it once the outermost change ends."""
    depth = getattr(_depth, "value", 0)
    _depth.value = depth + 1
    try:
        yield
    finally:
        _depth.value = depth
        if depth == 0:
            state = model_state.of(model)
            with state.lock:
                observers = list(state.observers)
            for observer in observers:
                try:
                    observer()
                except Exception as error:
                    state.errors.append(error)
