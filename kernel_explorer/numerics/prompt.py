"""A model call's prompt repeated to a longer length: the trials' longer inputs (switching) and the
memory curve's lengths (measure) are made the same way, from the capture's own tokens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def repeated_prompt(kwargs: Mapping[str, Any], tokens: int, length: int) -> dict[str, Any]:
    """`input_ids` and `attention_mask` of `kwargs` (those `tokens` long) repeated to `length`;
    other keywords (positions, caches) dropped, so the model makes its own."""
    import torch

    repeats = -(-length // tokens)
    found: dict[str, Any] = {}
    for key in ("input_ids", "attention_mask"):
        value = kwargs.get(key)
        if isinstance(value, torch.Tensor) and value.shape[-1] == tokens:
            found[key] = value.repeat(*([1] * (value.dim() - 1)), repeats)[..., :length]
    return found
