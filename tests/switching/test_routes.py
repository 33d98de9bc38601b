"""Per-holder copies of a process-wide kernel function, routed per thread; exact undo.

kernels 0.18+ gives every holder its own instance of the function module already: there a holder
is switched on that instance directly (no copy, no router), and the router's own tests skip.
"""

from __future__ import annotations

import threading

import pytest
import torch
from kernels import use_kernel_forward_from_hub, use_kernelized_func
from torch import nn

from kernel_explorer._backend.function_layers import owns_function
from kernel_explorer.switching import routes as function_routes


@use_kernel_forward_from_hub("scale")
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@use_kernelized_func(scale)
class Holder(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale(x)  # called by its global name, as Transformers does


# kernels 0.18+: each holder has a private instance (what the function door then switches)
PRIVATE = owns_function(Holder(), "scale")
routers_only = pytest.mark.skipif(PRIVATE, reason="this kernels gives each holder its own function module")


def _triple(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return x * 3


def test_one_holder_switches_alone_and_detach_restores() -> None:
    first, second = Holder(), Holder()
    own = first._kernel_funcs["scale"]  # as built: kernels 0.18+ its own, 0.17 the shared object
    copy = function_routes.copy_for(first, "scale")
    copy.forward = _triple.__get__(copy)
    one = torch.ones(1)
    assert first(one).item() == 3 and second(one).item() == 2
    assert function_routes.shared_function(first, "scale") is (own if PRIVATE else scale)
    function_routes.detach(first, "scale")
    assert first._kernel_funcs["scale"] is (own if PRIVATE else scale)
    assert "forward" not in own.__dict__ and "forward" not in scale.__dict__
    assert not first._forward_hooks and not first._forward_pre_hooks
    assert first(one).item() == 2


@routers_only
def test_a_forward_installed_before_is_kept_for_other_holders() -> None:
    first, second = Holder(), Holder()
    installed = _triple.__get__(scale)
    scale.forward = installed  # what a process-wide kernelize does
    try:
        function_routes.copy_for(first, "scale")  # first gets its own copy: class forward
        one = torch.ones(1)
        assert first(one).item() == 2 and second(one).item() == 3
        assert function_routes.stand_in(scale).forward is installed
        function_routes.detach(first, "scale")
        assert scale.__dict__["forward"] is installed
    finally:
        scale.__dict__.pop("forward", None)


def test_routing_is_per_thread() -> None:
    routed, plain = Holder(), Holder()
    copy = function_routes.copy_for(routed, "scale")
    copy.forward = _triple.__get__(copy)
    results: dict[str, list[float]] = {"routed": [], "plain": []}

    def run(name: str, holder: nn.Module) -> None:
        for _ in range(200):
            results[name].append(holder(torch.ones(1)).item())

    threads = [
        threading.Thread(target=run, args=("routed", routed)),
        threading.Thread(target=run, args=("plain", plain)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    function_routes.detach(routed, "scale")
    assert set(results["routed"]) == {3.0} and set(results["plain"]) == {2.0}


def test_compiled_holders_each_keep_their_own_route() -> None:
    """torch.compile caches one graph per code object and reuses it while its guards pass; the
    route each holder takes must be part of what those guards check, or a second holder would run
    the first one's kernel (compare_model's compiled sides depend on this)."""
    routed, plain, attached_off = Holder(), Holder(), Holder()
    copy = function_routes.copy_for(routed, "scale")
    copy.forward = _triple.__get__(copy)
    function_routes.copy_for(attached_off, "scale")  # a copy that runs the class forward
    one = torch.ones(1)
    try:
        for order in ((routed, plain, attached_off), (attached_off, plain, routed)):
            torch._dynamo.reset()
            results = {id(h): torch.compile(h, backend="eager")(one).item() for h in order}
            assert results == {id(routed): 3, id(plain): 2, id(attached_off): 2}, order
    finally:
        torch._dynamo.reset()
        function_routes.detach(routed, "scale")
        function_routes.detach(attached_off, "scale")


class _Untouchable:
    """Stands in for the router's bookkeeping: any read of it fails the test."""

    def __getattr__(self, name: str) -> None:
        raise AssertionError(f"a routed call read the router's holder table ({name})")

    def __len__(self) -> int:
        raise AssertionError("a routed call read the router's holder table (len)")


@routers_only
def test_a_routed_call_reads_no_weak_table() -> None:
    """torch.compile traces the router and guards on what it reads. A weak dictionary of holders
    was guarded by key position, and the collector dropping a dead model's entry while Dynamo built
    those guards raised IndexError (seen in compare_model(compiled=True) after other tests' models):
    a call reads the running holder's own table and an int, never the weak one."""
    from kernel_explorer._backend.layer_forwards import installed_forward

    routed, plain = Holder(), Holder()
    copy = function_routes.copy_for(routed, "scale")
    copy.forward = _triple.__get__(copy)
    shared = function_routes.shared_function(routed, "scale")
    router = installed_forward(shared)
    table, router.copies = router.copies, _Untouchable()
    one = torch.ones(1)
    try:
        torch._dynamo.reset()
        assert torch.compile(routed, backend="eager")(one).item() == 3
        assert torch.compile(plain, backend="eager")(one).item() == 2
        assert routed(one).item() == 3 and plain(one).item() == 2
    finally:
        router.copies = table
        torch._dynamo.reset()
        function_routes.detach(routed, "scale")
    assert not function_routes.is_routed(shared) and "_kernel_explorer_copies" not in routed.__dict__


@routers_only
def test_a_collected_holder_is_counted_out_and_the_router_retires() -> None:
    import gc

    holder, other = Holder(), Holder()
    function_routes.copy_for(holder, "scale")
    shared = function_routes.shared_function(holder, "scale")
    assert function_routes.is_routed(shared)
    del holder
    gc.collect()
    assert other(torch.ones(1)).item() == 2  # the router's next call finds no holder and retires
    assert not function_routes.is_routed(shared)
