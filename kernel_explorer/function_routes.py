"""Per-instance switching for kernel functions that a whole process shares.

`use_kernelized_func` attaches a function layer (for example Transformers' `apply_rotary_pos_emb`)
to every attention module, but it is ONE module object, the same one the model's code calls by
its global name. `kernelize` sets `forward` on that shared object, so switching it is process-wide:
every attention module of every model follows.

To switch one holder alone, the holder gets its own copy of the function module (which `kernelize`
switches like any layer), and the shared object gets a small router as its forward: while a holder
that has a copy runs (tracked per thread by forward hooks), calls go to that copy; otherwise to the
forward the shared object had before. Detaching the last copy removes the router and the hooks,
leaving the shared object exactly as it was.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.functions import kernel_functions

if TYPE_CHECKING:
    from torch import nn
    from torch.utils.hooks import RemovableHandle

_lock = threading.RLock()
_running = threading.local()  # .holders: stack of holder modules running on this thread
# shared function module -> {holder: its copy}
_copies: weakref.WeakKeyDictionary[nn.Module, weakref.WeakKeyDictionary[nn.Module, nn.Module]] = (
    weakref.WeakKeyDictionary()
)
_hooks: dict[int, tuple[RemovableHandle, RemovableHandle]] = {}


class _Router:
    """Forward of a shared function module while some holders have their own copy.

    Holders without a copy get what the shared module ran before the router came: its class
    forward, or a forward someone else installed (for example Transformers' `set_use_kernels`).
    """

    def __init__(self, shared: nn.Module) -> None:
        self._shared = weakref.ref(shared)
        self.previous = shared.__dict__.get("forward")
        self._original = type(shared).forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        shared = self._shared()
        stack = getattr(_running, "holders", None)
        if stack and shared is not None:
            copies = _copies.get(shared)
            copy = copies.get(stack[-1]) if copies is not None else None
            if copy is not None:
                return copy.forward(*args, **kwargs)
        if self.previous is not None:
            return self.previous(*args, **kwargs)
        return self._original(shared, *args, **kwargs)


def _enter(holder: nn.Module, args: Any) -> None:
    stack = getattr(_running, "holders", None)
    if stack is None:
        stack = _running.holders = []
    stack.append(holder)


def _leave(holder: nn.Module, args: Any, output: Any) -> None:
    stack = getattr(_running, "holders", None)
    if stack:
        stack.pop()


def shared_function(holder: nn.Module, key: str) -> nn.Module:
    """The process-wide function module behind the holder's function layer `key`."""
    current = kernel_functions(holder)[key]
    return getattr(current, "_kernel_explorer_shared", current)


def copy_for(holder: nn.Module, key: str) -> nn.Module:
    """The holder's own copy of function `key`, attached (and routed to) on first use."""
    with _lock:
        current = kernel_functions(holder)[key]
        if getattr(current, "_kernel_explorer_shared", None) is not None:
            return current
        shared = current
        copy = type(shared)()
        object.__setattr__(copy, "_kernel_explorer_shared", shared)  # plain attribute, not a submodule
        kernel_functions(holder)[key] = copy
        _copies.setdefault(shared, weakref.WeakKeyDictionary())[holder] = copy
        if not isinstance(shared.__dict__.get("forward"), _Router):
            shared.forward = _Router(shared)
        if id(holder) not in _hooks:
            _hooks[id(holder)] = (
                holder.register_forward_pre_hook(_enter),
                holder.register_forward_hook(_leave, always_call=True),
            )
        return copy


def detach(holder: nn.Module, key: str) -> None:
    """Give the holder back the shared function; remove the router when no copy is left."""
    with _lock:
        current = kernel_functions(holder)[key]
        shared = getattr(current, "_kernel_explorer_shared", None)
        if shared is None:
            return
        kernel_functions(holder)[key] = shared
        copies = _copies.get(shared)
        if copies is not None:
            copies.pop(holder, None)
        still_routed = any(
            getattr(f, "_kernel_explorer_shared", None) is not None for f in kernel_functions(holder).values()
        )
        if not still_routed and id(holder) in _hooks:
            for handle in _hooks.pop(id(holder)):
                handle.remove()
        if not copies:
            _copies.pop(shared, None)
            router = shared.__dict__.get("forward")
            if isinstance(router, _Router):
                if router.previous is None:
                    del shared.__dict__["forward"]
                else:
                    shared.forward = router.previous


def is_routed(shared: nn.Module) -> bool:
    """Whether `shared` currently routes calls to per-holder copies."""
    return isinstance(shared.__dict__.get("forward"), _Router)


def stand_in(shared: nn.Module) -> nn.Module | None:
    """For reporting: a module whose forward is what holders without a copy run, or None (PyTorch)."""
    router = shared.__dict__.get("forward")
    previous = getattr(router, "previous", None)
    if previous is None:
        return None
    probe = type(shared)()
    probe.forward = previous
    return probe
