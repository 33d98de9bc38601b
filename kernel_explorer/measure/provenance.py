"""The provenance each record carries: dtype, shape, threads, the kernel's code path and build,
the versions and the machine. Read once per instance and run, never inside a timed block."""

from __future__ import annotations

import functools
import importlib.metadata
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.records import Provenance

if TYPE_CHECKING:
    from kernel_explorer.switching.board import Switchboard


@functools.cache
def _machine() -> tuple[str, str, str]:
    """(torch version, kernels version, CPU model): fixed for the process."""
    import torch

    from kernel_explorer.inspect.hardware import cpu_model

    try:
        kernels = importlib.metadata.version("kernels")
    except importlib.metadata.PackageNotFoundError:
        kernels = "not installed"
    return torch.__version__, kernels, cpu_model()


def _machine_of(board: Switchboard) -> tuple[str, str, str]:
    """(torch version, kernels version, the CPU model and the accelerator where one is used)."""
    import torch

    torch_version, kernels_version, machine = _machine()
    if board.device in ("cuda", "rocm") and torch.cuda.is_available():
        machine = f"{machine}; {torch.cuda.get_device_name()}"
    return torch_version, kernels_version, machine


def provenance(board: Switchboard, name: str, path: str, args: tuple, kwargs: dict[str, Any]) -> Provenance:
    """What `path` of layer `name` runs now, on which inputs and machine."""
    import torch
    from torch.utils import _pytree

    first = next((t for t in _pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)), None)
    (now,) = board.running(name, [path])
    torch_version, kernels_version, machine = _machine_of(board)
    return Provenance(
        dtype=None if first is None else str(first.dtype).removeprefix("torch."),
        shape=None if first is None else tuple(first.shape),
        threads=torch.get_num_threads(),
        isa=now.code_path.path or None,  # the path it runs now (pinned by a `@path` candidate, or chosen)
        kernel_id=now.kernel_id,
        candidate=now.candidate or None,
        variant=now.variant,
        torch=torch_version,
        kernels=kernels_version,
        machine=machine,
    )


def model_provenance(board: Switchboard) -> Provenance:
    """What a whole-model record (prefill, decode, agreement, throughput, time shares...) comes from:
    the model's dtype, threads, versions and machine. No single kernel or input shape: the switch
    state is the run's (its records say how many instances ran kernels), the lengths are in the values.
    """
    import torch

    dtype = next((p.dtype for p in board.model.parameters() if p.is_floating_point()), None)
    torch_version, kernels_version, machine = _machine_of(board)
    return Provenance(
        dtype=None if dtype is None else str(dtype).removeprefix("torch."),
        threads=torch.get_num_threads(),
        torch=torch_version,
        kernels=kernels_version,
        machine=machine,
    )
