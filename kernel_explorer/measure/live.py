"""The dashboard's Run: the same measurement as `compare`, cycle after cycle, until stopped.

Each cycle compares every layer name exactly as `Explorer.compare` does (divergence, an A/A
calibration, interleaved pairs until the interval is within `precision` or the layer's budget is
spent, then a `LayerVerdict`), except that nothing is switched: instances are measured as they run
now, so a switch made while the run goes shows in the next pair, and pairs of instances on PyTorch
are labelled `kernel_on=False` (PyTorch against PyTorch), never counted as a kernel's speedup.
After the layers, one forward of the model gives its throughput.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kernel_explorer.errors import RunCancelled
from kernel_explorer.measure.capture import CapturedInputs, run_model
from kernel_explorer.measure.kinds.model.records import ModelThroughput
from kernel_explorer.measure.layer_comparison import compare_layer
from kernel_explorer.measure.records import Record
from kernel_explorer.measure.stats import DEFAULT_BUDGET_S, DEFAULT_PRECISION
from kernel_explorer.measure.timing import Clock

if TYPE_CHECKING:
    from kernel_explorer.measure.switches import Switches


@contextlib.contextmanager
def locked_per_instance(board: Switches) -> Iterator[None]:
    """The board's lock around each kernel layer instance's call in the block, not around the
    whole forward, and the run's cancellation checked before each.

    A whole forward of the default model took 3 to 10 s on a busy 2-core machine: held for all of
    it, the lock kept a switch clicked meanwhile waiting as long, and Stop was seen only after it.
    A switch still never lands inside an instance's call (it may land between two layers: that
    forward's throughput then mixes the two states, as a switch between two pairs does).
    """
    from kernel_explorer.measure.runner import current_run_cancelled

    def before(module: Any, args: Any) -> None:
        board.lock.acquire()  # first: the `after` hook releases it even when this one raises
        if current_run_cancelled():
            raise RunCancelled

    def after(module: Any, args: Any, output: Any) -> None:
        board.lock.release()

    handles = []
    modules = dict(board.model.named_modules())
    try:
        for name in board.groups:
            for path in board.select(name):
                module = modules.get(path)
                if module is not None:
                    handles.append(module.register_forward_pre_hook(before))
                    handles.append(module.register_forward_hook(after, always_call=True))
        yield
    finally:
        for handle in handles:
            handle.remove()


def live_cycles(
    board: Switches,
    captured: Callable[[], CapturedInputs],
    model_kwargs: Callable[[], dict[str, Any]],
    *,
    run_id: str,
    cycles: int | None = None,
    precision: float = DEFAULT_PRECISION,
    budget_s: float = DEFAULT_BUDGET_S,
) -> Iterator[Record]:
    """Cycle over the model's throughput and then the layers until cancelled, or `cycles` times.

    `captured` and `model_kwargs` are called here, on the run's thread, so starting a run answers
    at once even when the inputs still have to be captured.
    """
    clock = Clock(board.device)
    inputs, kwargs = captured(), model_kwargs()
    cycle = 0
    while cycles is None or cycle < cycles:
        # the model's throughput first: its plot has a point within a second, however many layers follow
        tokens = int(kwargs["input_ids"].numel())
        try:
            with locked_per_instance(board):
                seconds = clock.per_call(lambda: run_model(board.model, kwargs), 1)
        except RunCancelled:
            return
        on = sum(now.is_kernel for now in board.running())
        yield Record(run_id, ModelThroughput(tokens / seconds, on))
        for name in board.groups:
            yield from compare_layer(
                board,
                inputs,
                name,
                run_id=run_id,
                precision=precision,
                budget_s=budget_s,
                switch_on=False,
            )
        cycle += 1
