"""The headless compare on any model: what `kernel-explorer compare/report --model` and a sweep's
task run, in one function, so a job on a GPU box, in CI or on a Ray node measures exactly the same way.

Everything a user can get wrong (a model that does not load, a layer it lacks, a log file that
cannot be written, a device this machine has not) is checked before minutes of measuring, and
fails as one `KernelExplorerError` line; the CLI turns it into exit status 2.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel_explorer.errors import KernelExplorerError

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class CompareJob:
    """One headless compare: which model, how, and where its log goes."""

    model: str | None = None  # a folder or a Hub id; None: the default model
    layers: tuple[str, ...] = ()  # () : every kernel layer
    dtype: str = "auto"
    device: str = "cpu"
    pairs: int | None = None
    precision: float = 0.05
    budget_s: float = 10.0
    out: str | None = None  # the JSON lines log (the explorer's records, with provenance)
    host: str | None = None  # this machine's name in the records (default: the hostname)


def log_path(path: str | Path | None) -> Path | None:
    """`path` as a file the log can be written to, or one line why not (checked before any work)."""
    if path is None:
        return None
    target = Path(path).expanduser()
    if target.is_dir():
        raise KernelExplorerError(f"{path} is a folder: give a file name, e.g. {target / 'results.jsonl'}")
    if not target.parent.is_dir():
        raise KernelExplorerError(
            f"cannot write {path}: folder {target.parent} does not exist; create it first"
        )
    writable = os.access(target, os.W_OK) if target.exists() else os.access(target.parent, os.W_OK)
    if not writable:
        raise KernelExplorerError(f"cannot write {path}: permission denied; choose a writable folder")
    return target


def _check_device(device: str) -> None:
    import torch

    if device == "cpu":
        return
    if device in ("cuda", "rocm") and torch.cuda.is_available():
        return
    if device == "mps" and torch.backends.mps.is_available():
        return
    raise KernelExplorerError(f"device {device!r} is not available on this machine; use --device cpu")


def open_explorer(job: CompareJob, *, progress: bool = False) -> tuple[Any, str]:
    """(the explorer of the job's model, a line naming the model), the bundled kernels built."""
    import torch

    from kernel_explorer.explorer import Explorer
    from kernel_explorer.loading import load_default_model, load_model
    from kernel_explorer.machine import build_hub

    if job.dtype not in DTYPES:
        raise KernelExplorerError(f"dtype {job.dtype!r} is not one of {', '.join(DTYPES)}")
    _check_device(job.device)
    if job.model is None:
        model, tokenizer = load_default_model(progress=progress)
        if job.dtype != "auto":
            model = model.to(getattr(torch, job.dtype))
        model = model.to(job.device)
        name = "the default model"
    else:
        model, tokenizer = load_model(job.model, dtype=job.dtype, device=job.device, progress=progress)
        name = job.model
    build_hub(progress=progress)  # after the model: a model that does not load fails in seconds
    explorer = Explorer.of(model, tokenizer=tokenizer)
    for layer in job.layers:
        explorer.group(layer)  # an unknown name fails now, with the names the model has
    return explorer, name


def headless_compare(
    job: CompareJob,
    *,
    measure: Callable[[Any, Sequence[str]], None],
    say: Callable[[str], None] = print,
    progress: bool = False,
) -> Any:
    """Run `job`: load, compare (through `measure(explorer, layers)`), write the log; the explorer.

    `job.host` names this machine in every record (a sweep's node), through the environment
    variable the provenance reads, restored after.
    """
    from kernel_explorer.explorer import check_sampling
    from kernel_explorer.machine import HOST_VARIABLE

    check_sampling(job.pairs, job.precision, job.budget_s)
    out = log_path(job.out)  # before minutes of loading and measuring
    before = os.environ.get(HOST_VARIABLE)
    if job.host:
        os.environ[HOST_VARIABLE] = job.host
    try:
        explorer, name = open_explorer(job, progress=progress)
        layers = list(job.layers) or explorer.layers
        say(f"Comparing {', '.join(layers)} on {name} (captured activations, interleaved pairs)")
        measure(explorer, layers)
        if out is not None:
            try:
                explorer.results.to_jsonl(out)
            except OSError as error:
                raise KernelExplorerError(f"cannot write {out}: {error.strerror}") from None
            say(f"Log written to {out} ({len(explorer.results)} records; ResultLog.load reads it back)")
    finally:
        if job.host:
            if before is None:
                os.environ.pop(HOST_VARIABLE, None)
            else:
                os.environ[HOST_VARIABLE] = before
    return explorer
