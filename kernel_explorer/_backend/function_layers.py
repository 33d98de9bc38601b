"""Function layers (`use_kernelized_func`): the hidden dict a module keeps them in, what they wrap.

`kernels` keeps a module's function layers in the instance dict `_kernel_funcs` (not submodules),
and the plain function inside the forward's closure. These accessors are the only readers and
writers of either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

_ATTRIBUTE = "_kernel_funcs"


def kernel_functions(module: nn.Module) -> dict[str, nn.Module]:
    """The module's function layers by key (an empty dict for modules without any).

    The returned dict is the module's own: assigning a key replaces the function layer it calls.
    """
    return module.__dict__.get(_ATTRIBUTE, {})


def function_key(holder: nn.Module, layer_name: str) -> str | None:
    """The key under which `holder` keeps the function layer named `layer_name`, or None."""
    for key, func in kernel_functions(holder).items():
        if str(func.kernel_layer_name) == layer_name:
            return key
    return None


def wrapped_function(func_module: nn.Module) -> object:
    """The plain function behind a function layer (kept in its forward's closure)."""
    forward = type(func_module).forward
    for cell in forward.__closure__ or ():
        if callable(cell.cell_contents):
            return cell.cell_contents
    return type(func_module)
