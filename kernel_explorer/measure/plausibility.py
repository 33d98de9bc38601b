"""Results that deserve a second look before anyone believes them.

Four checks, each cheap and each a known way a kernel benchmark fools its author: a speedup far
above what memory-bound elementwise work allows (above 10x: a skipped computation, a cached
result, or an unusually slow eager path), an output that does not change when the input does
(the kernel returns something it computed earlier), a time shorter than copying the bytes
the op must read and write would take on this machine (the work did not happen, or not all of it),
and a median of per-pair speedups far from the ratio of the two sides' median times (the two
agree when pairs are alike; far apart, the pairs were taken while the machine changed state, and
the speedup describes those moments rather than the kernel).
"""

from __future__ import annotations

import contextlib
import functools
import time
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.stats import IMPLAUSIBLE_SPEEDUP
from kernel_explorer.measure.summary import format_number

if TYPE_CHECKING:
    import torch

    from kernel_explorer.measure.stats import Interval

COPY_MARGIN = 1.5  # faster than copying by more than this share is implausible, not noise
RATIO_DISAGREEMENT = 1.5  # median of per-pair speedups vs ratio of median times: apart by more is suspect


def _best_copy_seconds(copy: Any) -> float:
    """The best time of one `copy()`, over ten blocks of eight after a warm-up."""
    for _ in range(3):  # warm-up: pages faulted in, threads awake
        copy()
    best = float("inf")
    for _ in range(10):
        start = time.perf_counter()
        for _ in range(8):
            copy()
        best = min(best, (time.perf_counter() - start) / 8)
    return best


@functools.lru_cache(maxsize=32)
def _copy_bandwidth_bucket(power: int) -> float:
    """The faster of torch's copy (at torch's threads) and a single-threaded copy of the same bytes.

    Why both: on a loaded machine torch's multi-threaded copy of a mid-sized buffer waits for its
    second thread to be scheduled at every call (measured here under load: a 1 MB copy at
    0.1 GB/s, best of ten, against 160 GB/s single-threaded), and this value is cached for the
    process, so one bad moment would call every later kernel "faster than a copy". A one-thread
    copy does not wait on other threads; the faster of the two is the honest limit.
    """
    import torch

    numel = max(1, (1 << power) // 8)  # source and destination together: 2**power bytes
    src, dst = torch.ones(numel), torch.empty(numel)
    best = _best_copy_seconds(lambda: dst.copy_(src))
    with contextlib.suppress(ImportError):
        import numpy

        source, destination = src.numpy(), dst.numpy()
        best = min(best, _best_copy_seconds(lambda: numpy.copyto(destination, source)))
    return 2 * numel * 4 / best  # a copy reads and writes each byte


def copy_bandwidth(nbytes: int) -> float:
    """Bytes per second a plain copy of `nbytes` reaches here (best of a few; cached per size class).

    `nbytes` counts what the op reads and writes; the copy moves the same footprint (half read, half
    written), so data that fits in cache is compared with an in-cache copy.
    """
    return _copy_bandwidth_bucket(max(12, min(31, int(nbytes).bit_length() - 1)))


def copy_seconds(nbytes: int) -> float:
    """Seconds a plain copy of `nbytes` (read and written, all told) takes here; 0 for nothing."""
    return nbytes / copy_bandwidth(nbytes) if nbytes > 0 else 0.0


def tensor_bytes(*values: Any) -> int:
    """Bytes of every tensor in `values` (nested args and kwargs included)."""
    import torch
    from torch.utils import _pytree

    leaves = _pytree.tree_leaves(values)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


def ignores_its_input(kernel: Any, pytorch: Any, args: tuple, kwargs: dict, kernel_out: torch.Tensor) -> bool:
    """Whether the kernel gives bitwise the same output for a changed input while PyTorch does not."""
    import torch
    from torch.utils import _pytree

    leaves, spec = _pytree.tree_flatten((args, kwargs))
    index = next(
        (i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.is_floating_point()), None
    )
    if index is None:
        return False
    changed = list(leaves)
    changed[index] = leaves[index] * 1.5 + 0.25
    new_args, new_kwargs = _pytree.tree_unflatten(changed, spec)
    from kernel_explorer.measure.capture import first_tensor

    with torch.no_grad():
        kernel_changed = first_tensor(kernel(*new_args, **new_kwargs))
        pytorch_same = first_tensor(pytorch(*args, **kwargs))
        pytorch_changed = first_tensor(pytorch(*new_args, **new_kwargs))
    if kernel_changed is None or pytorch_same is None or pytorch_changed is None:
        return False
    return torch.equal(kernel_changed, kernel_out) and not torch.equal(pytorch_changed, pytorch_same)


def plausibility_notes(
    interval: Interval | None,
    *,
    kernel_s: float | None,
    bytes_moved: int,
    ignores_input: bool,
    pytorch_s: float | None = None,
) -> tuple[str, ...]:
    """Notes to look twice at a result; empty when nothing is suspicious.

    `pytorch_s` and `kernel_s` are the two sides' median times, compared with the interval's
    median of per-pair speedups when both are given.
    """
    notes = []
    if interval is not None and pytorch_s and kernel_s:
        of_medians = pytorch_s / kernel_s
        if max(of_medians / interval.median, interval.median / of_medians) > RATIO_DISAGREEMENT:
            notes.append(
                f"the median of per-pair speedups ({format_number(interval.median, 'x')}) and the ratio of "
                f"median times ({format_number(of_medians, 'x')}) disagree: the pairs were taken while the "
                "machine changed state; measure again when it is quiet"
            )
    if interval is not None and interval.median > IMPLAUSIBLE_SPEEDUP:
        notes.append(
            f"speedup {interval.median:.1f}x is above {IMPLAUSIBLE_SPEEDUP:.0f}x: check the kernel does "
            "all the work (or that eager is not unusually slow here)"
        )
    if ignores_input:
        notes.append("the kernel's output did not change when its input did (PyTorch's did)")
    if kernel_s and bytes_moved:
        reached = bytes_moved / kernel_s
        limit = copy_bandwidth(bytes_moved)
        if reached > COPY_MARGIN * limit:
            notes.append(
                f"the kernel moved its {bytes_moved / 1e6:.2f} MB at {reached / 1e9:.0f} GB/s, faster than "
                f"a plain copy of that size here ({limit / 1e9:.0f} GB/s)"
            )
    return tuple(notes)
