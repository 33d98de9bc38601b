"""This machine as the explorer sees it before any model, and the same compare on many machines.

What the command line, the magic and a script ask before (or beside) an `Explorer`: the hardware
and the variants `kernels` accepts here, whether the installed `kernels` and Transformers work
together, the bundled kernels (and anyone's kernel-builder repository) built for this machine, the
name this machine takes in the records, and a sweep of the compare over a Ray cluster. The
definitions live in `inspect`, `build`, `measure` and `sweep`; this module is their public name.

May import: build, errors, inspect, measure, sweep
"""

from kernel_explorer.build.builder import BuiltRepo, build_hub, build_path
from kernel_explorer.inspect.hardware import HardwareSnapshot, detect_hardware
from kernel_explorer.inspect.versions import Compatibility, check_compatibility, require_compatible
from kernel_explorer.measure.provenance import HOST_VARIABLE
from kernel_explorer.sweep import sweep

__all__ = [
    "HOST_VARIABLE",
    "BuiltRepo",
    "Compatibility",
    "HardwareSnapshot",
    "build_hub",
    "build_path",
    "check_compatibility",
    "detect_hardware",
    "require_compatible",
    "sweep",
]
