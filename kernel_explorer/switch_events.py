"""Tell every view of a model when its switches change, whoever changed them.

Views (the dashboard's layer table, ...) subscribe per model, not per switchboard: a switch made
from Python, a magic, a widget, a measurement or a second explorer on the same model reaches them
all. One notification per outermost change: `restore` switching 60 instances one by one notifies
once, when it is done. Callbacks run on the thread that switched, after the change; an exception
in one is kept (`errors`) and never undoes or blocks the switch.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

Observer = Callable[[], None]

_lock = threading.Lock()
_observers: weakref.WeakKeyDictionary[nn.Module, list[Observer]] = weakref.WeakKeyDictionary()
_depth = threading.local()
errors: list[BaseException] = []


def subscribe(model: nn.Module, observer: Observer) -> Callable[[], None]:
    """Call `observer()` after every change of `model`'s switches; returns the unsubscribe function."""
    with _lock:
        _observers.setdefault(model, []).append(observer)

    def unsubscribe() -> None:
        with _lock:
            found = _observers.get(model, [])
            if observer in found:
                found.remove(observer)

    return unsubscribe


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
            with _lock:
                observers = list(_observers.get(model, []))
            for observer in observers:
                try:
                    observer()
                except Exception as error:
                    errors.append(error)
