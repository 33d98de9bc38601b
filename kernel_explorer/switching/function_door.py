"""The function door: a kernel function the model attaches to its modules (`use_kernelized_func`).

The function is one module object for the whole process (Transformers' `apply_rotary_pos_emb`);
switching one holder alone gives that holder its own copy, routed per thread (`routes.py`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from kernel_explorer._backend.function_layers import function_key, kernel_functions
from kernel_explorer._backend.layer_forwards import class_forward, installed_forward
from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.switching import routes
from kernel_explorer.switching.door import Keep, hooks_for_the_block
from kernel_explorer.switching.exported import LayerPlan, some
from kernel_explorer.switching.forwards import describe_forward
from kernel_explorer.switching.instance_door import InstanceDoor

if TYPE_CHECKING:
    from torch import nn

    from kernel_explorer.inspect.layer_groups import LayerGroup


class FunctionDoor(InstanceDoor):
    """Per-holder switching of a process-wide kernel function."""

    kind: ClassVar[str] = "function"

    @classmethod
    def serves(cls, group: LayerGroup) -> bool:
        return group.kind == "function"

    def export_notes(self, plan: LayerPlan) -> tuple[str, ...]:
        """Transformers keeps one function object per process: a mapping cannot choose holders."""
        ran = sum(len(c.instances) for c in plan.choices)
        return (
            f"{plan.layer}: the explorer ran {plan.main.label} for {ran}"
            f" of {plan.total} holders ({some(plan.main.instances)}); Transformers keeps one function "
            f"object per process, so a mapping cannot choose holders: the export runs "
            f"{plan.main.label} for all {plan.total}",
        )

    def key(self, holder: nn.Module) -> str:
        found = function_key(holder, self.name)
        if found is None:
            raise KernelExplorerError(f"{type(holder).__name__} has no kernel function {self.name!r}")
        return found

    def target(self, path: str, *, for_switching: bool) -> nn.Module:
        holder = self.host.module(path)
        if for_switching:
            return routes.copy_for(holder, self.key(holder))
        return kernel_functions(holder)[self.key(holder)]

    def shared(self, path: str) -> nn.Module:
        holder = self.host.module(path)
        return routes.shared_function(holder, self.key(holder))

    def trial_module(self, path: str) -> nn.Module:
        return type(self.shared(path))()  # a fresh function module: nothing of the process's is touched

    def model_paths(self) -> list[str] | None:
        """Not judged on the whole model: the model calls the function by its global name, which a
        shadow of the model does not reach (its per-call trial, at both lengths, stands)."""
        return None

    def release(self, path: str) -> None:
        holder = self.host.module(path)
        routes.detach(holder, self.key(holder))  # the holder's copy goes, and all it cached with it

    def running_target(self, path: str) -> nn.Module | None:
        target = self.target(path, for_switching=False)
        if routes.is_routed(target):  # a shared function routing others' copies: what it runs itself
            return routes.stand_in(target)
        return target

    def forwards(self, path: str) -> tuple[Any, Any, bool]:
        target = self.target(path, for_switching=False)
        pytorch = class_forward(target)
        if routes.is_routed(target):
            stand_in = routes.stand_in(target)
            current = pytorch if stand_in is None else stand_in.forward
            return current, pytorch, stand_in is not None and describe_forward(stand_in) is not None
        return installed_forward(target) or pytorch, pytorch, describe_forward(target) is not None

    @contextlib.contextmanager
    def capturing(self, keep: Keep) -> Iterator[None]:
        """Holders say which instance is running (per thread); the shared function's pre-hook keeps
        each call's inputs under that instance."""
        running = threading.local()
        handles = []
        shared: dict[int, nn.Module] = {}
        for path in self.group.instances:
            holder = self.host.module(path)

            def enter(module: Any, args: Any, key: tuple[str, str] = (self.name, path)) -> None:
                running.__dict__.setdefault("stack", []).append(key)

            def leave(module: Any, args: Any, output: Any) -> None:
                stack = running.__dict__.get("stack")
                if stack:  # a forward that began before these hooks came has no entry here
                    stack.pop()

            handles.append(holder.register_forward_pre_hook(enter))
            handles.append(holder.register_forward_hook(leave, always_call=True))
            function = self.shared(path)
            shared[id(function)] = function

        def call(module: Any, args: Any, kwargs: Any) -> None:
            stack = getattr(running, "stack", None)
            if stack:
                keep(stack[-1], args, kwargs)

        handles += [f.register_forward_pre_hook(call, with_kwargs=True) for f in shared.values()]
        with hooks_for_the_block(handles):
            yield

    def timed_modules(self) -> list[tuple[nn.Module, str]]:
        found = {id(f): f for f in (self.shared(path) for path in self.group.instances)}
        return [(function, self.name) for function in found.values()]
