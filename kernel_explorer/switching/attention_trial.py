"""The attention row's trial: a kernel tried on the model's own attention calls before it stands.

Attention is model-wide and its modules are not alike: DeepSeek-V4's compressed-attention layers
append compressed keys behind a mask a flash kernel never sees, which a trial on its first,
sliding-window layer would not show. So one call is tried per kind of attention module (its
class, layer type, window and key length), each judged on its values (`probe.trial_verdict`,
against a float64 run of PyTorch's attention), and then one forward of the whole model: a model's
own code may fail around a flash kernel (HY-V4's attention indexes the 4-D mask a flash
implementation does not build), where no fallback of the attention function can answer.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend import attention_interface
from kernel_explorer.numerics.divergence import float64_reference
from kernel_explorer.switching.probe import (
    CANNOT_RUN,
    OK,
    UNVERIFIED,
    ProbeVerdict,
    describe_call,
    explain,
    trial_verdict,
)
from kernel_explorer.switching.trial_checks import checked_call

if TYPE_CHECKING:
    from torch import nn

Sample = tuple[tuple[Any, ...], dict[str, Any]]
#: where a trial with nothing to try starts
OK_VERDICT = ProbeVerdict(OK)


@functools.cache
def call_class() -> type:
    from torch import nn

    class AttentionCall(nn.Module):
        """One attention module's call of one attention function: what a measurement times."""

        def __init__(self, attention: nn.Module, function: Callable[..., Any], kind: str = "") -> None:
            super().__init__()
            self.attention = attention
            self.function = function
            self.kind = kind  # "eager", "flash" or "direct" (a kernel), "" (sdpa, ...): how it reads a mask

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            if len(args) >= 4:
                mask = args[3]
                if self.kind == "eager" and mask is None and getattr(self.attention, "is_causal", True):
                    # a call captured without a mask: the causal one the model gives eager
                    mask = attention_interface.causal_mask(args[0], args[1], kwargs.get("sliding_window"))
                elif self.kind == "flash" and getattr(mask, "dim", lambda: 0)() == 4:
                    mask = None  # captures are unpadded: a flash kernel's mask there is None
                elif self.kind == "direct" and attention_interface.is_plain_causal(mask, args[0], args[1]):
                    mask = None  # SDPA's mask function skips a plain causal one (eager's capture has it)
                args = (*args[:3], mask, *args[4:])
            return self.function(self.attention, *args, **kwargs)[0]

    return AttentionCall


def call_kind(name: str, pytorch: bool) -> str:
    """How an implementation reads a captured call's mask (`AttentionCall.kind`)."""
    if name == "eager":
        return "eager"
    if pytorch:
        return ""
    return "direct" if attention_interface.is_direct(name) else "flash"


def kind_of(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two attention calls alike for a trial: class, layer type, window, key shape."""
    return (
        type(module),
        getattr(module, "layer_type", None),
        kwargs.get("sliding_window"),
        tuple(getattr(args[1], "shape", ())) if len(args) > 1 else (),
    )


def try_each_kind(
    calls: Iterable[tuple[str, nn.Module, Sample | None]], try_one: Callable[[str, Sample], ProbeVerdict]
) -> ProbeVerdict:
    """`try_one` on the first call of each kind; the first verdict that does not run, else the last."""
    verdict = ProbeVerdict(UNVERIFIED, "no attention inputs to try it on (capture() first)")
    seen: set[tuple[Any, ...]] = set()
    for path, module, sample in calls:
        if sample is None:
            continue
        kind = kind_of(module, *sample)
        if kind in seen:
            continue
        seen.add(kind)
        verdict = try_one(path, sample)
        if not verdict.runs:
            return verdict
    return verdict


def try_call(
    path: str,
    sample: Sample,
    kernel: Callable[..., Any],
    pytorch: Callable[..., Any],
    kernel_module: Any | None = None,
) -> ProbeVerdict:
    """One captured call through the kernel and through PyTorch, judged on the values and checked
    for side effects (`trial_checks.checked_call`)."""
    args, kwargs = sample
    try:
        checked = checked_call(kernel, pytorch, args, kwargs)  # the session, the inputs, memory
    except Exception as error:
        return ProbeVerdict(CANNOT_RUN, explain(error, kernel_module))
    reference = None
    with contextlib.suppress(Exception):  # PyTorch's attention in float64 (sinks included)
        reference = float64_reference(pytorch.__self__, args, kwargs)
    return trial_verdict(
        checked.output,
        checked.expected,
        reference=reference,
        where=describe_call(path, args, kwargs),
        side_effects=checked.side_effects,
        mismatch=checked.mismatch,
    )


def try_model(model: nn.Module) -> ProbeVerdict:
    """One forward of the whole model on 8 tokens with the implementation it runs now."""
    import torch

    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    forward = getattr(model, "forward", None)
    if (
        not isinstance(vocab, int)
        or forward is None
        or "input_ids" not in inspect.signature(forward).parameters
    ):
        return ProbeVerdict(OK)
    first = next(model.parameters(), None)
    tokens = torch.arange(1, 9, device=None if first is None else first.device).remainder(vocab)[None]
    try:
        with torch.no_grad():
            model(input_ids=tokens)
    except Exception as error:
        return ProbeVerdict(CANNOT_RUN, f"the model's own attention code fails with it: {explain(error)}")
    return ProbeVerdict(OK)


def isolated_trial(
    folder: str | None,
    implementation: str,
    allow_all: bool,
    want_direct: bool,
    calls: list[tuple[str, nn.Module, Sample]],
    baseline: str,
) -> ProbeVerdict:
    """In the trial worker (`switching/isolation.py`): load a stranger's attention repository as the
    door would (its `attention_forward` directly, else through Transformers' flash glue), then
    `try_each_kind` on copies of the model's attention modules with their captured calls, each
    judged by `try_call` as the in-process trial judges it."""
    kernel_module = None
    if folder is not None:
        kernel_module = attention_interface.load_local(Path(folder))
        direct = attention_interface.direct_function(kernel_module) if want_direct else None
        if direct is not None:
            name = attention_interface.register_direct(Path(folder), direct)
        elif attention_interface.contract_of(kernel_module) is None:
            return ProbeVerdict(OK)  # nothing Transformers can call: the switch says why, loading nothing
        else:
            name = attention_interface.local_alias(Path(folder))
            attention_interface.load_and_register(name)
    else:
        name = implementation
        attention_interface.load_and_register(name, allow_all_kernels=allow_all)
    if not calls:
        return ProbeVerdict(UNVERIFIED, "no attention inputs to try it on (capture() first)")
    modules = {path: module for path, module, _ in calls}
    for module in modules.values():
        attention_interface.set_module_implementation(module, name)

    def one(path: str, sample: Sample) -> ProbeVerdict:
        module = modules[path]
        kernel = call_class()(
            module, attention_interface.attention_function(module, name), call_kind(name, False)
        )
        pytorch = call_class()(
            module, attention_interface.attention_function(module, baseline), call_kind(baseline, True)
        )
        return try_call(path, sample, kernel.forward, pytorch.forward, kernel_module)

    return try_each_kind(calls, one)
