"""A guard on module state: what a kernel did to the module it runs on, and the exact way back.

Kernels from the Hub are written for their own needs: megablocks' CPU MoE layer, on its first
forward, replaces its experts' weights (`param.data = ...`, transposed, bfloat16, packed) and sets
flags on the module. After that, the model's own PyTorch forward no longer runs. So before a kernel
first runs on an instance, the guard records the state of the instance and its submodules: each
parameter and buffer (the object, an alias of its data, dtype, shape, stride, storage and version
counter) and the instance attributes. Keeping an alias costs nothing while the kernel leaves the
tensor alone; when the kernel swaps a tensor's data, the alias is what keeps the original alive
(the memory this costs is `kept_bytes`). A kernel known to change tensors in place (the probe finds
out on a copy) gets real copies instead, since an alias would change with them.

`restore()` puts back the original tensor objects and data, the attribute values, and removes the
attributes the kernel added: the module's PyTorch forward gives bitwise the outputs it gave before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.layer_forwards import remove_forward
from kernel_explorer._backend.platform import version_counter

if TYPE_CHECKING:
    import torch
    from torch import nn

#: instance attributes that are torch's bookkeeping or the door's own, never a kernel's state
_IGNORED = frozenset({"forward", "_parameters", "_buffers", "_modules", "training"})
#: a kernel may hold a module's state up to this share of the memory available when it is switched on
DEFAULT_MEMORY_SHARE = 0.25


@dataclass(frozen=True)
class _Tensor:
    owner: nn.Module
    kind: str  # "_parameters" or "_buffers"
    name: str
    obj: torch.Tensor  # the Parameter or buffer object
    data: torch.Tensor  # an alias of its data (or a copy, for kernels that change tensors in place)
    dtype: Any
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    pointer: int
    version: int
    requires_grad: bool
    copied: bool  # `data` is a copy (kernels that change tensors in place), not an alias

    @classmethod
    def of(cls, owner: nn.Module, kind: str, name: str, obj: torch.Tensor, copy: bool) -> _Tensor:
        data = obj.detach().clone() if copy else obj.data
        return cls(
            owner, kind, name, obj, data, obj.dtype, tuple(obj.shape), tuple(obj.stride()),
            obj.data_ptr(), version_counter(obj), obj.requires_grad, copy,
        )  # fmt: skip

    @property
    def current(self) -> Any:
        return getattr(self.owner, self.kind).get(self.name)

    def change(self) -> str:
        """What changed, in a few words ("" when nothing did)."""
        now = self.current
        if now is not self.obj:
            if now is None:
                return "removed"
            return f"replaced ({_dtype(now.dtype)})" if now.dtype != self.dtype else "replaced"
        if now.dtype != self.dtype:
            return f"converted to {_dtype(now.dtype)}"
        if tuple(now.shape) != self.shape or tuple(now.stride()) != self.stride:
            return "reshaped"
        if now.data_ptr() != self.pointer:
            return "its data swapped"
        if version_counter(now) != self.version:
            return "changed in place"
        return ""

    @property
    def kept_bytes(self) -> int:
        """Bytes of the original this guard keeps alive that the module no longer holds."""
        now = self.current
        same = now is not None and now.data_ptr() == self.pointer
        return 0 if same and not self.copied else self.data.numel() * self.data.element_size()

    def restore(self, converted: tuple[Any, Any] | None = None) -> None:
        """The original object and data; `converted` = (the model's dtype when recorded, now): the
        user converted the model since (`model.to(torch.bfloat16)`), so a tensor that had the model's
        dtype comes back in the model's dtype now, never leaving a mixed model."""
        import torch

        data, dtype = self.data, self.dtype
        if converted is not None and self.dtype == converted[0] and self.data.is_floating_point():
            data, dtype = self.data.to(converted[1]), converted[1]
        with torch.no_grad():
            if data is not self.data:  # the original, in the dtype the model has now
                if self.obj.dtype != dtype or self.obj.data_ptr() != self.pointer or self.copied:
                    self.obj.data = data
            elif self.copied:
                if self.obj.data_ptr() != self.pointer or self.obj.dtype != self.dtype:
                    self.obj.data = self.data
                elif version_counter(self.obj) != self.version:
                    self.obj.copy_(self.data)  # changed in place: our copy is the original
            elif self.obj.data_ptr() != self.data.data_ptr() or self.obj.dtype != self.dtype:
                self.obj.data = self.data
        getattr(self.owner, self.kind)[self.name] = self.obj


def _dtype(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


class ModuleGuard:
    """The recorded state of one module (and its submodules), to tell and undo a kernel's changes."""

    def __init__(
        self, module: nn.Module, *, copy_tensors: bool = False, model: nn.Module | None = None
    ) -> None:
        self.module = module
        self.model = model  # whose dtype restore follows (a model converted while the kernel ran)
        self.model_dtype = _floating_dtype(model)
        self.tensors: list[_Tensor] = []
        self.attributes: dict[int, tuple[nn.Module, dict[str, Any]]] = {}
        for _, owner in module.named_modules(remove_duplicate=True):
            for kind in ("_parameters", "_buffers"):
                for name, obj in getattr(owner, kind).items():
                    if obj is not None:
                        self.tensors.append(_Tensor.of(owner, kind, name, obj, copy_tensors))
            self.attributes[id(owner)] = (owner, dict(owner.__dict__))  # filtered when read: cheap here

    def changes(self) -> list[str]:
        """One phrase per change since recording (`weight converted to bfloat16`, `packed_weight added`)."""
        found = []
        for tensor in self.tensors:
            what = tensor.change()
            if what:
                found.append(f"{tensor.name} {what}")
        for owner, before in self.attributes.values():
            now = owner.__dict__
            found += [f"{k} added" for k in now if k not in before and _kernel_state(k)]
            found += [f"{k} removed" for k in before if k not in now and _kernel_state(k)]
            found += [f"{k} set" for k in before if k in now and now[k] is not before[k] and _kernel_state(k)]
        return found

    @property
    def in_place(self) -> bool:
        """Whether the kernel changed a tensor in place (an alias cannot restore that)."""
        return any(t.change() == "changed in place" for t in self.tensors)

    @property
    def kept_bytes(self) -> int:
        """Bytes the kernel's changes hold while it is on: originals only the guard keeps alive, and
        tensors the kernel added as attributes (packed weights a kernel caches)."""
        added = 0
        for owner, before in self.attributes.values():
            for key, value in owner.__dict__.items():
                if key not in before and _kernel_state(key):
                    added += _tensor_bytes(value)
        return sum(t.kept_bytes for t in self.tensors) + added

    def summary(self) -> str:
        """`changes its module on first use (weights converted to bfloat16, packed_weight added)`."""
        found = self.changes()
        if not found:
            return ""
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        return f"changes its module on first use ({shown})"

    def restore(self) -> None:
        """The module exactly as recorded: original tensors and data, attribute values, no additions;
        in the model's dtype now where the user converted the model since recording."""
        now = _floating_dtype(self.model)
        converted = (self.model_dtype, now) if now is not None and now != self.model_dtype else None
        for tensor in self.tensors:
            tensor.restore(converted)
        for owner, before in self.attributes.values():
            for key in [k for k in owner.__dict__ if k not in before and _kernel_state(k)]:
                del owner.__dict__[key]
            for key, value in before.items():
                if _kernel_state(key) and owner.__dict__.get(key, _MISSING) is not value:
                    owner.__dict__[key] = value

    def original(self) -> nn.Module:
        """A shallow copy of the module holding the recorded state, for PyTorch's side of a comparison
        while the kernel holds the module changed (shares the original tensors: no copy)."""
        import copy

        from torch import nn

        shadows: dict[int, nn.Module] = {}

        def shadow(owner: nn.Module) -> nn.Module:
            if id(owner) in shadows:
                return shadows[id(owner)]
            made = copy.copy(owner)
            remove_forward(made)
            before = self.attributes.get(id(owner), (owner, {}))[1]
            for key in [k for k in made.__dict__ if k not in before and _kernel_state(k)]:
                del made.__dict__[key]
            made.__dict__.update({k: v for k, v in before.items() if _kernel_state(k)})
            # the original's empty slots (a Linear without bias) stay; its tensors are set below
            made._parameters = {k: None for k, v in owner._parameters.items() if v is None}
            made._buffers = {k: None for k, v in owner._buffers.items() if v is None}
            made._modules = {
                name: None if child is None else shadow(child) for name, child in owner._modules.items()
            }
            shadows[id(owner)] = made
            return made

        root = shadow(self.module)
        for tensor in self.tensors:
            owner = shadows[id(tensor.owner)]
            if tensor.kind == "_parameters":
                owner._parameters[tensor.name] = nn.Parameter(tensor.data, requires_grad=tensor.requires_grad)
            else:
                owner._buffers[tensor.name] = tensor.data
        return root


_MISSING = object()


def _floating_dtype(model: nn.Module | None) -> Any:
    """The dtype of the model's first floating-point parameter (None without a model or one)."""
    if model is None:
        return None
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), None)


def _kernel_state(key: str) -> bool:
    """Whether an instance attribute is state a kernel may set (not torch's bookkeeping, not hooks,
    not the forward the door installs)."""
    return key not in _IGNORED and not key.endswith(("_hooks", "_hooks_with_kwargs", "_always_called"))


def _tensor_bytes(value: Any) -> int:
    """Bytes of the tensors in `value` (a tensor, or a list/tuple/dict of them)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    return 0


def available_memory() -> int | None:
    """Bytes of memory available now (Linux' MemAvailable), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
