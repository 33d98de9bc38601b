"""Transformers' attention door: its interface, its names, and how a local repository enters it.

Transformers switches attention model-wide with `model.set_attn_implementation(name)`; a name of
the form `org/repo[@rev][:fn]` is loaded by `integrations.hub_kernels.load_and_register_attn_kernel`
through `kernels.get_kernel` and registered in `ALL_ATTENTION_FUNCTIONS` with Transformers' own
wrapper (`flash_attention_forward` for repositories exposing `flash_attn_varlen_func`), and that
wrapper finds the kernel again, at every call, by the model's implementation name.

That wrapper only knows Hub ids. A local repository (bundled, or a user's folder) therefore enters
under a Hub-shaped alias that `kernels` itself resolves to the folder: `kernels.get_kernel` consults
its `LOCAL_KERNELS` overrides (`repo_id=path:...`) before the Hub. So the whole path stays
Transformers' and `kernels`' own: `set_attn_implementation(alias)` -> `load_and_register_attn_kernel`
-> `kernels.get_kernel` -> the local build -> `flash_attention_forward`. `LOCAL_KERNELS` is
undocumented in kernels 0.17 (an internal, listed in `internals.py`); the explorer only ever adds
entries of its own to it and keeps the user's.

A local repository that offers `attention_forward` (Transformers' attention-interface signature)
is registered directly instead (`register_direct`): under a name without "flash", with SDPA's mask
function, so the model calls the kernel as it calls `sdpa_attention_forward`, with none of the
flash glue around it.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from types import ModuleType

    from torch import nn
    from transformers import PreTrainedConfig, PreTrainedModel

#: the implementations Transformers always has on a CPU (PyTorch's), in the order a row lists them
BUILTIN: tuple[str, ...] = ("eager", "sdpa")
LOCAL_ORG = "kernel-explorer-local"
#: what Transformers' registration accepts from a repository, in the order it checks
CONTRACT = (
    "flash_attn_varlen_func",
    "flash_attn_forward + supports_flash_attn",
    "sparse_atten_func",
    "a function named after ':' in the string",
)
_CAPTURE = "kernel_explorer_capture"  # no "flash", "sdpa" or "/": Transformers checks nothing more
#: a repository's own `attention_forward`, registered directly (no "flash": Transformers would
#: take the name for flash attention and unpad, build no mask, redirect GPT-OSS...)
DIRECT_PREFIX = "kernel_explorer_direct_"
#: the function a repository offers with Transformers' attention-interface signature
DIRECT_FUNCTION = "attention_forward"


def has_attention_interface(model: nn.Module) -> bool:
    """Whether `model` switches attention through Transformers' interface (`set_attn_implementation`)."""
    config = getattr(model, "config", None)
    if not hasattr(model, "set_attn_implementation") or config is None:
        return False
    if not hasattr(config, "_attn_implementation"):
        return False
    can_set = getattr(type(model), "_can_set_attn_implementation", None)
    return bool(can_set()) if callable(can_set) else True


def implementation(model: nn.Module) -> str:
    """What the model's attention runs now (`eager`, `sdpa`, a Hub string...)."""
    return str(_config(model)._attn_implementation)


def _config(module: nn.Module) -> PreTrainedConfig:
    """The Transformers config a model or one of its modules carries (`nn.Module` types every
    attribute it does not know as `Tensor | Module`)."""
    return cast("PreTrainedConfig", module.config)


def set_implementation(model: nn.Module, name: str, *, allow_all_kernels: bool = False) -> None:
    """Transformers' own switch; on any error the model's implementation is what it was."""
    before = implementation(model)
    transformers_model = cast("PreTrainedModel", model)  # has_attention_interface(model) holds
    try:
        transformers_model.set_attn_implementation(name, allow_all_kernels=allow_all_kernels)
    except BaseException:
        if implementation(model) != before:
            transformers_model.set_attn_implementation(before)
        raise


def is_hub_string(name: str) -> bool:
    """Whether `name` has the `org/repo[@rev][:fn]` form Transformers loads through `kernels`."""
    from transformers.integrations.hub_kernels import is_kernel

    return bool(is_kernel(name))


def parse_hub_string(name: str) -> tuple[str, str | None, int | None, str | None]:
    """(repo id, revision, version, function) as `load_and_register_attn_kernel` reads the string."""
    from transformers.integrations.hub_kernels import get_attn_kernel_version

    repo, _, function = name.partition(":")
    repo_id, _, revision = repo.partition("@")
    revision = revision.strip() or None
    repo_id = repo_id.strip()
    version = None if revision is not None else get_attn_kernel_version(repo_id)
    return repo_id, revision, version, (function.strip() or None)


def known_implementations() -> list[str]:
    """Every name `set_attn_implementation` accepts as it is (besides `org/repo` strings)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return list(dict.fromkeys([*BUILTIN, *ALL_ATTENTION_FUNCTIONS.valid_keys()]))


def flash_fallbacks() -> list[tuple[str, str, tuple[str, ...]]]:
    """(implementation, Hub repo, devices Transformers lists for it) for its flash-attention fallbacks."""
    from transformers.modeling_flash_attention_utils import (
        FLASH_ATTN_KERNEL_DEVICES,
        FLASH_ATTN_KERNEL_FALLBACK,
    )

    return [
        (name, repo, tuple(FLASH_ATTN_KERNEL_DEVICES.get(repo, ())))
        for name, repo in FLASH_ATTN_KERNEL_FALLBACK.items()
    ]


def contract_of(module: ModuleType, function: str | None = None) -> str | None:
    """Which of Transformers' attention contracts `module` meets (None: none of them)."""
    if hasattr(module, "flash_attn_varlen_func"):
        return "flash_attn_varlen_func"
    if hasattr(module, "sparse_atten_func"):
        return "sparse_atten_func"
    if hasattr(module, "flash_attn_forward") and hasattr(module, "supports_flash_attn"):
        return "flash_attn_forward"
    if function is not None and hasattr(module, function):
        return function
    return None


def load_local(path: Path) -> ModuleType:
    """The repository at `path`, through `kernels`' own local loader."""
    from kernels import get_local_kernel

    return get_local_kernel(Path(path))


def local_alias(path: Path) -> str:
    """A Hub-shaped name for the local repository at `path` that `kernels.get_kernel` resolves to it.

    Registered in `LOCAL_KERNELS` (kept for the process: Transformers' wrapper may load it again at
    any call when another implementation ran in between).
    """
    path = Path(path).resolve()
    folder = re.sub(r"[^A-Za-z0-9._-]", "-", path.name) or "repo"
    alias = f"{LOCAL_ORG}/{folder}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    map_to_folder(alias.split("@")[0], path)
    return alias


def direct_function(module: ModuleType) -> Callable[..., Any] | None:
    """The repository's `attention_forward` (Transformers' attention-interface signature, as
    `sdpa_attention_forward`'s), or None when it offers only flash-attn functions."""
    found = getattr(module, DIRECT_FUNCTION, None)
    return found if callable(found) else None


def is_direct(name: str) -> bool:
    """Whether `name` is a repository's `attention_forward` the explorer registered directly."""
    return name.startswith(DIRECT_PREFIX)


def register_direct(path: Path, function: Callable[..., Any]) -> str:
    """Register `function` (the repository at `path`'s `attention_forward`) in Transformers'
    attention interface with SDPA's mask function, under a name of its own; returns the name.

    The model then calls it as it calls `sdpa_attention_forward`, with SDPA's mask (None for an
    unpadded causal prefill or a decode step): no flash-attention glue (unpadding, cu_seqlens,
    dtype casts, kwargs processing) around the kernel. The name stays registered for the process,
    as Transformers keeps a Hub kernel's: a forward running in another thread while the model is
    switched off may still look it up.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    path = Path(path).resolve()
    name = f"{DIRECT_PREFIX}{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    registered = ALL_ATTENTION_FUNCTIONS.get(name)
    if registered is not function and getattr(registered, "__wrapped__", None) is not function:
        AttentionInterface.register(name, function)  # else kept: another model may run it, guarded
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    return name


def through(name: str) -> str:
    """How the model reaches the kernel registered as `name`, in a few words: directly (the
    repository's `attention_forward`), or through Transformers' function around it (its flash
    glue, `flash_attention_forward`)."""
    if is_direct(name):
        return f"direct ({DIRECT_FUNCTION}, no flash glue)"
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    function = ALL_ATTENTION_FUNCTIONS.get(name)
    function = getattr(function, "__wrapped__", function)  # the explorer's fallback guard
    found = getattr(function, "__name__", "")
    return f"Transformers' flash glue ({found})" if found.startswith("flash_attention") else found


def is_plain_causal(mask: Any, query: Any, key: Any) -> bool:
    """Whether a captured 4-D mask (eager's additive one, or a boolean one) keeps exactly what a
    causal call without a mask keeps, for a prefill (as many keys as queries) or one query token:
    where SDPA's mask function gives None (`sdpa_mask`'s causal skip)."""
    import torch

    if getattr(mask, "dim", lambda: 0)() != 4:
        return False
    lq, lk = query.shape[-2], key.shape[-2]
    if mask.shape[-2:] != (lq, lk) or not (lq == lk or lq == 1):
        return False
    keep = mask if mask.dtype == torch.bool else mask == 0
    pattern = torch.ones(lq, lk, dtype=torch.bool, device=mask.device).tril(lk - lq)
    return bool(torch.equal(keep, pattern.expand_as(keep)))


def passes_own_mask(call: tuple[tuple[Any, ...], dict[str, Any]] | None) -> bool:
    """Whether a captured attention call hands the function a mask other than the plain causal one
    SDPA's mask function leaves out (None): a padded batch, or a model that builds its own (Doge's
    dynamic mask). A function registered directly with SDPA's mask sees the same mask."""
    if call is None:
        return False
    args, kwargs = call
    mask = args[3] if len(args) >= 4 else kwargs.get("attention_mask")
    if mask is None or len(args) < 2:
        return False
    return not is_plain_causal(mask, args[0], args[1])


def map_to_folder(repo_id: str, path: Path) -> None:
    """Make `kernels.get_kernel(repo_id)` load the repository in `path` (LOCAL_KERNELS)."""
    text = str(path)
    if ":" in text or "=" in text:
        raise ValueError(f"{text} contains ':' or '=', which kernels' LOCAL_KERNELS cannot hold; move it")
    entries = [e for e in os.environ.get("LOCAL_KERNELS", "").split(":") if e and "=" in e]
    entries = [e for e in entries if e.split("=", 1)[0] != repo_id] + [f"{repo_id}={text}"]
    os.environ["LOCAL_KERNELS"] = ":".join(entries)


def attention_function(module: nn.Module, name: str) -> Callable[..., Any]:
    """The function the model's attention calls for implementation `name` (as its forward looks it up)."""
    if name == "eager":
        found = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if found is None:
            raise LookupError(f"{type(module).__module__} has no eager_attention_forward")
        return found
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if name not in ALL_ATTENTION_FUNCTIONS.valid_keys():
        raise LookupError(f"{name!r} is not registered in Transformers' attention interface")
    return ALL_ATTENTION_FUNCTIONS[name]


def causal_mask(query: Any, key: Any, sliding_window: int | None = None) -> Any:
    """The additive mask a causal decoder gives its eager attention when the call carries none.

    The explorer captures attention calls under an implementation name of its own, for which
    Transformers builds no mask (`masking_utils` returns the mask as it is for names it does not
    know): sdpa makes that causal itself (`is_causal`), eager does not, and computes full attention.
    This is the mask Transformers' `causal_mask_function` / `sliding_window_overlay` give eager:
    key j is seen by query i when j <= i + (keys - queries), and, with a window, j > i + (keys -
    queries) - sliding_window.
    """
    import torch

    lq, lk = query.shape[-2], key.shape[-2]
    rows = torch.arange(lq, device=query.device)[:, None] + (lk - lq)
    cols = torch.arange(lk, device=query.device)[None, :]
    keep = cols <= rows
    if sliding_window:
        keep &= cols > rows - int(sliding_window)
    mask = torch.zeros(lq, lk, dtype=query.dtype, device=query.device)
    return mask.masked_fill(~keep, torch.finfo(query.dtype).min)[None, None]


_capturing: contextvars.ContextVar[tuple[Callable[..., Any], Callable[..., Any]] | None] = (
    contextvars.ContextVar("kernel_explorer_capture", default=None)
)


def _capturing_attention(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    record, delegate = _capturing.get() or (None, None)
    if record is None or delegate is None:
        raise RuntimeError("kernel_explorer's capture attention ran outside a capture")
    record(module, args, kwargs)
    return delegate(module)(module, *args, **kwargs)


@contextlib.contextmanager
def capturing(
    record: Callable[..., Any], delegate: Callable[[nn.Module], Callable[..., Any]], mask_like: str = "sdpa"
) -> Iterator[str]:
    """For the block, the name of an attention implementation (registered in Transformers' interface)
    that hands each call to `record(module, args, kwargs)` and then runs `delegate(module)`.

    The name gets `mask_like`'s mask function too: for a name it does not know, Transformers builds
    no mask at all, and an eager attention called without one attends to every key (DeepSeek-V4's
    compressed layers also lose the block mask they append)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(_CAPTURE, _capturing_attention)
    if mask_like in ALL_MASK_ATTENTION_FUNCTIONS.valid_keys():
        AttentionMaskInterface.register(_CAPTURE, ALL_MASK_ATTENTION_FUNCTIONS[mask_like])
    token = _capturing.set((record, delegate))
    try:
        yield _CAPTURE
    finally:
        _capturing.reset(token)


def wrap_registered(name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace the function registered as `name` in Transformers' attention interface by
    `wrap(function)` (the explorer's fallback guard); a no-op for names not registered there."""
    from transformers import AttentionInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if name in ALL_ATTENTION_FUNCTIONS.valid_keys():
        AttentionInterface.register(name, wrap(ALL_ATTENTION_FUNCTIONS[name]))


def load_and_register(name: str, *, allow_all_kernels: bool = False) -> None:
    """Load the repository a Hub-shaped `name` names (a local alias included) and register it in
    Transformers' interface with Transformers' own flash glue, as `set_attn_implementation` does,
    without a model: what the trial worker does before it calls the kernel."""
    from transformers.integrations.hub_kernels import load_and_register_attn_kernel

    load_and_register_attn_kernel(name, None, allow_all_kernels)


def set_module_implementation(module: nn.Module, name: str) -> None:
    """Make `module`'s config name `name`: Transformers' flash glue finds the kernel again, at every
    call, by the implementation its module's config names (a copy's, in the trial worker)."""
    _config(module)._attn_implementation = name
