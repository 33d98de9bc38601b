"""The layer door (a class the model marks, its forward replaced per instance by `kernelize`) and
the extension door (a class the model does not mark, named by `Explorer.extend`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from kernel_explorer._backend.layer_forwards import remove_forward
from kernel_explorer.switching.door import Keep, hooks_for_the_block
from kernel_explorer.switching.exported import DoorExport, Extension
from kernel_explorer.switching.instance_door import InstanceDoor

if TYPE_CHECKING:
    import torch
    from torch import nn

    from kernel_explorer.inspect.layer_groups import LayerGroup


class ModuleDoor(InstanceDoor):
    """A layer class marked with `use_kernel_forward_from_hub`: the instance's forward is replaced."""

    kind: ClassVar[str] = "module"

    @classmethod
    def serves(cls, group: LayerGroup) -> bool:
        return group.kind == "module" and not group.added

    def target(self, path: str, *, for_switching: bool) -> nn.Module:
        return self.host.module(path)

    def release(self, path: str) -> None:
        remove_forward(self.host.module(path))

    @contextlib.contextmanager
    def capturing(self, keep: Keep) -> Iterator[None]:
        handles = []
        for path in self.group.instances:

            def pre(module: Any, args: Any, kwargs: Any, key: tuple[str, str] = (self.name, path)) -> None:
                keep(key, args, kwargs)

            handles.append(self.host.module(path).register_forward_pre_hook(pre, with_kwargs=True))
        with hooks_for_the_block(handles):
            yield

    def timed_modules(self) -> list[tuple[nn.Module, str]]:
        return [(self.host.module(path), self.name) for path in self.group.instances]

    def covered_paths(self) -> set[str]:
        return set(self.group.instances)


class ExtensionDoor(ModuleDoor):
    """Instances the model does not mark, given a layer name by `Explorer.extend` (see extension.py).

    Its kernels may decline an instance (`ValueError`: weights they cannot pack); each switched
    instance is tried once at once on a small input, so a declined one shows PyTorch and the reason
    right away, and weights a kernel packs on first use are packed outside any timed call.
    """

    @classmethod
    def serves(cls, group: LayerGroup) -> bool:
        return group.kind == "module" and group.added

    def after_switch(self, paths: list[str]) -> None:
        trial_call([self.host.module(path) for path in paths])

    def export(self) -> DoorExport:
        """The layer's plan, and the class `extend` marked (the export marks it again, whatever runs)."""
        module, _, qualname = self.group.original.rpartition(".")
        extension = Extension(self.name, module, qualname, tuple(self.group.instances))
        return replace(super().export(), extensions=(extension,))

    def trial_inputs(self, path: str) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        found = super().trial_inputs(path)
        if found is not None:
            return found
        args = probe_inputs(self.host.module(path))
        return None if args is None else (args, {})


def probe_inputs(module: nn.Module) -> tuple[torch.Tensor, ...] | None:
    """A one-row input that `module`'s forward takes, for a trial call; None when not known."""
    import torch
    from torch import nn

    weight = getattr(module, "weight", None)
    if isinstance(module, nn.Linear) and isinstance(weight, torch.Tensor) and not weight.is_meta:
        return (torch.zeros(1, module.in_features, dtype=weight.dtype, device=weight.device),)
    return None


def trial_call(modules: Iterable[nn.Module]) -> None:
    """Call each switched module's forward once on a small input (hooks not run), output dropped.

    A kernel that cannot take an instance (weights it cannot pack) raises `ValueError` here rather
    than at the first real call, so the instance shows PyTorch and the reason at once; a kernel
    that packs weights on first use packs them now, outside any timed call.
    """
    import torch

    for module in modules:
        args = probe_inputs(module)
        if args is not None:
            with torch.no_grad():
                module.forward(*args)  # a raise goes through the switchboard's guard: back to PyTorch
