"""The dashboard's Run: the same measurement as `compare`, cycle after cycle, until stopped.

Each cycle compares every layer name exactly as `Explorer.compare` does (divergence, an A/A
calibration, interleaved pairs until the interval is within `precision` or the layer's budget is
spent, then a `LayerVerdict`), except that nothing is switched: instances are measured as they run
now, so a switch made while the run goes shows in the next pair, and pairs of instances on PyTorch
are labelled `kernel_on=False` (PyTorch against PyTorch), never counted as a kernel's speedup.
After the layers, one forward of the model gives its throughput.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.capture import CapturedInputs, run_model
from kernel_explorer.measure.layer_comparison import compare_layer
from kernel_explorer.measure.records import ModelThroughput, Record
from kernel_explorer.measure.stats import DEFAULT_BUDGET_S, DEFAULT_PRECISION
from kernel_explorer.measure.timing import Clock

if TYPE_CHECKING:
    from kernel_explorer.switching.board import Switchboard


def live_cycles(
    board: Switchboard,
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
        with board.lock:
            seconds = clock.per_call(lambda: run_model(board.model, kwargs), 1)
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
