"""What a model's attention hands Transformers' flash-attention glue, and what the glue does with it.

Transformers 5.22's `_process_flash_attention_kwargs` decides per keyword, from the parameter
names of the kernel's `flash_attn_varlen_func` (`_lazy_define_process_function`), what reaches the
kernel: attention sinks (`s_aux`) go to a function taking `s_aux` (vllm's FA3) or `learnable_sink`
(FA4) and are otherwise dropped without a word; a sliding window goes as `window_size` or is
dropped; `softcap` is refused (ValueError); dropout goes as `dropout_p` or is dropped. A kernel
taking `**kwargs` takes none of them (the glue reads names). A dropped feature is a different
attention with PyTorch's output shape: DeepSeek-V4 passes `s_aux=self.sinks`, and a kernel without
sinks moved its logits by more than their standard deviation.

And a model may refuse the kernel altogether: a class listing `_compatible_flash_implementations`
(GPT-OSS) has every other flash implementation replaced by the first of its list
(`PreTrainedModel._check_and_adjust_attn_implementation`: "This model is compatible with the
following flash attention implementations ... Automatically falling back to ...").

This module encodes those rules (checked against Transformers' source by tests/_backend/test_backend.py);
what it reads off a model is its attention modules' source and attributes, never a call.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    from torch import nn

#: the function of a repository whose parameter names Transformers reads (then the plain one)
SIGNATURE_OF = ("flash_attn_varlen_func", "flash_attn_func")


@dataclass(frozen=True)
class Feature:
    """One keyword a model's attention passes and how the flash glue forwards it."""

    keyword: str  # what the model passes to the attention interface ("s_aux")
    words: str  # how a person calls it ("sinks (s_aux)")
    accepted: tuple[str, ...]  # the kernel parameter names that take it, in the glue's order
    refused: bool = False  # the glue raises instead of dropping it (softcap)
    plural: bool = False  # "drop them" rather than "drop it"


FEATURES: tuple[Feature, ...] = (
    Feature("s_aux", "sinks (s_aux)", ("s_aux", "learnable_sink"), plural=True),
    Feature("softcap", "logit soft-capping (softcap)", ("softcap",), refused=True),
    Feature("sliding_window", "a sliding window (sliding_window)", ("window_size",)),
    Feature("dropout", "attention dropout (dropout)", ("dropout_p",)),
)


#: the features a model's attention may pass that keep a repository off the direct path (its
#: `attention_forward`, registered without the glue): such a function hands them to PyTorch's SDPA,
#: which drops sinks and softcap, while the glue gives them to a kernel that takes them (or says not)
GLUE_ONLY: tuple[str, ...] = ("s_aux", "softcap")


def _used(value: Any) -> bool:
    """Whether a passed value turns the feature on (None, 0 and 0.0 do not)."""
    if value is None or value is False:
        return False
    if isinstance(value, (int, float)):
        return value != 0
    return True


def _source(module_class: type) -> str:
    return _function_source(module_class.forward)


@functools.lru_cache(maxsize=256)
def _function_source(function: Any) -> str:
    """`inspect.getsource`, remembered per function: it reads and tokenizes the file on every call,
    and every table redraw (each click) asked it for each attention class (a class redefined in a
    notebook is a new function, read again)."""
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


def passed_features(
    modules: Iterable[nn.Module], captured: dict[str, Any] | None = None, *, training: bool = False
) -> dict[str, str]:
    """{keyword: person's words} of the features the model's attention modules turn on.

    Read from a captured call's keywords when there is one; else from the source of the modules'
    `forward` (`s_aux=self.sinks`, `sliding_window=self.sliding_window`): a keyword bound to an
    attribute counts when any module's attribute turns it on; to another expression, it counts.
    Dropout only counts when training (inference passes 0.0).
    """
    found: dict[str, str] = {}
    modules = list(modules)
    for feature in FEATURES:
        if feature.keyword == "dropout" and not training:
            continue
        if captured is not None and feature.keyword in captured:
            if _used(captured[feature.keyword]):
                found[feature.keyword] = feature.words
            continue
        for module_class in dict.fromkeys(type(m) for m in modules):
            match = re.search(rf"\b{feature.keyword}\s*=\s*([^,)\n]+)", _source(module_class))
            if match is None:
                continue
            value = match.group(1).strip()
            attribute = re.fullmatch(r"self\.(\w+)", value)
            if attribute is None:
                if value != "None":
                    found[feature.keyword] = feature.words
                continue
            same = [m for m in modules if type(m) is module_class]
            if any(_used(getattr(m, attribute.group(1), None)) for m in same):
                found[feature.keyword] = feature.words
    return found


def glue_parameters() -> set[str]:
    """Every keyword Transformers' flash glue reads (`flash_attention_forward`,
    `_flash_attention_forward`, `_process_flash_attention_kwargs`); any other keyword a model
    passes its attention interface goes into `**kwargs` and reaches no flash kernel."""
    from transformers.integrations.flash_attention import flash_attention_forward
    from transformers.modeling_flash_attention_utils import (
        _flash_attention_forward,
        _process_flash_attention_kwargs,
    )

    names: set[str] = set()
    for function in (flash_attention_forward, _flash_attention_forward, _process_flash_attention_kwargs):
        names |= {
            p.name
            for p in inspect.signature(function).parameters.values()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        }
    return names


def unread_tensors(captured: dict[str, Any] | None) -> list[str]:
    """The tensors a captured attention call passes that the flash glue never reads (Inkling's
    `position_bias`, relative-position logits eager adds to its scores): a flash kernel computes
    attention without them."""
    if not captured:
        return []
    import torch

    known = glue_parameters()
    return [k for k, v in captured.items() if isinstance(v, torch.Tensor) and k not in known]


def accepted_parameters(kernel: ModuleType) -> set[str] | None:
    """The parameter names Transformers reads off `kernel` to decide what to pass (None: no function)."""
    for name in SIGNATURE_OF:
        function = getattr(kernel, name, None)
        if function is not None:
            try:
                return set(inspect.signature(function).parameters)
            except (TypeError, ValueError):
                return None
    return None


def feature_gaps(
    passed: dict[str, str], accepted: set[str], label: str, unread: list[str] | None = None
) -> tuple[str, str]:
    """(what Transformers would drop, what it would refuse), one line each ("" when nothing):
    "this model's attention uses sinks (s_aux); bundled/flash_attn takes no sinks: Transformers
    would drop them"; `unread`: tensors the glue never reads (`unread_tensors`)."""
    dropped = [
        f"this model's attention passes `{name}`; Transformers' flash glue gives it to no kernel: "
        f"{label} would run without it"
        for name in unread or []
    ]
    refused = []
    for feature in FEATURES:
        if feature.keyword not in passed or accepted & set(feature.accepted):
            continue
        noun = feature.words.split(" (")[0].removeprefix("a ").removeprefix("attention ")
        if feature.refused:
            refused.append(
                f"this model's attention uses {feature.words}; {label} takes no {noun}: "
                "Transformers would refuse it (ValueError)"
            )
        else:
            what = "them" if feature.plural else "it"
            dropped.append(
                f"this model's attention uses {feature.words}; {label} takes no {noun}: "
                f"Transformers would drop {what}"
            )
    return "; ".join(dropped), "; ".join(refused)


def flash_redirect(model: nn.Module, name: str) -> str:
    """Where Transformers would send a flash implementation `name` for this model instead ("": it
    would not), in Transformers' words, from the class's `_compatible_flash_implementations`."""
    compatible = getattr(type(model), "_compatible_flash_implementations", None)
    if not compatible or name in compatible:
        return ""
    from transformers.utils.generic import is_flash_attention_requested

    if not is_flash_attention_requested(requested_attention_implementation=name):
        return ""
    listed = ", ".join(compatible)
    return (
        f"Transformers redirects this model's flash attention to {compatible[0]} "
        f"({type(model).__name__} is compatible with {listed} only), so it would not run this kernel"
    )


def flash_unsupported(model: nn.Module, name: str) -> str:
    """Why Transformers would refuse a flash-contract kernel `name` on this model ("": it would not).

    Transformers 5.25 lets a flash kernel from the Hub (or a local one) run only on a model class
    that declares flash-attention support (`_supports_flash_attn`); 5.22 ran it on any model. Read
    from the check itself, so a Transformers without it never gets the line.
    """
    if getattr(type(model), "_supports_flash_attn", True) or not _refuses_unsupported_flash():
        return ""
    from transformers.utils.generic import is_flash_attention_requested

    if not is_flash_attention_requested(requested_attention_implementation=name):
        return ""
    return (
        f"{type(model).__name__} does not declare flash-attention support, and this Transformers "
        "runs flash-attention kernels only on models that do"
    )


@functools.cache
def _refuses_unsupported_flash() -> bool:
    """Whether the installed Transformers refuses a flash kernel on a model without flash support."""
    from transformers import PreTrainedModel

    check = getattr(PreTrainedModel, "_check_and_adjust_attn_implementation", None)
    try:
        source = inspect.getsource(check) if check is not None else ""
    except (OSError, TypeError):
        return False
    return "does not support Flash Attention yet, so it cannot use" in source
