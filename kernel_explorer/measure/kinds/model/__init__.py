"""Model: the whole model as switched against all-PyTorch: prefill at each length and greedy decode
(inference), a training step (loss, gradients and time), or compiled prefill and decode, each
measure closing with a `ModelVerdict` (median speedup, 95% interval, floor, verdict).

`Explorer.compare_model()` starts it with `plan_model` (`measure/model_comparison.py`,
`measure/model_modes.py`); whole-model measures take no layer request, so `compare(measure=...)`
does not. The summary is a row per run and measure; a training step adds its loss and gradient
agreement, and a prefill row, once a breakdown and layer verdicts exist, the speedup Amdahl
predicts from the kernels that run had on (the breakdown kind's arithmetic), next to the one
measured.

May import: _backend, build, catalog, errors, inspect, numerics
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.kinds.kind import Kind, Measurement, RecordSource, records_of
from kernel_explorer.measure.kinds.model.records import (
    CompileTime,
    ModelDecode,
    ModelPair,
    ModelPrefill,
    ModelThroughput,
    ModelVerdict,
    TrainingAgreement,
)
from kernel_explorer.measure.summary import Column, IntervalCell, NumberCell, RangeCell, Summary, VerdictCell

if TYPE_CHECKING:
    from kernel_explorer.measure.switches import Switches

__all__ = ["KIND", "plan_model", "summarize"]

TRAINING_STEP = "training step"

COLUMNS = (
    Column("run_id", "run", line=None),
    Column("measure", "measure", what=True),
    Column("tokens", "tokens", "number", what=True, line=" ({} tokens)"),
    Column(
        "speedup",
        "speedup [95% interval]",
        "interval",
        names=("speedup", "speedup_low", "speedup_high", "confidence"),
    ),
    Column("verdict", "verdict", "verdict", line=" {}"),
    Column("pairs", "pairs", "number", line="{} pairs"),
    Column("noise_floor", "noise floor", "number", line=", noise floor {}"),
    Column("across", "across runs", "range", line="across runs {}"),
    Column("loss_abs_diff", "loss difference", "number", line="loss differs by {}"),
    Column("min_cosine", "lowest gradient cosine", "number", line=", lowest gradient cosine {}"),
    Column("predicted_from_layers", "predicted from layers", "number", line="Amdahl predicts {}"),
    Column("predicted_with", "predicted with", line=" {}"),
)
#: shown only when a row fills them (a training step, a prefill after a breakdown)
OPTIONAL = frozenset({"loss_abs_diff", "min_cosine", "predicted_from_layers", "predicted_with"})


def summarize(source: RecordSource) -> Summary:
    """Per run and measure (prefill at each length, decode, training step, compiled prefill):
    speedup, interval, floor, verdict, and what the measure adds (loss and gradients, Amdahl)."""
    from kernel_explorer.measure.kinds.breakdown import latest_shares, predicted
    from kernel_explorer.measure.merge import machine_columns

    has_breakdown = bool(latest_shares(source))
    agreements = {(r.run_id, r.values.tokens): r.values for r in records_of(source, TrainingAgreement)}
    machines = machine_columns(source)
    rows: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    for record in records_of(source, ModelVerdict):
        v = record.values
        row: dict[str, Any] = {
            "run_id": record.run_id,
            "measure": v.measure,
            "tokens": v.tokens,
            "verdict": VerdictCell(v.verdict, v.stalled, v.pairs),
            "pairs": v.pairs,
            "noise_floor": NumberCell(v.noise_floor, "share"),
        }
        if v.measurable:
            row["speedup"] = IntervalCell(v.speedup, v.speedup_low, v.speedup_high, "x", v.confidence)
            if v.across_low is not None and v.across_high is not None:
                row["across"] = RangeCell(v.across_low, v.across_high, "x")
        data = asdict(v)
        found = agreements.get((record.run_id, v.tokens))
        if v.measure == TRAINING_STEP and found is not None:
            row |= {
                "loss_abs_diff": NumberCell(found.loss_abs_diff),
                "min_cosine": NumberCell(found.min_cosine),
            }
            data |= asdict(found)
        if v.measure == "prefill" and has_breakdown:
            model = predicted(source, "prefill", on=v.kernels_on)
            if model is not None:
                row |= {"predicted_from_layers": NumberCell(model[0], "x"), "predicted_with": model[1]}
        rows.append(row)
        extra.append(data | machines(record.run_id))
    return Summary(
        "model",
        "The model as switched against all-PyTorch, 95% intervals",
        tuple(c for c in COLUMNS if c.key not in OPTIONAL or any(r.get(c.key) is not None for r in rows)),
        tuple(rows),
        extra=tuple(extra),
        about=(
            "speedup: the model as switched against all-PyTorch, median over interleaved pairs with its "
            "95% interval; decode borrows prefill's noise floor. predicted from layers: what Amdahl "
            "predicts from the last time breakdown and the layers' measured speedups, with the kernels "
            "that run had on."
        ),
    )


def plan_model(
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
    from kernel_explorer._backend.modes import parse_mode
    from kernel_explorer.errors import KernelExplorerError
    from kernel_explorer.measure.model_comparison import compare_decode, compare_outputs, compare_prefill
    from kernel_explorer.measure.model_modes import (
        compare_compiled,
        compare_compiled_inference,
        compare_training_step,
    )

    chosen = parse_mode(mode)
    sized = {"lengths": lengths, "pairs": pairs, "vocab_size": vocab_size}
    if compiled:
        _check_compiled(mode, kwargs)
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


def _check_compiled(mode: str, kwargs: dict[str, Any]) -> None:
    """What `compare_model(compiled=True)` needs: an inference mode, one prompt of token ids."""
    from kernel_explorer._backend.modes import parse_mode
    from kernel_explorer.errors import KernelExplorerError

    if parse_mode(mode) & parse_mode("training"):
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


KIND = Kind(
    name="model",
    title="The whole model against all-PyTorch",
    records=(
        ModelPrefill,
        ModelDecode,
        ModelVerdict,
        ModelPair,
        CompileTime,
        ModelThroughput,
        TrainingAgreement,
    ),
    summarize=summarize,
    how="Explorer.compare_model()",
    order=30,
    concludes=(ModelVerdict,),
    samples=(ModelPrefill, ModelDecode, ModelPair),
)
