"""What a stranger's kernel does besides its output: checked around each trial call, never assumed.

A kernel runs in the user's own session. One that calls `torch.set_num_threads(1)`,
`torch.set_default_dtype(torch.float64)` or `torch.manual_seed(0)` in its forward changes every
later computation of the notebook; one that writes into its input hides the change from a trial
that then runs PyTorch on the same tensors; one that returns bfloat16 for float32 input breaks the
next layer outside any fallback; one that keeps every input it sees grows the process by its
inputs' size at each forward. None of that shows in the values of one call.

So the trial records the session's state before and after each call (`session_state`,
`state_changes`) and puts it back exactly (`preserved_session`), compares every input with a copy
taken before the call (`inputs_copy`, `input_changes`), checks the output's dtype and device against
PyTorch's (`output_changes`), and repeats the call on fresh copies of the inputs to see memory
that stays (`kept_per_call`). Each finding is one short phrase a row shows ("changes its input in
place", "sets torch's thread count to 1"). Pure functions of torch's public state: no door, no
catalog, so a trial run anywhere (this process or a worker) calls them the same way.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: how many calls the memory check makes on fresh inputs (growth must show between each two)
MEMORY_REPEATS = 3


@dataclass(frozen=True)
class SessionState:
    """torch's process-wide settings a layer's forward could change (CPU side)."""

    threads: int
    interop_threads: int
    default_dtype: Any
    rng: Any  # torch.get_rng_state(): a uint8 tensor
    grad: bool
    deterministic: bool
    deterministic_warn_only: bool
    matmul_precision: str
    autocast: tuple[bool, Any, bool]  # CPU autocast: enabled, dtype, cache enabled


def session_state() -> SessionState:
    """The session's state now."""
    import torch

    return SessionState(
        threads=torch.get_num_threads(),
        interop_threads=torch.get_num_interop_threads(),
        default_dtype=torch.get_default_dtype(),
        rng=torch.get_rng_state(),
        grad=torch.is_grad_enabled(),
        deterministic=torch.are_deterministic_algorithms_enabled(),
        deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
        matmul_precision=torch.get_float32_matmul_precision(),
        autocast=(
            torch.is_autocast_enabled("cpu"),
            torch.get_autocast_dtype("cpu"),
            torch.is_autocast_cache_enabled(),
        ),
    )


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def state_changes(before: SessionState, after: SessionState) -> list[str]:
    """One phrase per setting that differs ("sets torch's thread count to 1"); [] when none does."""
    import torch

    found = []
    if after.threads != before.threads:
        found.append(f"sets torch's thread count to {after.threads}")
    if after.interop_threads != before.interop_threads:
        found.append(f"sets torch's inter-op thread count to {after.interop_threads}")
    if after.default_dtype != before.default_dtype:
        found.append(f"sets torch's default dtype to {_name(after.default_dtype)}")
    if not torch.equal(after.rng, before.rng):
        found.append("changes torch's random number state (seeds or draws from it)")
    if after.grad != before.grad:
        found.append(f"turns gradients {'on' if after.grad else 'off'}")
    if (after.deterministic, after.deterministic_warn_only) != (
        before.deterministic,
        before.deterministic_warn_only,
    ):
        found.append(f"turns deterministic algorithms {'on' if after.deterministic else 'off'}")
    if after.matmul_precision != before.matmul_precision:
        found.append(f"sets float32 matmul precision to {after.matmul_precision!r}")
    if after.autocast != before.autocast:
        enabled, dtype, _ = after.autocast
        found.append(f"turns CPU autocast on ({_name(dtype)})" if enabled else "changes CPU autocast")
    return found


def restore_session(state: SessionState) -> None:
    """Put `state` back, each setting only where it differs (the inter-op count cannot always be
    set again once used: then it stays, and the finding says so)."""
    import torch

    now = session_state()
    if now.threads != state.threads:
        torch.set_num_threads(state.threads)
    if now.interop_threads != state.interop_threads:
        with contextlib.suppress(RuntimeError):  # torch allows it once, before any inter-op work
            torch.set_num_interop_threads(state.interop_threads)
    if now.default_dtype != state.default_dtype:
        torch.set_default_dtype(state.default_dtype)
    if not torch.equal(now.rng, state.rng):
        torch.set_rng_state(state.rng)
    if now.grad != state.grad:
        torch.set_grad_enabled(state.grad)
    wanted = (state.deterministic, state.deterministic_warn_only)
    if (now.deterministic, now.deterministic_warn_only) != wanted:
        torch.use_deterministic_algorithms(state.deterministic, warn_only=state.deterministic_warn_only)
    if now.matmul_precision != state.matmul_precision:
        torch.set_float32_matmul_precision(state.matmul_precision)
    if now.autocast != state.autocast:
        enabled, dtype, cache = state.autocast
        torch.set_autocast_enabled("cpu", enabled)
        torch.set_autocast_dtype("cpu", dtype)
        torch.set_autocast_cache_enabled(cache)


@contextlib.contextmanager
def preserved_session() -> Iterator[list[str]]:
    """The block's changes to the session, as phrases appended to the yielded list at its end; the
    session's state is put back exactly after the block (also when it raises)."""
    before = session_state()
    found: list[str] = []
    try:
        yield found
    finally:
        found.extend(state_changes(before, session_state()))
        restore_session(before)


# -- inputs and outputs ---------------------------------------------------------------------------


def _tensors(value: Any) -> list[torch.Tensor]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [leaf for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def inputs_copy(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Fresh copies of a call's inputs (non-tensors as they are): what a trial hands the kernel, so
    that PyTorch's side runs on the pristine originals whatever the kernel writes into its own."""
    import torch
    from torch.utils._pytree import tree_map

    def copied(value: Any) -> Any:
        return value.detach().clone() if isinstance(value, torch.Tensor) else value

    return tree_map(copied, (args, kwargs))


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes, so NaN compares equal to the same NaN."""
    import torch

    flat = tensor.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else flat


def input_changes(given: Any, pristine: Any) -> list[str]:
    """["changes its input in place"] when a tensor the kernel was given differs from its copy."""
    import torch

    for got, want in zip(_tensors(given), _tensors(pristine), strict=False):
        if got.shape != want.shape or got.dtype != want.dtype or not torch.equal(_bits(got), _bits(want)):
            return ["changes its input in place"]
    return []


def output_changes(output: Any, expected: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """Where the kernel's output is not PyTorch's in dtype or device ("returns bfloat16 for float32
    input"): the next layer would meet a tensor it was not written for, outside any fallback."""
    got, want = _tensors(output)[:1], _tensors(expected)[:1]
    if not got or not want:
        return []
    found = []
    if got[0].dtype != want[0].dtype:
        floats = [t.dtype for t in _tensors((args, kwargs)) if t.is_floating_point()]
        if floats and floats[0] == want[0].dtype:
            found.append(f"returns {_name(got[0].dtype)} for {_name(floats[0])} input")
        else:
            found.append(f"returns {_name(got[0].dtype)} where PyTorch returns {_name(want[0].dtype)}")
    if got[0].device != want[0].device:
        found.append(f"returns its output on {got[0].device} where PyTorch's is on {want[0].device}")
    return found


# -- memory that stays ----------------------------------------------------------------------------


def _alive_bytes(tracked: list[weakref.ref[Any]]) -> int:
    """Bytes of the distinct storages of the tracked tensors still alive."""
    seen: dict[int, int] = {}
    for ref in tracked:
        tensor = ref()
        if tensor is None:
            continue
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _tracking(tracked: list[weakref.ref[Any]]) -> contextlib.AbstractContextManager[Any]:
    """A dispatch mode that keeps a weak reference to every tensor an op makes during the block (a
    kernel's intermediates, which it may keep), or nothing where torch offers no such mode."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:  # pragma: no cover - every torch this project supports has it
        return contextlib.nullcontext()

    class Track(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            for tensor in _tensors(out):
                with contextlib.suppress(TypeError):
                    tracked.append(weakref.ref(tensor))
            return out

    return Track()


def kept_per_call(call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Bytes a kernel keeps alive after every call (0: none, or not every call).

    `call` runs `MEMORY_REPEATS` times, each on fresh copies of the inputs; the inputs, the outputs
    and every tensor an op made during the calls are watched weakly. What is still alive once the
    trial dropped its own references is kept by the kernel; memory that grows after each call (not
    a workspace made once) is what a forward of the model would keep growing."""
    import torch

    tracked: list[weakref.ref[Any]] = []
    alive = []
    # what existed before the calls cannot hold what they made: frozen, a collection scans only the
    # calls' own objects (a full one walks a loaded Transformers session's millions of objects)
    gc.freeze()
    try:
        for _ in range(MEMORY_REPEATS):
            call_args, call_kwargs = inputs_copy(args, kwargs)
            tracked += [weakref.ref(t) for t in _tensors((call_args, call_kwargs))]
            with torch.no_grad(), _tracking(tracked):
                output = call(*call_args, **call_kwargs)
            tracked += [weakref.ref(t) for t in _tensors(output)]
            del output, call_args, call_kwargs
            gc.collect()
            alive.append(_alive_bytes(tracked))
    finally:
        gc.unfreeze()
    steps = [b - a for a, b in itertools.pairwise(alive)]
    return min(steps) if steps and min(steps) > 0 else 0


def kept_phrase(per_call: int) -> list[str]:
    """["keeps 22 MB more after every call"] (KB below a megabyte), or []."""
    if per_call <= 0:
        return []
    size = f"{per_call / 2**20:.0f} MB" if per_call >= 2**20 else f"{max(per_call / 2**10, 1):.0f} KB"
    return [f"keeps {size} more after every call"]


# -- one checked trial call -----------------------------------------------------------------------


@dataclass(frozen=True)
class CheckedCall:
    """A trial call's outputs and what the checks around it found."""

    output: Any  # the kernel's
    expected: Any  # PyTorch's, on the pristine inputs
    side_effects: tuple[str, ...]  # changes to the session or the input, memory kept per call
    mismatch: tuple[str, ...]  # an output dtype or device other than PyTorch's (cannot run here)


def checked_call(
    kernel: Callable[..., Any],
    pytorch: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    memory: bool = True,
) -> CheckedCall:
    """`kernel` on copies of the inputs, then `pytorch` on the originals, each under `no_grad`, with
    the session's state recorded around the kernel and put back; the memory check repeats the
    kernel's call (`memory`). A kernel's exception propagates: the caller's verdict says it."""
    import torch

    given_args, given_kwargs = inputs_copy(args, kwargs)
    pristine = inputs_copy(args, kwargs)
    with preserved_session() as changed, torch.no_grad():
        output = kernel(*given_args, **given_kwargs)
    found = list(dict.fromkeys(changed)) + input_changes((given_args, given_kwargs), pristine)
    with torch.no_grad():
        expected = pytorch(*args, **kwargs)
    if memory:
        with preserved_session(), contextlib.suppress(Exception):  # a repeat that raises: not this check's
            found += kept_phrase(kept_per_call(kernel, args, kwargs))
    return CheckedCall(output, expected, tuple(found), tuple(output_changes(output, expected, args, kwargs)))
