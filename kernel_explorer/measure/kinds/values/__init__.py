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

from kernel_explorer.measure.kinds.kind import (
    Kind,
    LayerRequest,
    Measurement,
    RecordSource,
    candidate_name,
    records_of,
)
from kernel_explorer.measure.kinds.values.records import GradientDivergence, LayerDeterminism, LayerDivergence
from kernel_explorer.measure.records import INFERENCE, TRAINING
from kernel_explorer.measure.summary import Column, NumberCell, Summary, columns_in_use

if TYPE_CHECKING:
    from kernel_explorer.measure.records import Record

__all__ = ["KIND", "output_numbers", "plan", "summarize", "worst_gradient"]

#: determinism's repeats per call when `compare(measure="values")` is not given `determinism_runs`
DETERMINISM_RUNS = 10

COLUMNS = (
    Column("run_id", "run", line=None),
    Column("layer", "layer", what=True),
    Column("mode", "mode", what=True, line=" ({})"),
    Column("kernel", "kernel", what=True, line=" ({})"),
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
    {
        "mode",
        "kernel",
        "worst_gradient",
        "kernel_identical",
        "pytorch_identical",
        "pytorch_deterministic_identical",
    }
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


#: a record measured while its layer's kernel was off: PyTorch against PyTorch, no kernel's error
KERNEL_OFF = "kernel off"


#: a record with its kernel on whose provenance names no kernel (a log written before determinism
#: records carried one): counted with the one kernel its row measured, if there was one
_SOME_KERNEL = ("", "", "")


def _ran(record: Record) -> tuple[str, str, str] | str:
    """What ran for `record`: the candidate (kernel id, code path, label), or `KERNEL_OFF`."""
    if not getattr(record.values, "kernel_on", True):
        return KERNEL_OFF
    p = record.provenance
    return (p.kernel_id, p.isa or "", p.candidate or "") if p is not None and p.kernel_id else _SOME_KERNEL


def _kernel_names(ran: set[tuple[str, str, str] | str]) -> dict[tuple[str, str, str] | str, str | None]:
    """Each thing that ran in one (run, layer, mode) named as the time summary names it (kernel id,
    `@path` where one kernel ran several, the label where that still repeats); None when a single
    kernel ran throughout (the row needs no name)."""
    kernels = sorted(k for k in ran if isinstance(k, tuple))
    if ran == set(kernels) and len(kernels) < 2:
        return {k: None for k in ran}
    names: dict[tuple[str, str, str] | str, str | None] = {KERNEL_OFF: KERNEL_OFF, _SOME_KERNEL: "kernel on"}
    for key in kernels:
        if key != _SOME_KERNEL:
            names[key] = candidate_name(key, kernels)
    return names


def summarize(source: RecordSource) -> Summary:
    """Per run, layer, mode and candidate: the accuracy verdict, the outputs' (or gradients') largest
    differences against PyTorch and errors against float64, and, where measured, determinism. A
    stretch with the layer's kernel off (a dashboard's Run with the layer switched off) is a row of
    its own, `kernel off`: its numbers are PyTorch's, never counted as a kernel's error. Each row's
    data keeps the label of the candidate it measured (`candidate`, "" when none or unknown)."""
    from kernel_explorer.measure.merge import machine_columns
    from kernel_explorer.numerics.divergence import accuracy_verdict

    found: list[tuple[tuple[str, str, str], tuple[str, str, str] | str, Record]] = []
    for cls, mode in (
        (LayerDivergence, INFERENCE),
        (GradientDivergence, TRAINING),
        (LayerDeterminism, INFERENCE),
    ):
        found += [((r.run_id, r.layer, mode), _ran(r), r) for r in records_of(source, cls) if r.layer]
    ran_in: dict[tuple[str, str, str], set[tuple[str, str, str] | str]] = {}
    for group, ran, _ in found:
        ran_in.setdefault(group, set()).add(ran)
    for ran in ran_in.values():  # an unnamed kernel is the row's one named kernel where there is one
        named = [k for k in ran if isinstance(k, tuple) and k != _SOME_KERNEL]
        if len(named) == 1:
            ran.discard(_SOME_KERNEL)
    grouped: dict[tuple[str, str, str, tuple[str, str, str] | str], list[Record]] = {}
    for group, ran, record in found:
        if ran == _SOME_KERNEL and ran not in ran_in[group]:
            ran = next(k for k in ran_in[group] if isinstance(k, tuple))
        grouped.setdefault((*group, ran), []).append(record)
    names = {group: _kernel_names(ran) for group, ran in ran_in.items()}
    machines = machine_columns(source)
    rows: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    for (run_id, layer, mode, ran), records in sorted(grouped.items(), key=lambda item: item[1][0].time):
        divergences = [
            r.values for r in records if isinstance(r.values, (LayerDivergence, GradientDivergence))
        ]
        repeats = [r.values for r in records if isinstance(r.values, LayerDeterminism)]
        row: dict[str, Any] = {
            "run_id": run_id,
            "layer": layer,
            "mode": mode if mode != INFERENCE else None,
            "kernel": names[(run_id, layer, mode)][ran],
        }
        data: dict[str, Any] = {
            "instances": len({r.instance for r in records}),
            "candidate": ran[2] if isinstance(ran, tuple) else "",  # its label: the report's name for it
        }
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
        columns_in_use(COLUMNS, rows, OPTIONAL),
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
