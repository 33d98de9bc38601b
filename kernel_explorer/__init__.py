"""kernel_explorer: see, switch and measure Hugging Face Hub kernels, in a notebook or without one.

`__all__` is what a user types: the `Explorer`, the loaders, this machine's checks, the report, the
results a user reads (`ResultLog`, `LayerVerdict`, `ModelVerdict`, `Verdict`) and every error. The
types the explorer hands back are importable by name from `kernel_explorer.explorer`, every record
type and result reading from `kernel_explorer.records`, the machine's from `kernel_explorer.machine`.

Importing the package is cheap and changes nothing: torch, Transformers and the widget stack load
only when used, and no logging filter or registry is touched until an `Explorer` or a loader runs.

May import: errors, explorer, loading, machine, records, views
"""

from pathlib import Path as _Path

from kernel_explorer.errors import (
    BuildError,
    CacheDirError,
    DefaultModelMissingError,
    IncompatibleVersionsError,
    KernelExplorerError,
    KernelSwitchError,
    MagicUsageError,
    ModelNotFoundError,
    NoUsableKernelError,
    RunCancelled,
    SweepTaskError,
)
from kernel_explorer.explorer import Explorer, find_kernel_layers
from kernel_explorer.loading import load_default_model, load_model, tiny_llama
from kernel_explorer.machine import build_hub, check_compatibility, detect_hardware
from kernel_explorer.records import LayerVerdict, ModelVerdict, NoisyMachineWarning, ResultLog, Verdict

__version__ = "0.1.0"


def report(explorer: Explorer, path: str | _Path) -> str:
    """Write every result of `explorer` so far, with the model, machine, date and switch state, to
    one self-contained HTML file (it opens offline); returns its path. A path that cannot be
    written raises one line, before anything is written."""
    from kernel_explorer.views.report import explorer_report

    return explorer_report(explorer, path)


def load_ipython_extension(shell: object) -> None:
    """`%load_ext kernel_explorer`: registers the `%kernels` magic."""
    from kernel_explorer.views.magics import load_ipython_extension as load

    load(shell)


def unload_ipython_extension(shell: object) -> None:
    """`%unload_ext kernel_explorer`: removes `%kernels` and puts the explored model back on PyTorch."""
    from kernel_explorer.views.magics import unload_ipython_extension as unload

    unload(shell)


__all__ = [
    "BuildError",
    "CacheDirError",
    "DefaultModelMissingError",
    "Explorer",
    "IncompatibleVersionsError",
    "KernelExplorerError",
    "KernelSwitchError",
    "LayerVerdict",
    "MagicUsageError",
    "ModelNotFoundError",
    "ModelVerdict",
    "NoUsableKernelError",
    "NoisyMachineWarning",
    "ResultLog",
    "RunCancelled",
    "SweepTaskError",
    "Verdict",
    "__version__",
    "build_hub",
    "check_compatibility",
    "detect_hardware",
    "find_kernel_layers",
    "load_default_model",
    "load_model",
    "report",
    "tiny_llama",
]
