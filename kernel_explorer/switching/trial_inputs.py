"""The inputs a candidate's trial runs on: the capture's, and a longer one past every block size.

A kernel may be right for the capture's 16 tokens and wrong past 64 keys (a block it handles
differently), or past the 256 keys of a row path: a trial on the capture alone calls it "runs
here" and the first longer prompt meets the bug. So trials also run on the same prompt repeated to
`longer_tokens(n)`: at least `LONGER_FACTOR` times the capture and past `PAST_BLOCKS` tokens, the
largest length at which a bundled kernel changes how it works (hub/flash_attn/csrc/flash_attn_isa.h:
the row path takes up to 256 keys of head_dim 64, `kRowPathKeyElems`; 192 rows a task,
`kRowsPerTask`; 64 keys a block, `kBK`; torch_binding.cpp splits keys from 256,
`kMinKeysPerSplit`), within the model's `max_position_embeddings`.

Verdicts hold per bucket of the capture's length (`length_bucket`): a longer `capture()` tries
every candidate again at the next use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

#: the longest length (tokens or keys) at which a bundled kernel changes path (see the docstring)
PAST_BLOCKS = 256
#: the longer trial is at least this many times the capture
LONGER_FACTOR = 4
#: the longer capture keeps at most this many bytes of inputs
LONGER_MEMORY_CAP = 64 * 2**20


def tokens_of(kwargs: dict[str, Any] | None) -> int | None:
    """The sequence length of a model call's `input_ids` (None without them)."""
    ids = (kwargs or {}).get("input_ids")
    shape = getattr(ids, "shape", None)
    return int(shape[-1]) if shape is not None and len(shape) >= 1 else None


def length_bucket(tokens: int | None) -> int | None:
    """The power of two at or above `tokens`: verdicts are cached per bucket."""
    if not tokens:
        return None
    return 1 << max(int(tokens) - 1, 0).bit_length()


def longer_tokens(tokens: int, model: nn.Module | None = None) -> int:
    """The longer trial's length for a capture of `tokens`."""
    wanted = max(LONGER_FACTOR * tokens, PAST_BLOCKS + 1)
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return min(wanted, limit) if isinstance(limit, int) and limit > 0 else wanted


def longer_kwargs(kwargs: dict[str, Any], model: nn.Module | None = None) -> dict[str, Any] | None:
    """The capture's call with its tokens repeated to `longer_tokens` (None when it has no
    `input_ids`, or is already that long); an attention mask is repeated with them, other keywords
    (positions, caches) dropped so the model makes its own."""
    import torch

    tokens = tokens_of(kwargs)
    if tokens is None:
        return None
    length = longer_tokens(tokens, model)
    if length <= tokens:
        return None
    repeats = -(-length // tokens)
    found: dict[str, Any] = {}
    for key in ("input_ids", "attention_mask"):
        value = kwargs.get(key)
        if isinstance(value, torch.Tensor) and value.shape[-1] == tokens:
            found[key] = value.repeat(*([1] * (value.dim() - 1)), repeats)[..., :length]
    return found
