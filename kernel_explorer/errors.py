"""Errors a user can act on.

Every error the toolkit raises on purpose derives from `KernelExplorerError` and carries a message
that says what went wrong *and* what to do about it, in one line. The CLI and the notebook magics
print that line instead of a traceback.
"""

from __future__ import annotations


class KernelExplorerError(Exception):
    """Base class: a problem the user can fix; `str(error)` names the fix."""


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
