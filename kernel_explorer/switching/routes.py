"""Per-instance switching for kernel functions that a whole process shares.

`use_kernelized_func` attaches a function layer (for example Transformers' `apply_rotary_pos_emb`)
to every attention module, but it is ONE module object, the same one the model's code calls by
its global name. `kernelize` sets `forward` on that shared object, so switching it is process-wide:
every attention module of every model follows.

To switch one holder alone, the holder gets its own copy of the function module (which `kernelize`
switches like any layer), and the shared object gets a small router as its forward: while a holder
that has a copy runs (tracked per thread by forward hooks), calls go to that copy; otherwise to the
forward the shared object had before. Detaching the last copy removes the router and the hooks,
leaving the shared object exactly as it was. The copies and hooks live on the router itself (which
lives on the shared object), so no table outside the objects involved keeps them.

kernels 0.18+ gives every holder a private instance of the function module already, and routes
the global name to the running holder's: there the holder's own instance is switched directly,
with no copy and no router (`owns_function`).

A model dropped with copies still attached (a notebook cell run again, without switching off) takes
its copies with it (the router holds its holders weakly); the router then has nothing to route and
takes itself off at its next call, so the process's function is as it was built again.

What a call reads is plain: the running holder's own table of function layers (where its copy
sits, `kernel_functions`) and the router's count of live holders. torch.compile traces the router
and guards on what it read; a guard on a weak dictionary's keys (indexed by position) broke when
the collector dropped a dead model's entry while Dynamo was building the guards ("IndexError: list
index out of range").
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.function_layers import kernel_functions, owns_function
from kernel_explorer._backend.layer_forwards import (
    installed_forward,
    remove_forward,
    set_forward,
)

if TYPE_CHECKING:
    from torch import nn
    from torch.utils.hooks import RemovableHandle

_lock = threading.RLock()
_running = threading.local()  # .holders: stack of holder modules running on this thread
_SHARED = "_kernel_explorer_shared"  # on a copy: the shared module it stands in for


class _Router:
    """Forward of a shared function module while some holders have their own copy.

    Holders without a copy get what the shared module ran before the router came: its class
    forward, or a forward someone else installed (for example Transformers' `set_use_kernels`).
    """

    def __init__(self, shared: nn.Module) -> None:
        self._shared = weakref.ref(shared)
        self.previous = installed_forward(shared)
        self._original = type(shared).forward
        self.key: str | None = None  # where holders keep `shared` among their function layers
        # holder -> the hooks that tell the router it runs and the holder's finalizer, weakly:
        # bookkeeping, never read by a call
        self.copies: weakref.WeakKeyDictionary[
            nn.Module, tuple[tuple[RemovableHandle, ...], weakref.finalize]
        ] = weakref.WeakKeyDictionary()
        self.live = 0  # holders with a copy not yet detached nor collected: what a call reads

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        shared = self._shared()
        if shared is not None and not self.live:  # every holder with a copy was collected
            _retire(shared, self)
        stack = getattr(_running, "holders", None)
        if stack and shared is not None and self.key is not None:
            own = kernel_functions(stack[-1]).get(self.key)
            if own is not None and getattr(own, _SHARED, None) is shared:  # the running holder's copy
                return own.forward(*args, **kwargs)
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
    return getattr(current, _SHARED, current)


def copy_for(holder: nn.Module, key: str) -> nn.Module:
    """The holder's own copy of function `key`, attached (and routed to) on first use; the
    holder's private instance itself where kernels gives it one."""
    with _lock:
        current = kernel_functions(holder)[key]
        if getattr(current, _SHARED, None) is not None or owns_function(holder, key):
            return current
        shared = current
        copy = type(shared)()
        object.__setattr__(copy, _SHARED, shared)  # plain attribute, not a submodule
        kernel_functions(holder)[key] = copy
        router = installed_forward(shared)
        if not isinstance(router, _Router):
            router = _Router(shared)
            set_forward(shared, router)
        hooks = (
            holder.register_forward_pre_hook(_enter),
            holder.register_forward_hook(_leave, always_call=True),
        )
        router.key = key
        # a holder collected with its copy attached is counted out (the finalizer holds neither)
        gone = weakref.finalize(holder, _collected, weakref.ref(router))
        router.copies[holder] = (hooks, gone)
        router.live += 1
        return copy


def detach(holder: nn.Module, key: str) -> None:
    """Give the holder back the shared function; remove the router when no copy is left."""
    with _lock:
        current = kernel_functions(holder)[key]
        shared = getattr(current, _SHARED, None)
        if shared is None:
            if owns_function(holder, key):  # its private instance back on the class forward
                remove_forward(current)
            return
        kernel_functions(holder)[key] = shared
        router = installed_forward(shared)
        if not isinstance(router, _Router):
            return
        hooks, gone = router.copies.pop(holder, ((), None))
        for handle in hooks:
            handle.remove()
        if gone is not None and gone.detach() is not None:
            router.live -= 1
        if not router.live:
            _retire(shared, router)


def _collected(router_ref: weakref.ref[_Router]) -> None:
    """A holder was collected with its copy still attached: its router counts it out."""
    router = router_ref()
    if router is not None:
        with _lock:
            router.live -= 1


def _retire(shared: nn.Module, router: _Router) -> None:
    """Give `shared` back the forward it had before `router` came (nothing of ours stays)."""
    with _lock:
        if installed_forward(shared) is not router:
            return
        if router.previous is None:
            remove_forward(shared)
        else:
            set_forward(shared, router.previous)


def is_routed(shared: nn.Module) -> bool:
    """Whether `shared` currently routes calls to per-holder copies."""
    return isinstance(installed_forward(shared), _Router)


def stand_in(shared: nn.Module) -> nn.Module | None:
    """For reporting: a module whose forward is what holders without a copy run, or None (PyTorch)."""
    previous = getattr(installed_forward(shared), "previous", None)
    if previous is None:
        return None
    probe = type(shared)()
    set_forward(probe, previous)
    return probe
