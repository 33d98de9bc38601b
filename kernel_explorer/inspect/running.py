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
    short: str = ""  # what a person reads and types for it ("peer/plain-silu:PlainSilu"), when known
    through: str = ""  # how the model reaches the kernel, when the door knows it (attention: direct or glue)

    @property
    def is_kernel(self) -> bool:
        return self.kernel_id is not None

    def __str__(self) -> str:
        """`model.layers.0.input_layernorm: bundled/rmsnorm:RMSNorm (kernel _rmsnorm_cpu_1a2b, variant
        torch213-cxx11-cpu-x86_64-linux)`: the instance, then what it runs by the name a user chose it
        by (`short`: a peer without the hash of its build folder, `peer/plain-silu:PlainSilu`); a
        cache folder is no name a reader knows (`repository` keeps it)."""
        if not self.is_kernel:
            return f"{self.instance}: PyTorch" + (f" ({self.reason})" if self.reason else "")
        name = self.short or (self.candidate.split(" (", 1)[0] if self.candidate else self.name)
        if not name:
            name = self.repository.rstrip("/").rsplit("/", 1)[-1] if self.repository else "a kernel"
            name += f":{self.layer_class}" if self.layer_class else ""
        variant = f", variant {self.variant}" if self.variant else ""
        return f"{self.instance}: {name} (kernel {self.kernel_id}{variant})"
