"""Record each kernel layer instance's real inputs during one forward of the model.

Layers are measured on the activations the model really produces (their shapes, dtypes and value
ranges), not on random tensors. Capture stops keeping inputs once a memory cap is reached, so a
long prompt on a large model cannot exhaust memory.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernel_explorer.errors import KernelExplorerError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from kernel_explorer.measure.switches import Switches

DEFAULT_PROMPT = "The capital of France is Paris. Kernels make the same model run faster."
DEFAULT_MEMORY_CAP = 256 * 2**20
DEFAULT_TOKENS = 24


@dataclass
class CapturedInputs:
    """Inputs per (layer name, instance path): a list of (args, kwargs) calls, in call order."""

    calls: dict[tuple[str, str], list[tuple[tuple[Any, ...], dict[str, Any]]]] = field(default_factory=dict)
    bytes_kept: int = 0
    dropped: int = 0  # calls not kept because of the memory cap
    memory_cap: int = DEFAULT_MEMORY_CAP

    def for_layer(self, name: str) -> dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]]:
        return {path: calls for (layer, path), calls in self.calls.items() if layer == name}


def _tensor_bytes(value: Any) -> int:
    import torch
    from torch.utils._pytree import tree_leaves

    return sum(t.numel() * t.element_size() for t in tree_leaves(value) if isinstance(t, torch.Tensor))


def _detached(value: Any, keep_grad_flag: bool = False) -> Any:
    """Copies of the tensors in `value`, cut from the graph; with `keep_grad_flag`, a copy of a tensor
    that required grad is a leaf that requires grad (which inputs a training step differentiates)."""
    import torch
    from torch.utils._pytree import tree_map

    def cut(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        return t.detach().clone().requires_grad_(keep_grad_flag and t.requires_grad)

    return tree_map(cut, value)


def model_inputs(model: nn.Module, inputs: Any, tokenizer: Any | None) -> dict[str, Any]:
    """Keyword arguments for `model(**...)` from a prompt, a tensor of token ids, or a dict.

    Without inputs: the default prompt through the tokenizer, or, for a model without one,
    DEFAULT_TOKENS seeded random token ids from its vocabulary.
    """
    import torch

    if inputs is None and tokenizer is None:
        vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 0)
        if vocab > 0:
            generator = torch.Generator().manual_seed(0)
            return {"input_ids": torch.randint(0, vocab, (1, DEFAULT_TOKENS), generator=generator)}
    if inputs is None:
        inputs = DEFAULT_PROMPT
    if isinstance(inputs, str):
        if not inputs.strip():
            raise KernelExplorerError("The prompt is empty: give some text, or token ids as a tensor.")
        if tokenizer is None:
            raise KernelExplorerError(
                "A text prompt needs a tokenizer: Explorer(model, tokenizer=...), "
                "or pass token ids as a tensor."
            )
        return dict(tokenizer(inputs, return_tensors="pt"))
    if isinstance(inputs, torch.Tensor):
        if inputs.numel() == 0:
            raise KernelExplorerError("The inputs are empty: give at least one token id.")
        return {"input_ids": inputs if inputs.dim() > 1 else inputs.unsqueeze(0)}
    if isinstance(inputs, dict):
        return dict(inputs)
    raise KernelExplorerError(
        "Inputs must be a prompt (str), token ids (tensor) or keyword arguments (dict), "
        f"not {type(inputs).__name__}."
    )


def check_runnable(model: nn.Module) -> None:
    """A clear error for models that cannot run forward at all (weights on the meta device)."""
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        if tensor.device.type == "meta":
            raise KernelExplorerError(
                f"The model is on the meta device ({name} has no data): load its weights first, "
                "for example with from_pretrained(...) without device_map='meta'."
            )


def run_model(model: Callable[..., Any], kwargs: dict[str, Any], *, grad: bool = False) -> Any:
    """`model(**kwargs)` without gradients (with, when `grad`), with a clear error when the model
    rejects the inputs. `model`: a module, or the function `torch.compile` makes of one."""
    import torch

    try:
        with torch.set_grad_enabled(grad):
            return model(**kwargs)
    except (KernelExplorerError, _Enough):
        raise
    except Exception as error:
        keys = ", ".join(f"{k}={getattr(v, 'shape', type(v).__name__)}" for k, v in kwargs.items())
        raise KernelExplorerError(
            f"The model rejected the inputs ({keys}): {type(error).__name__}: {error}"
        ) from error


def capture_inputs(
    board: Switches,
    kwargs: dict[str, Any],
    *,
    memory_cap: int = DEFAULT_MEMORY_CAP,
    grad: bool = False,
    only: set[tuple[str, str]] | None = None,
) -> CapturedInputs:
    """Run the model once and keep each kernel layer instance's (args, kwargs), up to `memory_cap` bytes.

    With `grad`, the model runs with autograd on and the kept tensors that required grad there are
    leaves that require grad: the inputs a training-mode comparison differentiates. With `only`,
    the first call of those (layer, instance) keys alone is kept (a trial's longer inputs), and the
    forward stops as soon as each has its call: a trial's 257 tokens need the first decoder layer,
    not the whole model and its vocabulary-sized head.
    """
    if memory_cap <= 0:
        raise KernelExplorerError(f"memory_cap must be a positive number of bytes, got {memory_cap}.")
    check_runnable(board.model)
    captured = CapturedInputs(memory_cap=memory_cap)
    lock = threading.Lock()

    def keep(key: tuple[str, str], args: tuple[Any, ...], call_kwargs: dict[str, Any]) -> None:
        if only is not None and (key not in only or key in captured.calls):
            return
        size = _tensor_bytes(args) + _tensor_bytes(call_kwargs)
        with lock:
            if captured.bytes_kept + size > memory_cap:
                captured.dropped += 1
                return
            captured.bytes_kept += size
            captured.calls.setdefault(key, []).append((_detached(args, grad), _detached(call_kwargs, grad)))
            complete = only is not None and only.issubset(captured.calls)
        if complete:
            raise _Enough

    # hooks come and go under the lock, so no other thread's forward meets half of them
    with board.lock, contextlib.ExitStack() as doors:
        for door in board.doors.values():
            doors.enter_context(door.capturing(keep))
        with contextlib.suppress(_Enough):
            run_model(board.model, kwargs, grad=grad)
    return captured


class _Enough(Exception):
    """Raised from a capture hook once every call asked for is kept: the rest of the forward is not
    needed (`run_model` lets it through unwrapped)."""


def first_tensor(value: Any) -> torch.Tensor | None:
    """The first tensor in a (nested) output: what divergence and dtype are read from."""
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            found = first_tensor(item)
            if found is not None:
                return found
    return None
