"""kernel_explorer: see, switch and measure Hugging Face Hub kernels, in a notebook or without one.

Importing the package is cheap: torch, Transformers and the widget stack load only when used.
"""

from kernel_explorer._backend import quiet
from kernel_explorer.build.builder import BuiltRepo, build_hub
from kernel_explorer.catalog.availability import Availability, State
from kernel_explorer.catalog.candidates import Candidate
from kernel_explorer.errors import (
    CacheDirError,
    DefaultModelMissingError,
    IncompatibleVersionsError,
    KernelExplorerError,
    KernelSwitchError,
    NoUsableKernelError,
)
from kernel_explorer.explorer import Explorer
from kernel_explorer.inspect.hardware import Accelerator, CpuInfo, HardwareSnapshot, detect_hardware
from kernel_explorer.inspect.layer_groups import LayerGroup, find_kernel_layers
from kernel_explorer.inspect.running import RunningNow
from kernel_explorer.inspect.variants import CandidateVariants, VariantsReport
from kernel_explorer.inspect.versions import Compatibility, check_compatibility
from kernel_explorer.inventory.table import Inventory, InventoryRow
from kernel_explorer.loading import load_default_model, load_model, tiny_gpt2, tiny_llama
from kernel_explorer.measure.capture import CapturedInputs
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.records import (
    LayerDeterminism,
    LayerDivergence,
    LayerLatency,
    ModelAgreement,
    ModelDecode,
    ModelPrefill,
    ModelThroughput,
    Record,
    RunEvent,
)
from kernel_explorer.measure.runner import RunHandle
from kernel_explorer.measure.stats import NoisyMachineWarning
from kernel_explorer.measure.verdict import Verdict

__version__ = "0.1.0"

quiet.install()  # Transformers' no-op "Casting fp32 inputs back to torch.float32" line, dropped


def load_ipython_extension(shell: object) -> None:
    """`%load_ext kernel_explorer`: registers the `%kernels` magic."""
    from kernel_explorer.views.magics import load_ipython_extension as load

    load(shell)


def unload_ipython_extension(shell: object) -> None:
    """`%unload_ext kernel_explorer`: removes `%kernels` and puts the explored model back on PyTorch."""
    from kernel_explorer.views.magics import unload_ipython_extension as unload

    unload(shell)


__all__ = [
    "Accelerator",
    "Availability",
    "BuiltRepo",
    "CacheDirError",
    "Candidate",
    "CandidateVariants",
    "CapturedInputs",
    "Compatibility",
    "CpuInfo",
    "DefaultModelMissingError",
    "Explorer",
    "HardwareSnapshot",
    "IncompatibleVersionsError",
    "Inventory",
    "InventoryRow",
    "KernelExplorerError",
    "KernelSwitchError",
    "LayerDeterminism",
    "LayerDivergence",
    "LayerGroup",
    "LayerLatency",
    "ModelAgreement",
    "ModelDecode",
    "ModelPrefill",
    "ModelThroughput",
    "NoUsableKernelError",
    "NoisyMachineWarning",
    "Record",
    "ResultLog",
    "RunEvent",
    "RunHandle",
    "RunningNow",
    "State",
    "VariantsReport",
    "Verdict",
    "__version__",
    "build_hub",
    "check_compatibility",
    "detect_hardware",
    "find_kernel_layers",
    "load_default_model",
    "load_model",
    "tiny_gpt2",
    "tiny_llama",
]
