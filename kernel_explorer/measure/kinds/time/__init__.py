"""Time: each layer's kernel against PyTorch on the model's captured activations, in inference or
training mode (forward + backward), as a median speedup with its 95% interval and a verdict.

The plan runs `measure/layer_comparison.compare_layer` (or `layer_training.compare_layer_training`)
per layer and candidate; the summary derives every number from the logged pairs through
`Comparison`, per run, layer, mode and kernel, so the table, the CLI, the magic and the report read
the same numbers the verdict record holds. Its accuracy columns are the values kind's
(`kinds/values`), and `machine_table` puts each machine's latest run of a layer side by side.

May import: _backend, build, catalog, errors, inspect, numerics
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.comparison import Comparison
from kernel_explorer.measure.kinds.kind import (
    Kind,
    LayerRequest,
    Measurement,
    RecordSource,
    candidate_name,
    records_of,
)
from kernel_explorer.measure.kinds.time.records import LayerCalibration, LayerLatency, LayerVerdict
from kernel_explorer.measure.kinds.values import output_numbers, worst_gradient
from kernel_explorer.measure.kinds.values.records import GradientDivergence, LayerDivergence
from kernel_explorer.measure.records import INFERENCE, TRAINING
from kernel_explorer.measure.stats import noise_warning
from kernel_explorer.measure.summary import (
    Column,
    IntervalCell,
    NumberCell,
    RangeCell,
    Summary,
    VerdictCell,
    columns_in_use,
)
from kernel_explorer.measure.verdict import Verdict

if TYPE_CHECKING:
    import pandas as pd

    from kernel_explorer.inspect.running import RunningNow
    from kernel_explorer.measure.records import Record

__all__ = [
    "KIND",
    "RUN_TO_RUN",
    "kernels_running",
    "latest_verdict_records",
    "latest_verdicts",
    "layer_mode",
    "machine_table",
    "plan",
    "summarize",
]

TITLE = "Layer speed: kernel against PyTorch, 95% intervals"

RUN_TO_RUN = (
    "[95% interval] is this run's; 'across runs' widens it by the noise floor: what another run here "
    "may give, and what a verdict must clear 1x with."
)

ABOUT = (
    "speedup [95% interval] bounds the median speedup (PyTorch's time over the kernel's, per "
    "interleaved pair); noise floor is how far PyTorch against itself moved (A/A): a verdict needs the "
    "interval to clear it. runs agree is no where another run's interval does not overlap this one: "
    "each interval is its run's, and separate runs can move by up to the noise floor when the machine "
    "changes state between them, so across runs widens it by the floor (what another run here may "
    "give), and a verdict needs that wider interval to clear 1x. An interval marked 'only N% sure' "
    "rests on too few pairs to reach 95%; stopped by says what ended the pairs: pairs (the count "
    "asked for), precision (the interval was narrow enough) or budget (the time ran out first)."
)

COLUMNS = (
    Column("run_id", "run", line=None),
    Column("layer", "layer", what=True),
    Column("kernel", "kernel", what=True, line=" ({})"),
    Column("mode", "mode", what=True, line=" ({})"),
    Column(
        "speedup",
        "speedup [95% interval]",
        "interval",
        names=("speedup", "speedup_low", "speedup_high", "confidence"),
    ),
    Column("verdict", "verdict", "verdict", line=" {}"),
    Column("accuracy", "accuracy"),
    Column("pairs", "pairs", "number", line="{} pairs"),
    Column("instances", "instances", "number", line=" over {} instances"),
    Column("noise_floor", "noise floor", "number", line=", noise floor {}"),
    Column("stopped_by", "stopped by", line=", stopped by {}"),
    Column("across", "across runs", "range", line="across runs {}"),
    Column("worst_gradient", "worst gradient", line="worst gradient {}"),
    Column("pytorch_s", "PyTorch per call", "number", line="PyTorch {}"),
    Column("kernel_s", "kernel per call", "number", line=", kernel {}"),
    Column("runs_agree", "runs agree", line=None),
    Column("notes", "notes", line="look twice: {}"),
)
#: columns shown only when a row fills them (a run of several kernels, a training comparison)
OPTIONAL = frozenset({"kernel", "mode", "worst_gradient"})


def summarize(source: RecordSource, mode: str | None = None) -> Summary:
    """Per run, layer, mode and kernel: the speedup's median with its 95% interval, the A/A noise
    floor, the verdict, the accuracy, and what the numbers rest on; `mode`: one mode's rows only.

    Only pairs where the instance ran a kernel count toward its speedup; a layer measured only with
    its kernel off reads "PyTorch against PyTorch (kernel off)", never as a speedup. A run that
    compared several candidates of a layer has a row per kernel (its `kernel` column); each row's
    data keeps the label of the candidate its pairs ran (`candidate`, "" when none or unknown), which
    the report names every kernel by.
    """
    from kernel_explorer.measure.merge import machine_columns

    grouped: dict[Any, dict[str, Any]] = _pair_groups(source, mode)  # the pairs' kinds as columns
    for record in records_of(source, LayerVerdict):
        if record.layer is not None and (mode is None or record.values.mode == mode):
            key = (record.run_id, record.layer, record.values.mode)
            grouped.setdefault(key, {}).setdefault(record.kind, []).append(record)
    for cls, its_mode in ((LayerDivergence, INFERENCE), (GradientDivergence, TRAINING)):
        for record in records_of(source, cls):
            found = grouped.get((record.run_id, str(record.layer), its_mode))
            if found is not None:
                found.setdefault(record.kind, []).append(record)
    rows: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    machines = machine_columns(source)
    for (run_id, layer, its_mode), kernel, kinds in per_kernel(grouped):
        row, data = _row(run_id, layer, its_mode, kinds)
        rows.append(row | {"kernel": kernel})
        extra.append(data | {"candidate": ran_label(kinds)} | machines(run_id))
    _mark_runs_that_disagree(rows)
    floors = [float(r["noise_floor"].value) for r in rows if isinstance(r.get("noise_floor"), NumberCell)]
    warning = noise_warning(max(floors, default=0.0))
    return Summary(
        "time",
        TITLE,
        columns_in_use(COLUMNS, rows, OPTIONAL),
        tuple(rows),
        notes=(RUN_TO_RUN, *([warning] if warning else [])) if rows else (),
        extra=tuple(extra),
        about=ABOUT,
    )


#: the kinds with a record per timed pair, read as columns (`ResultLog.columns`): a Run's bulk
_PAIR_KINDS = (LayerLatency, LayerCalibration)
#: a group's records of one kind: columns cut to the group (the pairs' kinds), or records
Rows = Mapping[str, Any] | list[Any]


def _pair_columns(source: RecordSource, cls: type) -> dict[str, Any]:
    """The records of `cls` in `source` as columns: the log's own where it keeps them, else made
    from the records (a source that is a list of records)."""
    columns = getattr(source, "columns", None)  # a ResultLog's; a list of records has none
    if columns is not None:
        return columns(cls.kind)
    from kernel_explorer.measure.record_columns import object_columns

    found = records_of(source, cls)
    return object_columns(cls, list(range(len(found))), found)


def _pair_groups(source: RecordSource, mode: str | None) -> dict[tuple[str, str, str], dict[str, Rows]]:
    """Per (run, layer, mode), in the order first found, latency then A/A: each pair kind's
    columns cut to the group (records without a layer, or of the other `mode`, left out)."""
    import numpy as np
    import pandas as pd

    grouped: dict[tuple[str, str, str], dict[str, Rows]] = {}
    for cls in _PAIR_KINDS:
        columns = _pair_columns(source, cls)
        keep = pd.notna(columns["layer"])
        if mode is not None:
            keep &= columns["mode"] == mode
        at = np.flatnonzero(keep)
        keys = pd.DataFrame({name: columns[name][at] for name in ("run_id", "layer", "mode")})
        found = keys.groupby(["run_id", "layer", "mode"], sort=False).indices
        for group, rows in sorted(found.items(), key=lambda item: item[1][0]):
            key: Any = group  # (run_id, layer, mode)
            cut = at[rows]
            grouped.setdefault(key, {})[cls.kind] = {name: column[cut] for name, column in columns.items()}
    return grouped


def _row(
    run_id: str, layer: str, mode: str, kinds: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One comparison's cells (what a reader sees) and data (what only the table keeps)."""
    timed: Any = kinds.get(LayerLatency.kind)  # the pairs' kinds come as columns (`_pair_groups`)
    calibration: Any = kinds.get(LayerCalibration.kind)
    aa = calibration["ratio"].tolist() if calibration else []
    divergence_kind = LayerDivergence.kind if mode == INFERENCE else GradientDivergence.kind
    divergences = [r.values for r in kinds.get(divergence_kind, [])]
    verdicts = [r.values for r in kinds.get(LayerVerdict.kind, [])]
    found = Comparison.of_columns(timed or {}, aa, divergences)
    # pairs and instances apart: compare(pairs=5) over 61 instances is 305 pairs of 61
    instances = set(timed["instance"][timed["kernel_on"] == found.kernel_on].tolist()) if timed else set()
    row: dict[str, Any] = {
        "run_id": run_id,
        "layer": layer,
        "mode": mode if mode != INFERENCE else None,
        "pairs": found.pairs,
        "instances": len(instances),
    }
    data: dict[str, Any] = {"aa_pairs": len(aa), "kernel_on": found.kernel_on}
    if found.pairs:
        interval = found.interval
        verdict = found.verdict if found.kernel_on else Verdict.KERNEL_OFF
        row |= {
            "verdict": VerdictCell(verdict, found.stalled_pairs, found.pairs),
            "noise_floor": NumberCell(found.floor, "share"),
            "pytorch_s": NumberCell(found.pytorch_median_s, "s"),
            "kernel_s": NumberCell(found.kernel_median_s, "s"),
        }
        if found.measurable:  # else no number: the verdict and the stalled count say why
            low, high = found.across_runs
            row["speedup"] = IntervalCell(
                interval.median, interval.low, interval.high, "x", interval.confidence
            )
            row["across"] = RangeCell(low, high, "x")
        data |= {
            "speedup_q1": _quantile(found.speedups, 0.25),
            "speedup_q3": _quantile(found.speedups, 0.75),
            "stalled": found.stalled_pairs,
            "pytorch_us_median": found.pytorch_median_s * 1e6,
            "kernel_us_median": found.kernel_median_s * 1e6,
        }
    if divergences:
        row["accuracy"] = found.accuracy
        if mode == INFERENCE:
            data |= output_numbers([d for d in divergences if isinstance(d, LayerDivergence)])
        else:
            worst = worst_gradient([d for d in divergences if isinstance(d, GradientDivergence)])
            if worst is not None:
                row["worst_gradient"] = worst.gradient
                data |= {"kernel_err64": worst.kernel_err64, "pytorch_err64": worst.pytorch_err64}
    if verdicts:
        row |= {"stopped_by": verdicts[-1].stopped_by, "notes": "; ".join(verdicts[-1].notes)}
    return row, data


def _quantile(values: Sequence[float], q: float) -> float:
    """The `q` quantile with linear interpolation between order statistics (pandas' default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def _kernel_keys(rows: Rows) -> list[tuple[str, str, str] | None]:
    """Per record of `rows`: the candidate that ran (kernel id, code path, label), None without one."""
    if isinstance(rows, Mapping):
        triples = zip(rows["kernel_id"], rows["isa"], rows["candidate"], strict=True)
        return [(kid, isa or "", label or "") if kid else None for kid, isa, label in triples]
    return [
        (p.kernel_id, p.isa or "", p.candidate or "") if p is not None and p.kernel_id else None
        for p in (r.provenance for r in rows)
    ]


def ran_label(kinds: Mapping[str, Rows]) -> str:
    """The label of the one candidate a group's pairs ran with the kernel on (`"bundled/activation:Silu
    (cpu, any mode)"`); "" when they ran none, several, or a log older than labels names none."""
    keys = {k for k in _kernel_keys(kinds.get(LayerLatency.kind, [])) if k is not None and k[2]}
    labels = {label for _, _, label in keys}
    return labels.pop() if len(labels) == 1 else ""


def per_kernel(
    grouped: Mapping[tuple[str, str, str], dict[str, Rows]],
) -> Iterator[tuple[tuple[str, str, str], str | None, dict[str, Rows]]]:
    """Each (run, layer, mode) group, split by the candidate that ran where one run compared several
    kernels of a layer (`compare(candidates=...)`), named by kernel id, with its code path where one
    kernel ran several (`kernel_id@avx2`) and the candidate's label where that still repeats;
    otherwise whole, with kernel None. A kind's rows are records, or columns (the pairs' kinds)."""

    def mine(rows: Rows, wanted: tuple[str, str, str]) -> Rows:
        chosen = [key == wanted for key in _kernel_keys(rows)]
        if isinstance(rows, Mapping):
            return {name: column[chosen] for name, column in rows.items()}
        return [r for r, keep in zip(rows, chosen, strict=True) if keep]

    for group, kinds in grouped.items():
        ids = {k for k in _kernel_keys(kinds.get(LayerLatency.kind, [])) if k is not None}
        if len(ids) < 2:
            yield group, None, kinds
            continue
        for key in sorted(ids):
            split = {kind: mine(found, key) for kind, found in kinds.items()}
            yield group, candidate_name(key, ids), split


def _mark_runs_that_disagree(rows: list[dict[str, Any]]) -> None:
    """`runs_agree` per row: False where another run of the same layer has an interval that does not
    overlap this one (the machine changed state between the runs: each interval holds for its own
    run only); None with a single run. Rows without a speed (kernel off, not measurable) take no part."""
    by_layer: dict[object, list[dict[str, Any]]] = {}
    for row in rows:
        verdict = row.get("verdict")
        timed = isinstance(row.get("speedup"), IntervalCell)
        if timed and isinstance(verdict, VerdictCell) and verdict.verdict.has_speed:
            by_layer.setdefault((row["layer"], row.get("kernel"), row.get("mode")), []).append(row)
    for runs in by_layer.values():
        for row in runs:
            others = [o for o in runs if o is not row]
            mine = row["speedup"]
            row["runs_agree"] = (
                None
                if not others
                else all(o["speedup"].low <= mine.high and mine.low <= o["speedup"].high for o in others)
            )


def kernels_running(running: Iterable[RunningNow]) -> dict[str, set[str]]:
    """Per layer, the kernel ids its instances run now (layers on PyTorch left out): what picks the
    measured speed a view shows beside what runs (`latest_verdicts(running=...)`)."""
    found: dict[str, set[str]] = {}
    for now in running:
        if now.kernel_id is not None:
            found.setdefault(now.layer_name, set()).add(now.kernel_id)
    return found


def latest_verdict_records(
    source: RecordSource, running: Mapping[str, Collection[str]] | None = None
) -> dict[str, Record]:
    """The record of the last inference verdict per layer name measured on a kernel (what the
    inventory shows as measured, and the run it comes from). A layer measured only while its kernel
    was off compared PyTorch with itself: that is no measured speedup, so it does not count here.
    With `running` (layer: the kernel ids it runs now), a layer on a kernel takes only that kernel's
    verdicts: the user's own kernel switched in after the bundled one was measured is "not
    measured", never the bundled one's speed."""
    found = {}
    for r in records_of(source, LayerVerdict):
        if not (r.layer and r.values.kernel_on and r.values.mode == INFERENCE):
            continue
        now = (running or {}).get(r.layer)
        if now and (r.provenance is None or r.provenance.kernel_id not in now):
            continue
        found[r.layer] = r
    return found


def latest_verdicts(
    source: RecordSource, running: Mapping[str, Collection[str]] | None = None
) -> dict[str, LayerVerdict]:
    """The verdicts of `latest_verdict_records`."""
    return {layer: record.values for layer, record in latest_verdict_records(source, running).items()}


def machine_table(source: RecordSource, *, wide: bool = False) -> pd.DataFrame:
    """Each machine's latest measured run of each layer, side by side.

    Long form (default): one row per (layer, kernel build, model, machine) with the speedup, its
    interval and the verdict of that machine's latest run of it (runs are never pooled: each
    interval holds for its own run). `wide=True`: one row per layer, kernel and model, one column
    per machine ("1.52x [1.41, 1.60] faster"). Rows of different model revisions or kernel builds
    are never put in one row: `merge.revision_notes(records)` says where they differ.
    """
    import pandas as pd

    from kernel_explorer.measure.merge import run_kernels

    summary = summarize(source, INFERENCE).to_pandas()
    if summary.empty or not bool(summary["speedup"].notna().any()):
        return pd.DataFrame(columns=["layer", "machine"])
    records = list(source.records())
    kernels = run_kernels(records)
    ends: dict[str, float] = {}
    for r in records:
        ends[r.run_id] = max(ends.get(r.run_id, 0.0), r.time)
    summary["kernel_build"] = [
        kernels.get((str(run), str(layer)), "")
        for run, layer in zip(summary["run_id"], summary["layer"], strict=True)
    ]
    if "kernel" not in summary.columns:
        summary["kernel"] = ""
    summary["kernel"] = summary["kernel"].fillna("")
    summary["order"] = [ends.get(str(run), 0.0) for run in summary["run_id"]]
    keys = ["layer", "kernel", "kernel_build", "model", "machine"]
    latest = summary.sort_values(by="order").groupby(keys, dropna=False, sort=False).tail(1)
    columns = [*keys, "host", "hardware", "run_id", "speedup", "speedup_low", "speedup_high"]
    columns += ["confidence", "noise_floor", "verdict", "pairs"]
    kept: Any = latest[[c for c in columns if c in latest.columns]]  # pandas: a frame, by its columns
    latest = kept.sort_values(by=["layer", "machine"])
    latest = latest.reset_index(drop=True)
    if not wide:
        return latest
    latest = latest.assign(cell=[_machine_cell(row) for row in latest.itertuples()])
    table = latest.pivot_table(
        index=["layer", "kernel", "kernel_build", "model"], columns="machine", values="cell", aggfunc="first"
    )
    return table.reset_index().rename_axis(columns=None)


def _machine_cell(row: Any) -> str:
    """A machine's cell of the wide table: the run's interval and verdict, or the verdict alone."""
    if row.speedup is None or row.speedup != row.speedup:
        return str(row.verdict)
    cell = IntervalCell(row.speedup, row.speedup_low, row.speedup_high, "x", row.confidence)
    return f"{cell.text()} {row.verdict}"


def layer_mode(mode: str) -> str:
    """ "inference" or "training"; any other mode is one line naming what a layer comparison takes."""
    from kernel_explorer._backend.modes import parse_mode
    from kernel_explorer.errors import KernelExplorerError

    parse_mode(mode)  # an unknown mode: the one line naming the three
    if mode not in (INFERENCE, TRAINING):
        raise KernelExplorerError(
            f"compare takes mode 'inference' or 'training', not {mode!r} "
            "(torch.compile is compared for the whole model: compare_model(mode='torch.compile'))."
        )
    return mode


def plan(request: LayerRequest) -> list[Measurement]:
    """Per layer: the comparison in the request's mode (sampling: instances, pairs, precision,
    budget_s, calibration_pairs), once per candidate the request names, each switched on for its
    turn (PyTorch, the bundled kernel and a peer side by side in one run); then, with
    `determinism_runs`, repeat-run identity (the values kind's). The captured inputs are read when
    the run starts (with autograd on for training)."""
    from kernel_explorer.measure.layer_comparison import compare_layer, determinism
    from kernel_explorer.measure.layer_training import compare_layer_training
    from kernel_explorer.measure.stats import DEFAULT_BUDGET_S, DEFAULT_PRECISION, check_sampling

    request.check_options()
    options = request.options
    check_sampling(
        options.get("pairs"),
        options.get("precision", DEFAULT_PRECISION),
        options.get("budget_s", DEFAULT_BUDGET_S),
    )
    training = layer_mode(request.mode) == TRAINING
    compare = compare_layer_training if training else compare_layer
    board, inputs, instances = request.board, request.inputs, request.instances
    sampling = {
        k: options[k] for k in ("pairs", "precision", "budget_s", "calibration_pairs") if k in options
    }
    runs = options.get("determinism_runs") or 0
    measurements: list[Measurement] = []
    for name in request.names:
        measurements += request.each_candidate(
            name,
            lambda run_id, n=name: compare(
                board, inputs(training), n, run_id=run_id, instances=instances, **sampling
            ),
        )
        if runs:
            measurements.append(
                lambda run_id, n=name: determinism(
                    board, inputs(False), n, run_id=run_id, instances=instances, runs=runs
                )
            )
    return measurements


KIND = Kind(
    name="time",
    title="Layer speed against PyTorch",
    records=(LayerLatency, LayerCalibration, LayerVerdict),
    summarize=summarize,
    plan=plan,
    order=10,
    concludes=(LayerVerdict,),
    samples=(LayerLatency,),
)
