"""What an instance's forward runs: the kernel forward that falls back to PyTorch on its first error,
and how to read the running kernel back from a module (its id, variant and repository), so every
view reports what the model really runs rather than what was asked for (`RunningNow`, defined in
`inspect.running`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.layer_forwards import bound_function, installed_forward, kernel_origin

if TYPE_CHECKING:
    from torch import nn


class KernelForward:
    """An instance's kernel forward that turns to PyTorch, for good, the first time the kernel raises.

    `after_first` runs once, after the kernel's first call returns (the module-state guard looks for
    what the kernel changed; it recorded the module when the switch was made).
    """

    __slots__ = ("after_first", "kernel", "on_error", "original")

    def __init__(
        self,
        kernel: Any,
        original: Any,
        on_error: Callable[[Exception], None],
        after_first: Callable[[], None] | None = None,
    ) -> None:
        self.kernel = kernel
        self.original = original
        self.on_error = on_error
        self.after_first = after_first

    @property
    def __func__(self) -> Any:
        """The kernel's plain function, as on the bound method this stands in for.

        kernels 0.18+ reads `forward.__func__` of a model's function layers (`use_kernelized_func`)
        to call the selected forward directly under torch.compile.
        """
        return bound_function(self.kernel)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            result = self.kernel(*args, **kwargs)
        except Exception as error:
            self.after_first = None
            self.on_error(error)  # switches this layer off (and restores it); re-raises in strict mode
            return self.original(*args, **kwargs)
        after, self.after_first = self.after_first, None
        if after is not None:
            after()
        return result


def kernel_forward(target: nn.Module) -> Any | None:
    """The forward the kernel installed on `target` (without our fallback wrapper), or None."""
    forward = installed_forward(target)
    return forward.kernel if isinstance(forward, KernelForward) else forward


def describe_forward(target: nn.Module) -> tuple[str, str, str] | None:
    """(kernel id, variant, repository) of the kernel `target` runs, or None when it runs PyTorch."""
    forward = kernel_forward(target)
    if forward is None:
        return None
    function = bound_function(forward)
    if function is type(target).forward:
        return None
    origin = kernel_origin(function)
    if origin is None:
        return (f"custom:{getattr(function, '__qualname__', function)}", "-", "unknown")
    return origin.kernel_id, origin.variant, origin.repository


def kernel_class(target: nn.Module) -> str:
    """The class name of the kernel layer `target` runs (`Q4_1Linear`), or "" on PyTorch."""
    forward = kernel_forward(target)
    qualname = getattr(bound_function(forward), "__qualname__", "") if forward is not None else ""
    return qualname.split(".")[0] if "." in qualname else ""
