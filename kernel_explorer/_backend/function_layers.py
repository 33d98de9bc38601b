"""Function layers (`use_kernelized_func`): the hidden dict a module keeps them in, what they wrap.

`kernels` keeps a module's function layers in the instance dict `_kernel_funcs` (not submodules),
and the plain function inside the forward's closure. These accessors are the only readers and
writers of either.

kernels 0.17 puts the one process-wide function module (the object the model's code calls by its
global name) in every holder's dict; 0.18+ gives each holder a private instance and routes the
global name to the running holder's. `owns_function` tells the two apart.
"""

from __future__ import annotations

import sys
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


def owns_function(holder: nn.Module, key: str) -> bool:
    """Whether `holder`'s function layer `key` is its own, not the process-wide object.

    The process-wide object is the one bound to the function's name in its module (what the model's
    code calls); kernels 0.18+ gives each holder a private instance of the same class instead.
    """
    current = kernel_functions(holder)[key]
    function = wrapped_function(current)
    module = sys.modules.get(getattr(function, "__module__", "") or "")
    name = getattr(function, "__name__", None)
    return module is not None and name is not None and getattr(module, name, None) is not current


def function_of_class(cls: type) -> tuple[str, str] | None:
    """(module, name) of the function a function layer's class wraps, where that module binds the
    name to an instance of the class (what the model's code calls), or None for any other class.

    The class is local to kernels' decorator, so pickle cannot name it; a worker process gets it
    again as `type(getattr(import_module(module), name))` (switching/isolation.py)."""
    forward = getattr(cls, "forward", None)
    for cell in getattr(forward, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        module, name = getattr(value, "__module__", None), getattr(value, "__name__", None)
        if callable(value) and module and name:
            bound = getattr(sys.modules.get(module), name, None)
            if type(bound) is cls:
                return module, name
    return None


def fresh_functions(module: nn.Module) -> None:
    """Give `module` new function layers of the same classes, on their class forward (a copy of a
    holder that must run PyTorch whatever the holder it was copied from runs); no-op without any."""
    functions = kernel_functions(module)
    if functions:
        module.__dict__[_ATTRIBUTE] = {key: type(func)() for key, func in functions.items()}
