"""Errors a user can act on: every one the toolkit raises on purpose, all in this module (and its
warnings: `KernelExplorerWarning` and its kinds).

Every error the toolkit raises on purpose derives from `KernelExplorerError` and carries a message
that says what went wrong *and* what to do about it, in one line. The CLI and the notebook magics
print that line instead of a traceback. Each is exported by `kernel_explorer`, so a user catches it
by its public name.

May import: nothing
"""

from __future__ import annotations


class KernelExplorerError(Exception):
    """Base class: a problem the user can fix; `str(error)` names the fix."""


class KernelExplorerWarning(UserWarning):
    """Base class of the toolkit's warnings: in a notebook each shows as one styled line
    (`views/warning_line.py`), elsewhere as a Python warning; filter them by this class."""


class NoisyMachineWarning(KernelExplorerWarning):
    """PyTorch against itself moved more than 10% here (`measure/stats.HIGH_NOISE`): small
    differences are not findings."""


class DefaultModelMissingError(KernelExplorerError):
    """The GGUF file of the default model is not installed."""


class CacheDirError(KernelExplorerError):
    """The cache directory cannot be created or written."""


class IncompatibleVersionsError(KernelExplorerError):
    """The installed `kernels` and Transformers do not work together."""


class BuildError(KernelExplorerError):
    """A bundled kernel repository could not be built (missing compiler or headers, compile error)."""


class NoUsableKernelError(KernelExplorerError):
    """No candidate for a layer can run here; the message lists each one and why."""


class KernelSwitchError(KernelExplorerError):
    """A kernel failed to load or run (raised only in strict mode; otherwise PyTorch keeps running)."""


class ModelNotFoundError(KernelExplorerError):
    """A model named by folder or Hub id could not be loaded; the message lists what was tried."""


class MagicUsageError(KernelExplorerError):
    """Bad input to `%kernels`: shown as one line, with the usage of the command it was for."""


class SweepTaskError(KernelExplorerError):
    """The compare on a node failed; the message is its own last line."""


class RunCancelled(KernelExplorerError):
    """Stop pressed during the model's forward: the forward ends at its next kernel layer (a
    KernelExplorerError, so `run_model` lets it through as it is)."""
