"""Layer comparison on captured activations: latency, divergence and determinism, one record per sample.

Each sample reads what the instance runs *now* (under the switchboard lock, which is held only
around the forward calls), so a switch made while a run is going shows up in the next sample.
Instances that were on PyTorch when the comparison started are switched on for it and switched
back after, also when the run is cancelled, interrupted or fails; switches the user made in the
meantime are left as the user made them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.measure.capture import CapturedInputs, first_tensor
from kernel_explorer.measure.divergence import divergence, float64_reference
from kernel_explorer.measure.timing import Clock, interleaved_pair
from kernel_explorer.records import LayerDeterminism, LayerDivergence, LayerLatency, Record

if TYPE_CHECKING:
    from kernel_explorer.switchboard import Switchboard


@contextlib.contextmanager
def kernels_on_for(board: Switchboard, name: str, paths: list[str]) -> Iterator[None]:
    """Switch `paths` of `name` on for the block where they are off; switch back only those after."""
    off = [now.instance for now in board.running(name, paths) if not now.is_kernel]
    with board.holding((lambda: board.on(name, off)) if off else None, keep_others=True):
        yield


def _calls(captured: CapturedInputs, name: str, paths: list[str]) -> list[tuple[str, tuple, dict]]:
    by_path = captured.for_layer(name)
    calls = [(path, args, kwargs) for path in paths for args, kwargs in by_path.get(path, [])[:1]]
    if not calls:
        raise KernelExplorerError(
            f"No captured inputs for {name!r}: the capture run did not call it"
            + (
                f" ({captured.dropped} calls dropped by the {captured.memory_cap} byte memory cap)."
                if captured.dropped
                else "."
            )
        )
    return calls


def compare_layer(
    board: Switchboard,
    captured: CapturedInputs,
    name: str,
    *,
    run_id: str,
    instances: list[str] | None = None,
    pairs: int = 7,
    reference: bool = True,
    switch_on: bool = True,
) -> Iterator[Record]:
    """Divergence once per instance, then `pairs` interleaved latency pairs per instance, round-robin.

    With `switch_on=False` nothing is switched: instances on PyTorch are measured as they are
    (their records say `kernel_on: False`); this is what a live dashboard run does.
    """
    import torch

    paths = board.select(name, instances)
    calls = _calls(captured, name, paths)
    clock = Clock(board.device)
    paths_called = [path for path, _, _ in calls]
    with kernels_on_for(board, name, paths_called) if switch_on else contextlib.nullcontext():
        for path, args, kwargs in calls:
            with board.lock, torch.no_grad():
                current, pytorch, on = board.forwards(name, path)
                kernel_out = first_tensor(current(*args, **kwargs))
                pytorch_out = first_tensor(pytorch(*args, **kwargs))
            ref = None
            if reference:
                target = pytorch.__self__
                with contextlib.suppress(Exception):  # a layer that cannot run in float64: no reference
                    ref = first_tensor(float64_reference(target, args, kwargs))
            if kernel_out is None or pytorch_out is None:
                continue
            values = divergence(kernel_out, pytorch_out, ref)
            yield Record(run_id, LayerDivergence(**values, kernel_on=on), name, path)
        repeats: dict[str, int] = {}
        for round_index in range(pairs):
            for path, args, kwargs in calls:
                with board.lock:
                    current, pytorch, on = board.forwards(name, path)

                    def run_kernel(f=current, a=args, k=kwargs):  # type: ignore[no-untyped-def]
                        return f(*a, **k)

                    def run_pytorch(f=pytorch, a=args, k=kwargs):  # type: ignore[no-untyped-def]
                        return f(*a, **k)

                    if path not in repeats:  # same repeat for both, sized on the faster call
                        repeats[path] = max(clock.calibrate(run_pytorch), clock.calibrate(run_kernel))
                    t_pytorch, t_kernel = interleaved_pair(
                        clock, run_pytorch, run_kernel, repeats[path], b_first=round_index % 2 == 1
                    )
                values = LayerLatency(t_pytorch, t_kernel, t_pytorch / t_kernel, on, repeats[path])
                yield Record(run_id, values, name, path)


def determinism(
    board: Switchboard,
    captured: CapturedInputs,
    name: str,
    *,
    run_id: str,
    instances: list[str] | None = None,
    runs: int = 10,
) -> Iterator[Record]:
    """Repeat each call `runs` times: how often kernel, PyTorch and deterministic PyTorch repeat bitwise."""
    import torch

    paths = board.select(name, instances)
    calls = _calls(captured, name, paths)

    def identical_rate(fn: Any, args: tuple, kwargs: dict) -> float:
        first = first_tensor(fn(*args, **kwargs))
        same = sum(torch.equal(first_tensor(fn(*args, **kwargs)), first) for _ in range(runs - 1))
        return (same + 1) / runs

    with kernels_on_for(board, name, [path for path, _, _ in calls]):
        for path, args, kwargs in calls:
            with board.lock, torch.no_grad():
                current, pytorch, on = board.forwards(name, path)
                kernel_rate = identical_rate(current, args, kwargs)
                pytorch_rate = identical_rate(pytorch, args, kwargs)
                was = torch.are_deterministic_algorithms_enabled()
                torch.use_deterministic_algorithms(True)
                try:
                    deterministic_rate = identical_rate(pytorch, args, kwargs)
                finally:
                    torch.use_deterministic_algorithms(was)
            values = LayerDeterminism(runs, kernel_rate, pytorch_rate, deterministic_rate, on)
            yield Record(run_id, values, name, path)
