"""Which measurements a comparison runs, in order: what `Explorer.compare` and `compare_model` start.

Kept apart from the explorer so the choice of measurements per mode (inference, training,
torch.compile) reads in one place and the explorer stays a thin front.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.modes import parse_mode
from kernel_explorer.errors import KernelExplorerError

if TYPE_CHECKING:
    from kernels import Mode

    from kernel_explorer.catalog.candidates import Candidate
    from kernel_explorer.measure.capture import CapturedInputs
    from kernel_explorer.measure.records import Record
    from kernel_explorer.measure.runner import Measurement
    from kernel_explorer.measure.switches import Switches


def layer_mode(mode: str) -> str:
    """ "inference" or "training"; any other mode is one line naming what a layer comparison takes."""
    parse_mode(mode)  # an unknown mode: the one line naming the three
    if mode not in ("inference", "training"):
        raise KernelExplorerError(
            f"compare takes mode 'inference' or 'training', not {mode!r} "
            "(torch.compile is compared for the whole model: compare_model(mode='torch.compile'))."
        )
    return mode


def layer_plan(
    board: Switches,
    inputs: Callable[[bool], CapturedInputs],
    names: list[str],
    *,
    mode: str,
    determinism_runs: int,
    candidates: list[str] | None = None,
    **sampling: Any,
) -> list[Measurement]:
    """Per layer: the comparison in `mode` (`sampling`: instances, pairs, precision, budget_s,
    calibration_pairs), then, with `determinism_runs`, repeat-run identity. `inputs(grad)` gives the
    captured inputs (with autograd on for training), read when the run starts. With `candidates`
    (sources such as "bundled" and "peer", or candidate labels), the comparison runs once per
    matching candidate of each layer, that candidate switched on for it: PyTorch, the bundled kernel
    and a peer side by side in one run."""
    from kernel_explorer.measure.layer_comparison import compare_layer, determinism
    from kernel_explorer.measure.layer_training import compare_layer_training

    training = layer_mode(mode) == "training"
    compare = compare_layer_training if training else compare_layer
    measurements: list[Measurement] = []
    for name in names:
        for chosen in _chosen(board, name, candidates):
            measurements.append(
                _switched(
                    board,
                    name,
                    chosen,
                    mode,
                    sampling.get("instances"),
                    lambda run_id, n=name: compare(board, inputs(training), n, run_id=run_id, **sampling),
                )
            )
        if determinism_runs:
            measurements.append(
                lambda run_id, n=name: determinism(
                    board,
                    inputs(False),
                    n,
                    run_id=run_id,
                    instances=sampling["instances"],
                    runs=determinism_runs,
                )
            )
    return measurements


def _chosen(board: Switches, name: str, wanted: list[str] | None) -> list[Candidate | None]:
    """The candidates to compare for `name`: None (what is on, or the default) when none is asked."""
    if not wanted:
        return [None]
    door = board.doors[name]
    found = list(dict.fromkeys(c for word in wanted for c in door.matching(word)))
    if not found:
        known = ", ".join(c.label for c in door.candidates()) or "none"
        raise KernelExplorerError(f"No candidate of {name!r} matches {wanted}; its candidates: {known}")
    return found


def _switched(
    board: Switches,
    name: str,
    chosen: Candidate | None,
    mode: str,
    instances: Any,
    measure: Measurement,
) -> Measurement:
    """`measure` with `chosen` switched on for `name` while it runs (as it was after)."""
    if chosen is None:
        return measure

    def run(run_id: str) -> Iterator[Record]:
        switch = lambda: board.on(name, instances, mode=mode, candidate=chosen)  # noqa: E731
        with board.holding(switch, keep_others=True):
            yield from measure(run_id)

    return run


def model_plan(
    board: Switches,
    kwargs: dict[str, Any],
    *,
    mode: str,
    lengths: tuple[int, ...],
    pairs: int,
    vocab_size: int,
    decode_tokens: int,
    decode_pairs: int,
    floor_so_far: Callable[[str], float],
    compiled: bool = False,
) -> list[Measurement]:
    """The model comparison in `mode`: inference (logits and greedy agreement, prefill, decode),
    "training" (a training step per length) or "torch.compile" (compiled prefill per length).
    `floor_so_far(run_id)` is the run's prefill noise floor, which decode borrows. `compiled`:
    inference under torch.compile, compiled + kernels against compiled and eager PyTorch (prefill
    per length, decode, agreement, compile seconds); it takes an inference mode only."""
    from kernel_explorer.measure.model_comparison import compare_decode, compare_outputs, compare_prefill
    from kernel_explorer.measure.model_modes import (
        compare_compiled,
        compare_compiled_inference,
        compare_training_step,
    )

    chosen = parse_mode(mode)
    sized = {"lengths": lengths, "pairs": pairs, "vocab_size": vocab_size}
    if compiled:
        _check_compiled(chosen, mode, kwargs)
        return [
            lambda run_id: compare_compiled_inference(
                board, kwargs, run_id=run_id, decode_tokens=decode_tokens, decode_pairs=decode_pairs, **sized
            )
        ]
    if chosen == parse_mode("training"):
        return [lambda run_id: compare_training_step(board, run_id=run_id, **sized)]
    if chosen == parse_mode("torch.compile"):
        return [lambda run_id: compare_compiled(board, run_id=run_id, **sized)]
    if chosen != parse_mode("inference"):
        raise KernelExplorerError(
            f"compare_model takes mode 'inference', 'training' or 'torch.compile', not {mode!r}."
        )
    return [
        lambda run_id: compare_outputs(board, kwargs, run_id=run_id),
        lambda run_id: compare_prefill(board, run_id=run_id, **sized),
        lambda run_id: compare_decode(
            board,
            kwargs,
            run_id=run_id,
            new_tokens=decode_tokens,
            pairs=decode_pairs,
            noise_floor_hint=floor_so_far(run_id),
        ),
    ]


def _check_compiled(chosen: Mode, mode: str, kwargs: dict[str, Any]) -> None:
    """What `compare_model(compiled=True)` needs: an inference mode, one prompt of token ids."""
    if chosen & parse_mode("training"):
        raise KernelExplorerError(
            f"compare_model(compiled=True) compares inference (prefill and decode) under torch.compile; "
            f"mode {mode!r} is a training mode. For a training step drop compiled=True "
            "(compare_model(mode='training')); for compiled inference leave mode at 'inference'."
        )
    ids = kwargs.get("input_ids")
    if ids is None or ids.dim() != 2 or ids.shape[0] != 1:
        shape = None if ids is None else tuple(ids.shape)
        raise KernelExplorerError(
            f"compare_model(compiled=True) decodes one prompt of token ids (batch 1), got input_ids "
            f"of shape {shape}: pass inputs= one text prompt or a (1, n) tensor of ids."
        )
