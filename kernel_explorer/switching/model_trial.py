"""A candidate judged where its values matter: the model's answers, with it on every instance.

The per-call bound (`numerics/divergence.wrong_bound`, 8 units of bfloat16's resolution at the
output's scale) lets through a SiLU computed as x*sigmoid(1.05x): each call is within it, yet over
30 layers the logits move 16 times more than a legitimate bfloat16 SiLU moves them (0.42 against
0.027 of their spread; top-1 agreement falls to 94% at 100 tokens). So once a candidate passes its
per-call trial, the model runs once on the capture with the candidate on every instance it would
take, and its logits are compared with a reference run (float32 for a 16-bit model, where it fits
in memory), next to the same model computed in bfloat16: a kernel that moves the answers more
than `MODEL_FACTOR` times what bfloat16 does "changes the model's answers" and is never a default choice.

Nothing of the user's model changes: the runs use a `shadow` (new module objects and new
Parameter objects over the same tensor data, every installed forward and hook left behind), whose
instances the candidate takes; a kernel known to change tensors in place gets copies of them. The
reference runs (PyTorch in the model's dtype, float32 for a 16-bit model, bfloat16) are made once per
capture and model dtype and shared by every candidate; the float32 and bfloat16 runs convert the shadow (the
model's weights once more in that dtype, for the duration of one forward).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.function_layers import fresh_functions
from kernel_explorer.switching.guard import DEFAULT_MEMORY_SHARE, ModuleGuard, available_memory

if TYPE_CHECKING:
    import torch
    from torch import nn

#: a candidate whose logit drift exceeds this many times the bfloat16 model's "changes the answers"
MODEL_FACTOR = 2.0
_HOOKS = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)


@dataclass(frozen=True)
class Answers:
    """How one run's logits compare with the reference's, over the capture's positions."""

    drift: float  # the largest logit difference over the reference logits' spread (their std)
    kl: float  # mean KL divergence of the run's next-token distribution from the reference's
    top1: float  # share of positions whose most likely token is the reference's

    def __str__(self) -> str:
        return f"logit drift {self.drift:.2g} of their spread, KL {self.kl:.2g}, top-1 {self.top1:.0%}"


def answers(logits: torch.Tensor, reference: torch.Tensor) -> Answers:
    """`logits` against `reference` (same shape, last dimension the vocabulary)."""
    import torch

    run = logits.detach().double().reshape(-1, logits.shape[-1])
    ref = reference.detach().double().reshape(-1, reference.shape[-1])
    spread = ref.std(dim=-1).mean().item() or 1.0
    drift = (run - ref).abs().max().item() / spread
    p_ref = torch.log_softmax(ref, dim=-1)
    kl = (p_ref.exp() * (p_ref - torch.log_softmax(run, dim=-1))).sum(-1).mean().item()
    top1 = (run.argmax(-1) == ref.argmax(-1)).double().mean().item()
    return Answers(drift, max(kl, 0.0), top1)


@dataclass(frozen=True)
class References:
    """The runs every candidate of one capture and model dtype is judged against."""

    pytorch: Any  # the model's logits (PyTorch everywhere), in its dtype
    reference: Any  # the most precise run that fit: float32 (a 16-bit model) or PyTorch's own
    against: str  # which that is: "float32", "PyTorch"
    pytorch_answers: Answers  # PyTorch's own, against the reference
    bfloat16: Answers  # the same model computed in bfloat16, against the reference


def shadow(model: nn.Module) -> nn.Module:
    """The model's module tree over the same tensor data: new module and Parameter objects, no
    installed forward (PyTorch everywhere) and no hook; converting or switching it leaves the model
    as it is (a change made in place to a tensor's data would not: such a kernel gets copies)."""
    found = ModuleGuard(model).original()
    for module in found.modules():
        for name in _HOOKS:
            if name in module.__dict__:
                module.__dict__[name] = OrderedDict()
        fresh_functions(module)  # a holder's switched function layer (rotary) stays the model's
    return found


def logits(model: nn.Module, kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The model's logits on `kwargs` (None when its output has none)."""
    import torch

    with torch.no_grad():
        out = model(**kwargs)
    found = getattr(out, "logits", None)
    if found is None and isinstance(out, (tuple, list)) and out:
        found = out[0]
    return found if isinstance(found, torch.Tensor) and found.is_floating_point() else None


def _fits(model: nn.Module, dtype: Any) -> bool:
    """Whether a copy of the model's weights in `dtype` fits in the memory share a trial may take."""
    import torch

    size = torch.empty((), dtype=dtype).element_size()
    need = sum(p.numel() for p in model.parameters()) * size
    free = available_memory()
    return free is None or need <= DEFAULT_MEMORY_SHARE * free


def _in(model: nn.Module, kwargs: dict[str, Any], dtype: Any) -> torch.Tensor | None:
    """The model's logits computed in `dtype` (a shadow converted for one forward)."""
    return logits(shadow(model).to(dtype), kwargs)


def references(model: nn.Module, kwargs: dict[str, Any]) -> References | None:
    """PyTorch's run, the reference and the bfloat16 model's run on `kwargs` (None: no logits)."""
    import torch

    from kernel_explorer.switching.trial_checks import preserved_session

    with preserved_session():
        pytorch = logits(shadow(model), kwargs)
        if pytorch is None:
            return None
        dtype, reference, against = pytorch.dtype, pytorch, "PyTorch"
        # a 16-bit model is judged against its float32 run; a float32 model against itself: its own
        # error is far under bfloat16's, and a float64 copy would double its memory (Binder's 2 GB)
        for precise in (torch.float32,):
            if torch.finfo(precise).bits > torch.finfo(dtype).bits and _fits(model, precise):
                found = _in(model, kwargs, precise)
                if found is not None:
                    reference, against = found, str(precise).removeprefix("torch.")
                    break
        bf16 = pytorch if dtype == torch.bfloat16 else _in(model, kwargs, torch.bfloat16)
    if bf16 is None:
        return None
    return References(pytorch, reference, against, answers(pytorch, reference), answers(bf16, reference))


def judged(found: torch.Tensor, refs: References) -> tuple[Answers, str]:
    """The candidate's answers, and "changes the model's answers (...)" when they move more than
    `MODEL_FACTOR` times the bfloat16 model's do ("" when not)."""
    got = answers(found, refs.reference)
    bar = MODEL_FACTOR * max(refs.bfloat16.drift, refs.pytorch_answers.drift)
    if not got.drift > bar:
        return got, ""
    return got, (
        f"changes the model's answers (top-1 {got.top1:.0%}; {got} against {refs.against}, where the "
        f"model in bfloat16 drifts {refs.bfloat16.drift:.2g})"
    )


def cached_references(model: nn.Module, kwargs: dict[str, Any]) -> References | None:
    """`references`, made once per capture (by identity) and model dtype for every candidate."""
    from kernel_explorer.switching import model_state

    state = model_state.of(model)
    first = next(model.parameters(), None)
    key = (None if first is None else (first.dtype, first.device), tuple(sorted(kwargs)))
    with state.lock:
        known = state.references
        if known is not None and known[0] is kwargs and known[1] == key:
            return known[2]
    found = references(model, kwargs)
    with state.lock:
        state.references = (kwargs, key, found)
    return found


def with_candidate(
    model: nn.Module, paths: list[str], *, copy_tensors: bool = False
) -> tuple[nn.Module, list[nn.Module]]:
    """A new `shadow` of the model and its modules at `paths`, for a candidate to take (deep copies
    where `copy_tensors`: a kernel that changes tensors in place)."""
    found = shadow(model)
    targets = []
    for path in paths:
        target = found.get_submodule(path)
        if copy_tensors:
            parent, _, name = path.rpartition(".")
            target = copy.deepcopy(target)
            found.get_submodule(parent)._modules[name] = target
        targets.append(target)
    return found, targets
