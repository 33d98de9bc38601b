"""What one instance's forward runs at this moment: the record every door answers `running()` with.

Plain data, read from the model by the doors (`switching`) and read by everyone above them: the
inventory, the measurements' provenance, the views. It lives here, below both, so a measurement
can name it without importing the switching.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernel_explorer.inspect.kernel_paths import RunningPath


@dataclass(frozen=True)
class RunningNow:
    """What one instance's forward runs at this moment."""

    layer_name: str
    instance: str  # module path (for function layers: the module that calls the function)
    kernel_id: str | None = None  # metadata id of the loaded kernel module; None means PyTorch
    variant: str | None = None
    repository: str | None = None
    reason: str = ""  # why PyTorch runs although a kernel was asked for
    name: str = ""  # a person's name for what runs, when the door knows it (attention: the implementation)
    note: str = ""  # what the kernel did to its module ("changes its module on first use ...")
    layer_class: str = ""  # the kernel's layer class (Q4_1Linear): one repository may have several
    code_path: RunningPath = field(default_factory=RunningPath)  # "avx2" and why, of a multi-ISA kernel
    candidate: str = ""  # the label of the candidate switched on, when the door knows it
    through: str = ""  # how the model reaches the kernel, when the door knows it (attention: direct or glue)

    @property
    def is_kernel(self) -> bool:
        return self.kernel_id is not None

    def __str__(self) -> str:
        if not self.is_kernel:
            return "PyTorch" + (f" ({self.reason})" if self.reason else "")
        return f"{self.repository} [{self.variant}] {self.kernel_id}"
