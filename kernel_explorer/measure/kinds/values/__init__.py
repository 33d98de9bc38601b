"""Values: how each layer's kernel output (and, in training, each gradient) differs from PyTorch's,
each judged against a float64 run, and how often repeated calls agree bitwise.

A time comparison logs the divergence of every instance before its pairs (and the gradients', in
training mode), so every compared layer has these records; the plan here measures values alone,
without timing: the divergence of each instance, then determinism. The summary's numbers
(`output_numbers`, `worst_gradient`) are also the time kind's accuracy columns: one source.

May import: _backend, build, catalog, errors, inspect, numerics
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.kinds.kind import Kind, LayerRequest, Measurement, RecordSource, records_of
from kernel_explorer.measure.kinds.values.records import GradientDivergence, LayerDeterminism, LayerDivergence
from kernel_explorer.measure.records import INFERENCE, TRAINING
from kernel_explorer.measure.summary import Column, NumberCell, Summary

if TYPE_CHECKING:
    from kernel_explorer.measure.records import Record

__all__ = ["KIND", "output_numbers", "plan", "summarize", "worst_gradient"]

#: determinism's repeats per call when `compare(measure="values")` is not given `determinism_runs`
DETERMINISM_RUNS = 10

COLUMNS = (
    Column("run_id", "run", line=None),
    Column("layer", "layer", what=True),
    Column("mode", "mode", what=True, line=" ({})"),
    Column("accuracy", "accuracy"),
    Column("bitwise_equal", "bitwise equal", "number", line="{} of elements bitwise equal"),
    Column("max_abs", "max abs difference", "number", line="max abs difference {}"),
    Column("max_ulp", "max ULP", "number", line=", {} ULP"),
    Column("kernel_err64", "kernel vs float64", "number", line="against float64: kernel {}"),
    Column("pytorch_err64", "PyTorch vs float64", "number", line=", PyTorch {}"),
    Column("worst_gradient", "worst gradient", line="worst gradient {}"),
    Column("kernel_identical", "kernel repeats bitwise", "number", line="repeats bitwise: kernel {}"),
    Column("pytorch_identical", "PyTorch repeats bitwise", "number", line=", PyTorch {}"),
    Column(
        "pytorch_deterministic_identical",
        "deterministic PyTorch repeats",
        "number",
        line=", deterministic PyTorch {}",
    ),
)
#: shown only when a row fills them (a training comparison's gradients, a determinism run)
OPTIONAL = frozenset(
    {"mode", "worst_gradient", "kernel_identical", "pytorch_identical", "pytorch_deterministic_identical"}
)


def output_numbers(found: Sequence[LayerDivergence]) -> dict[str, Any]:
    """A layer's outputs against PyTorch over its instances: the largest differences and errors
    against float64, the mean share of bitwise-equal elements."""
    return {
        "max_abs": max((d.max_abs or 0.0) for d in found),
        "max_ulp": max((d.max_ulp or 0) for d in found),
        "bitwise_equal": statistics.fmean(d.bitwise_equal for d in found),
        "kernel_err64": max((d.kernel_err64 or 0.0) for d in found),
        "pytorch_err64": max((d.pytorch_err64 or 0.0) for d in found),
    }


def worst_gradient(found: Sequence[GradientDivergence]) -> GradientDivergence | None:
    """The gradient (an input's or a weight's) whose error against float64 grew most relative to
    PyTorch's; None without a float64 reference."""
    measured = [g for g in found if g.kernel_err64 is not None]
    return max(measured, key=_excess) if measured else None


def _excess(found: GradientDivergence) -> float:
    """How much larger the kernel's error against float64 is than PyTorch's (1.0: the same)."""
    return (found.kernel_err64 or 0.0) / max(found.pytorch_err64 or 0.0, 1e-300)


def summarize(source: RecordSource) -> Summary:
    """Per run, layer and mode: the accuracy verdict, the outputs' (or gradients') largest
    differences against PyTorch and errors against float64, and, where measured, determinism."""
    from kernel_explorer.measure.merge import machine_columns
    from kernel_explorer.numerics.divergence import accuracy_verdict

    grouped: dict[tuple[str, str, str], list[Record]] = {}
    for cls, mode in (
        (LayerDivergence, INFERENCE),
        (GradientDivergence, TRAINING),
        (LayerDeterminism, INFERENCE),
    ):
        for record in records_of(source, cls):
            if record.layer is not None:
                grouped.setdefault((record.run_id, record.layer, mode), []).append(record)
    machines = machine_columns(source)
    rows: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    for (run_id, layer, mode), records in sorted(grouped.items(), key=lambda item: item[1][0].time):
        divergences = [
            r.values for r in records if isinstance(r.values, (LayerDivergence, GradientDivergence))
        ]
        repeats = [r.values for r in records if isinstance(r.values, LayerDeterminism)]
        row: dict[str, Any] = {"run_id": run_id, "layer": layer, "mode": mode if mode != INFERENCE else None}
        data: dict[str, Any] = {"instances": len({r.instance for r in records})}
        if divergences:
            row["accuracy"] = accuracy_verdict(divergences)
            outputs = [d for d in divergences if isinstance(d, LayerDivergence)]
            if outputs:
                numbers = output_numbers(outputs)
                row |= {
                    "bitwise_equal": NumberCell(numbers["bitwise_equal"], "share"),
                    "max_abs": NumberCell(numbers["max_abs"]),
                    "max_ulp": numbers["max_ulp"],
                    "kernel_err64": NumberCell(numbers["kernel_err64"]),
                    "pytorch_err64": NumberCell(numbers["pytorch_err64"]),
                }
            worst = worst_gradient([d for d in divergences if isinstance(d, GradientDivergence)])
            if worst is not None:
                row |= {
                    "worst_gradient": worst.gradient,
                    "kernel_err64": NumberCell(worst.kernel_err64),
                    "pytorch_err64": NumberCell(worst.pytorch_err64),
                }
            data["kernel_on"] = all(d.kernel_on for d in divergences)
        if repeats:  # the least repeatable instance speaks for the layer
            row |= {
                key: NumberCell(min(getattr(r, key) for r in repeats), "share")
                for key in ("kernel_identical", "pytorch_identical", "pytorch_deterministic_identical")
            }
            data["runs"] = repeats[0].runs
        rows.append(row)
        extra.append(data | machines(run_id))
    return Summary(
        "values",
        "Layer values: kernel against PyTorch, each against float64",
        tuple(c for c in COLUMNS if c.key not in OPTIONAL or any(r.get(c.key) is not None for r in rows)),
        tuple(rows),
        extra=tuple(extra),
        about=(
            "accuracy judges each side against a float64 run of the same layer: bitwise equal, rounds "
            "differently (as accurate as PyTorch), or less accurate (by how much). Differences are "
            "the largest over the layer's instances, in the output's units; repeats bitwise is the "
            "share of repeated calls that gave the first call's output bit for bit."
        ),
    )


def plan(request: LayerRequest) -> list[Measurement]:
    """Per layer (and candidate the request names): each instance's output against PyTorch and
    float64, then how often `determinism_runs` repeated calls agree bitwise; no timing."""
    from kernel_explorer.measure.layer_comparison import compare_values

    request.check_options()
    if request.mode != INFERENCE:
        from kernel_explorer.errors import KernelExplorerError

        raise KernelExplorerError(
            "compare(measure='values') compares inference outputs; for gradients against float64 run "
            "compare(mode='training') (its records hold each gradient's divergence)."
        )
    runs = request.options.get("determinism_runs") or DETERMINISM_RUNS
    board, inputs, instances = request.board, request.inputs, request.instances
    measurements: list[Measurement] = []
    for name in request.names:
        measurements += request.each_candidate(
            name,
            lambda run_id, n=name: compare_values(
                board, inputs(False), n, run_id=run_id, instances=instances, runs=runs
            ),
        )
    return measurements


KIND = Kind(
    name="values",
    title="Layer values against PyTorch and float64",
    records=(LayerDivergence, GradientDivergence, LayerDeterminism),
    summarize=summarize,
    plan=plan,
    order=20,
)
