"""The provenance each record carries: dtype, shape, threads, the kernel's code path and build,
the versions and the machine. Read once per instance and run, never inside a timed block."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import socket
import weakref
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.records import Provenance

if TYPE_CHECKING:
    from torch import nn

    from kernel_explorer.measure.switches import Switches

#: the machine's name in every record; a sweep sets it per node (two nodes may share one host)
HOST_VARIABLE = "KERNEL_EXPLORER_HOST"

_model_ids: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def host_name() -> str:
    """This machine's name in the records: `KERNEL_EXPLORER_HOST`, else the hostname (read each
    time: a sweep's worker sets the variable before it measures)."""
    return os.environ.get(HOST_VARIABLE) or socket.gethostname()


@functools.cache
def _cpu_identity() -> str:
    """The CPU model with ATen's code path ("AVX512"), and torch's build: what makes CPU numbers differ."""
    import torch

    from kernel_explorer.inspect.hardware import cpu_model

    return f"{cpu_model()} ({torch.backends.cpu.get_cpu_capability()}) | torch {torch.__version__}"


def hardware_identity(device: str) -> str:
    """What a number depends on: the CPU (or GPU) model, its ISA (or compute capability), torch's build."""
    import torch

    if device in ("cuda", "rocm") and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        build = f"rocm {torch.version.hip}" if torch.version.hip else f"cuda {torch.version.cuda}"
        return f"{torch.cuda.get_device_name()} (sm_{major}{minor}) | torch {torch.__version__} {build}"
    return _cpu_identity()


def model_identity(model: nn.Module) -> str:
    """The model's class and a fingerprint of its config (without local paths) and its weights.

    Two logs of the same checkpoint agree on it wherever the folder lies; a fine-tuned or
    re-converted model differs, so their numbers are never pooled. Read once per model (the sum of
    each parameter: about 0.1 s for 135M parameters), kept while the model lives."""
    found = _model_ids.get(model)
    if found is not None:
        return found
    import torch

    digest = hashlib.sha256()
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        data = {
            k: v for k, v in config.to_dict().items() if k not in ("_name_or_path", "transformers_version")
        }
        digest.update(repr(sorted(data.items(), key=lambda kv: kv[0])).encode())
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            total = float(tensor.double().sum()) if tensor.is_floating_point() else float(tensor.sum())
            digest.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}{total!r}".encode())
    found = f"{type(model).__name__} {digest.hexdigest()[:12]}"
    _model_ids[model] = found
    return found


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


def _machine_of(board: Switches) -> tuple[str, str, str]:
    """(torch version, kernels version, the CPU model and the accelerator where one is used)."""
    import torch

    torch_version, kernels_version, machine = _machine()
    if board.device in ("cuda", "rocm") and torch.cuda.is_available():
        machine = f"{machine}; {torch.cuda.get_device_name()}"
    return torch_version, kernels_version, machine


def provenance(board: Switches, name: str, path: str, args: tuple, kwargs: dict[str, Any]) -> Provenance:
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
        host=host_name(),
        hardware=hardware_identity(board.device),
        model=model_identity(board.model),
    )


def model_provenance(board: Switches) -> Provenance:
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
        host=host_name(),
        hardware=hardware_identity(board.device),
        model=model_identity(board.model),
    )
