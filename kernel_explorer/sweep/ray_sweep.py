"""The sweep's driver on Ray: one compare task per node and model, logs merged as they arrive.

Each task is pinned to its node (`NodeAffinitySchedulingStrategy`, not soft) and never retried
elsewhere (`max_retries=0`): a sweep measures machines, so a task that moved would measure the wrong
one. A node that fails or dies loses only its own tasks, each reported in one line with its error;
the other nodes' logs still arrive. Every finished log is written to the output folder at once
(whole or not at all), so a rerun skips the (node, model) pairs whose file is there.

On a GPU cluster the same command runs one task per GPU node and model with `--device cuda`: each
task asks Ray for one GPU (`gpus_per_task`), nodes are chosen by their accelerator label
(`--resources accelerator_type:H100`, the label Ray gives each GPU kind, or a custom one), and each
node's records carry its GPU model and compute capability as its machine identity.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.sweep.nodes import Node, file_name, named_nodes
from kernel_explorer.sweep.task import compare_on_node

RAY_HINT = "the sweep needs Ray: pip install 'kernel-explorer[ray]'"


@dataclass(frozen=True)
class TaskOutcome:
    """What became of one (node, model) task."""

    node: str
    model: str
    state: str  # "done", "skipped" (done before), "failed"
    path: Path | None = None
    error: str = ""
    compare_s: float = 0.0  # seconds the compare process ran on the node
    task_s: float = 0.0  # seconds from submitting the task to its log written here
    records: int = 0

    @property
    def overhead_s(self) -> float:
        """What the sweep added to the compare: dispatch, the process start on the node, transfer."""
        return max(self.task_s - self.compare_s, 0.0) if self.state == "done" else 0.0

    def line(self) -> str:
        if self.state == "failed":
            return f"[{self.node}] {self.model}: FAILED: {self.error}"
        if self.state == "skipped":
            return f"[{self.node}] {self.model}: skipped, done before ({self.path})"
        return (
            f"[{self.node}] {self.model}: done, {self.records} records; compare {self.compare_s:.1f} s, "
            f"task {self.task_s:.1f} s (sweep overhead {self.overhead_s:.1f} s)"
        )


@dataclass
class SweepResult:
    """The merged log of every node and model, and each task's outcome."""

    log: ResultLog
    outcomes: list[TaskOutcome] = field(default_factory=list)

    @property
    def failed(self) -> list[TaskOutcome]:
        return [o for o in self.outcomes if o.state == "failed"]


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise KernelExplorerError(RAY_HINT) from None
    return ray


def compare_arguments(
    model: str,
    *,
    layers: Sequence[str] = (),
    dtype: str = "auto",
    device: str = "cpu",
    pairs: int | None = None,
    precision: float = 0.05,
    budget_s: float = 10.0,
) -> list[str]:
    """The `kernel-explorer compare` arguments of one task (without --out and --machine)."""
    arguments = ["--model", model, "--dtype", dtype, "--device", device]
    arguments += ["--precision", str(precision), "--budget", str(budget_s)]
    if pairs is not None:
        arguments += ["--pairs", str(pairs)]
    if layers:
        arguments += ["--layers", *layers]
    return arguments


def _write_whole(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all (what a rerun trusts as done)."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


def _absorb(merged: ResultLog, path: Path, node: str, model: str) -> int:
    """Append the records of one node's log to the merged log as they arrive (its subscribers
    hear them), run ids made unique across nodes and models (`node:model:run-1`); the count."""
    from kernel_explorer.measure.merge import read_records
    from kernel_explorer.measure.records import Record

    records = read_records(path)
    for r in records:
        merged.append(
            Record(
                f"{node}:{Path(model).name}:{r.run_id}", r.values, r.layer, r.instance, r.time, r.provenance
            )
        )
    return len(records)


def _one_line(error: BaseException) -> str:
    """A Ray error as one line: the task's own error where there is one, else Ray's first line."""
    cause = getattr(error, "cause", None)
    if cause is not None and not isinstance(cause, type(error)):
        error = cause
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("ray::", "Traceback", "File "))]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}".rstrip(": ")


def run_sweep(
    address: str,
    models: Sequence[str],
    *,
    out: str | Path,
    layers: Sequence[str] = (),
    resources: Sequence[str] = (),
    dtype: str = "auto",
    device: str = "cpu",
    pairs: int | None = None,
    precision: float = 0.05,
    budget_s: float = 10.0,
    cpus_per_task: float = 1,
    gpus_per_task: float | None = None,
    say: Callable[[str], None] = print,
    log: ResultLog | None = None,
) -> SweepResult:
    """Compare each of `models` on every node of the Ray cluster at `address` (or on the nodes that
    carry one of `resources`); each finished log goes to `out`/<node>__<model>.jsonl and into the
    merged log, with one progress line per task. A rerun skips the files already there.

    `gpus_per_task`: GPUs each task asks Ray for (default: 1 when `device` is "cuda", else 0).
    `log`: the merged log to stream into (a notebook's plot can subscribe to it); default: a new one.
    """
    if not models:
        raise KernelExplorerError("the sweep needs at least one model: --models FOLDER_OR_HUB_ID ...")
    folder = Path(out).expanduser()
    if folder.exists() and not folder.is_dir():
        raise KernelExplorerError(f"{folder} is a file: --out takes a folder for the logs")
    if not folder.parent.is_dir():
        raise KernelExplorerError(f"cannot write to {folder}: folder {folder.parent} does not exist")
    folder.mkdir(exist_ok=True)
    if not os.access(folder, os.W_OK):
        raise KernelExplorerError(f"cannot write to {folder}: permission denied; choose a writable folder")
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    gpus = gpus_per_task if gpus_per_task is not None else (1.0 if device == "cuda" else 0.0)
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        except Exception as error:  # ConnectionError, ValueError: one line, what to check
            raise KernelExplorerError(
                f"cannot reach the Ray cluster at {address}: {_one_line(error)}"
            ) from None
    try:
        nodes = named_nodes(ray.nodes())
        if resources:
            nodes = [n for n in nodes if n.carries(resources)]
        if not nodes:
            raise KernelExplorerError(
                f"no alive node of the cluster at {address} carries {', '.join(resources) or 'any resource'}"
            )
        say(f"Sweep: {len(models)} model(s) on {len(nodes)} node(s): {', '.join(n.name for n in nodes)}")
        remote = ray.remote(compare_on_node)
        merged = log if log is not None else ResultLog()
        outcomes: list[TaskOutcome] = []
        pending: dict[Any, tuple[Node, str, float]] = {}
        for node in nodes:
            for model in models:
                path = folder / file_name(node.name, model)
                if path.is_file():
                    _absorb(merged, path, node.name, model)
                    outcome = TaskOutcome(node.name, model, "skipped", path)
                    outcomes.append(outcome)
                    say(outcome.line())
                    continue
                strategy = NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False)
                arguments = compare_arguments(
                    model,
                    layers=layers,
                    dtype=dtype,
                    device=device,
                    pairs=pairs,
                    precision=precision,
                    budget_s=budget_s,
                )
                ref = remote.options(
                    num_cpus=cpus_per_task,
                    num_gpus=gpus,
                    max_retries=0,
                    retry_exceptions=False,
                    scheduling_strategy=strategy,
                ).remote(arguments, node.name)
                pending[ref] = (node, model, time.perf_counter())
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                node, model, submitted = pending.pop(ref)
                try:
                    found = ray.get(ref)
                except Exception as error:  # the task's error, a dead node, a crashed worker
                    outcome = TaskOutcome(node.name, model, "failed", error=_one_line(error))
                else:
                    path = folder / file_name(node.name, model)
                    _write_whole(path, found["log"])
                    count = _absorb(merged, path, node.name, model)
                    outcome = TaskOutcome(
                        node.name,
                        model,
                        "done",
                        path,
                        compare_s=float(found["compare_s"]),
                        task_s=time.perf_counter() - submitted,
                        records=count,
                    )
                outcomes.append(outcome)
                say(outcome.line())
    finally:
        if started_here:
            ray.shutdown()
    logs = [o.path for o in outcomes if o.path is not None]
    failed = sum(o.state == "failed" for o in outcomes)
    say(
        f"Sweep finished: {sum(o.state == 'done' for o in outcomes)} done, "
        f"{sum(o.state == 'skipped' for o in outcomes)} skipped, {failed} failed; {len(merged)} records "
        f"from {len(logs)} log(s) in {folder}"
    )
    return SweepResult(merged, outcomes)
