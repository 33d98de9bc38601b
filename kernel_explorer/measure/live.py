"""The dashboard's Run: measure what runs now, layer after layer, until stopped.

Nothing is switched by the run itself: each cycle measures every layer name on one instance
(one that runs a kernel, when there is one) and the model's throughput, so switches made in the
dashboard while it runs show up in the next cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.capture import CapturedInputs, run_model
from kernel_explorer.measure.layers import compare_layer
from kernel_explorer.measure.timing import Clock
from kernel_explorer.records import ModelThroughput, Record

if TYPE_CHECKING:
    from kernel_explorer.switchboard import Switchboard


def _instance_to_measure(board: Switchboard, name: str) -> str:
    running = board.running(name)
    for now in running:
        if now.is_kernel:
            return now.instance
    return running[0].instance


def live_cycles(
    board: Switchboard,
    captured: Callable[[], CapturedInputs],
    model_kwargs: dict[str, Any],
    *,
    run_id: str,
    cycles: int | None = None,
) -> Iterator[Record]:
    """Cycle over the layers (and the model's throughput) until cancelled, or `cycles` times."""
    clock = Clock(board.device)
    cycle = 0
    while cycles is None or cycle < cycles:
        for name in board.groups:
            path = _instance_to_measure(board, name)
            yield from compare_layer(
                board,
                captured(),
                name,
                run_id=run_id,
                instances=[path],
                pairs=1,
                calibration_pairs=0,
                switch_on=False,
                conclude=False,
            )
        tokens = int(model_kwargs["input_ids"].numel())
        with board.lock:
            seconds = clock.per_call(lambda: run_model(board.model, model_kwargs), 1)
        on = sum(now.is_kernel for now in board.running())
        yield Record(run_id, ModelThroughput(tokens / seconds, on))
        cycle += 1
