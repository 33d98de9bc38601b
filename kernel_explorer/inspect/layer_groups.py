"""Which parts of a model `kernelize` can swap, found the way `kernelize` itself finds them.

`kernels` marks a replaceable layer in two ways, and this module reads exactly those marks, so it
works for any `nn.Module`, Transformers or not:
- a module class decorated with `use_kernel_forward_from_hub(name)` carries `kernel_layer_name`;
- a function decorated the same way and attached with `use_kernelized_func` is held, as a small
  module, by the modules that call it (read through `_backend.function_layers`).
Instances the user gave a layer name (`extension.extend`) carry the same mark on a subclass of their
own class; their group reads `added=True` and names that class as the original.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.function_layers import kernel_functions, wrapped_function

if TYPE_CHECKING:
    from torch import nn

#: the attention row's name in the inventory, and the breakdown's category for the attention computation
ATTENTION = "attention"
EXPERTS = "experts"  # the MoE experts implementation row (Transformers' experts interface, model-wide)


@dataclass(frozen=True)
class LayerGroup:
    """All instances of one kernel layer name in a model."""

    name: str  # the kernel layer name mappings use, e.g. "RMSNorm"
    kind: str  # "module" (a layer class), "function" (use_kernelized_func) or "attention" (model-wide)
    original: str  # qualified name of the class or function kernelize would replace
    instances: tuple[str, ...]  # module paths; for functions, the modules that hold them
    added: bool = False  # the user gave these instances the name (the model's code does not mark them)

    def __len__(self) -> int:
        return len(self.instances)


def _qualname(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


def find_kernel_layers(model: nn.Module) -> list[LayerGroup]:
    """Kernel layer groups of `model`, in the order they first appear in `named_modules()`."""
    found: dict[str, tuple[str, str, bool, list[str]]] = {}
    for path, module in model.named_modules():
        for func_module in kernel_functions(module).values():
            name = str(func_module.kernel_layer_name)
            original = _qualname(wrapped_function(func_module))
            found.setdefault(name, ("function", original, False, []))[3].append(path)
        cls: Any = type(module)  # a class kernels marked carries its layer name as an attribute
        if hasattr(cls, "kernel_layer_name"):
            condition = getattr(cls, "kernel_condition", None)
            if condition is not None and not condition(module):
                continue
            base = cls.__dict__.get("kernel_explorer_base")  # set on extension subclasses only
            entry = ("module", _qualname(base or cls), base is not None, [])
            found.setdefault(str(cls.kernel_layer_name), entry)[3].append(path)
    return [
        LayerGroup(name, kind, original, tuple(paths), added=added)
        for name, (kind, original, added, paths) in found.items()
    ]
