"""Greedy decoding under torch.compile with a static KV cache, with or without the bundled kernels.

A helper for benches (bench/decode_anchor.py) and for the explorer's `compare_model(...,
compiled=True)` to come; it imports nothing of the explorer at module level.

    from compiled_decode import StaticDecoder, kernel_model, explain_decode

    explorer = kernel_model(model, tokenizer)        # every bundled kernel + Q4_1/Q8_0 Linear, compile mode
    decoder = StaticDecoder(model, max_cache_len=192, compiled=True)
    tokens = decoder.generate(ids, new_tokens=64)    # greedy, (1, prompt + 64) LongTensor
    decoder.generate(other, 64, compiled_prefill=False)  # a one-off prompt length: eager prefill
    logits = decoder.prefill(ids)                    # a fresh cache, the prompt's last-token logits
    decoder.compile_s                                # {"prefill 128": 21.3, "decode": 9.8}: first calls
    print(explain_decode(decoder, ids))              # graphs and graph breaks of one decode step

`StaticDecoder` holds one `transformers.StaticCache` of `max_cache_len` tokens and one compiled
function (`torch.compile(dynamic=False)`): the prompt's length and the one-token decode step are its
shape buckets, each compiled on its first call (the time is kept in `compile_s`) and reused after
(the decode step's cache position is a tensor, so every step runs one graph). Only the last
token's logits are computed (`logits_to_keep=1`, as llama.cpp does), in prefill and decode alike.
`compiled=False` runs the very same loop eagerly (the reference for identical greedy tokens).

The static cache gives SDPA a mask (the cache's unused tail), so attention runs PyTorch's SDPA in
these graphs whatever the model's attention row says: the bundled flash_attn's Transformers glue
unpads by the mask (data-dependent shapes, a graph break per layer), and its direct
`attention_forward` answers masked calls with SDPA. Decode attention over 192 cached tokens is a
small share of a SmolLM2 step; the Linear layers are most of it.
"""

from __future__ import annotations

import time
from typing import Any

DIRECT_ATTENTION = "kx_direct_attention"  # no "flash" in it: Transformers would take it for flash-attention


class StaticDecoder:
    """Greedy prefill/decode of a causal LM with a static KV cache, compiled or eager."""

    def __init__(self, model: Any, max_cache_len: int, *, compiled: bool = True) -> None:
        import torch
        from transformers import StaticCache

        # Dynamo keeps its graphs per code object (this class's _forward), guarded on the instance
        # and its model: every decoder and every bucket is one entry, and past the limit (8 by
        # default) a call silently runs eagerly
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        torch._dynamo.config.accumulated_recompile_limit = max(
            torch._dynamo.config.accumulated_recompile_limit, 256
        )
        self.model = model
        self.max_cache_len = max_cache_len
        self.compiled = compiled
        self.cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
        self._fn = torch.compile(self._forward, dynamic=False) if compiled else self._forward
        self.compile_s: dict[str, float] = {}

    def _forward(self, input_ids: Any, cache_position: Any) -> Any:
        out = self.model(
            input_ids=input_ids,
            position_ids=cache_position.unsqueeze(0),
            cache_position=cache_position,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1, :]

    def _call(self, bucket: str, input_ids: Any, cache_position: Any) -> Any:
        if self.compiled and bucket not in self.compile_s:
            start = time.perf_counter()
            logits = self._fn(input_ids, cache_position)
            self.compile_s[bucket] = time.perf_counter() - start
            return logits
        return self._fn(input_ids, cache_position)

    def prefill(self, input_ids: Any, *, compiled: bool = True) -> Any:
        """A fresh cache holding the prompt (batch 1); the last token's logits (1, vocab).
        `compiled=False` runs this prompt's forward eagerly (no graph for a one-off length) into
        the same cache, so the compiled decode step that follows is the one already built."""
        import torch

        n = input_ids.shape[1]
        if n >= self.max_cache_len:
            raise ValueError(f"a prompt of {n} tokens does not fit a cache of {self.max_cache_len}")
        self.cache.reset()
        with torch.no_grad():
            if not compiled:
                return self._forward(input_ids, torch.arange(n))
            return self._call(f"prefill {n}", input_ids, torch.arange(n))

    def decode(self, first: Any, start: int, new_tokens: int) -> list[int]:
        """Greedy steps from the token `first` (1, 1) at cache position `start`: new_tokens ids."""
        import torch

        if start + new_tokens > self.max_cache_len:
            raise ValueError(f"{start} + {new_tokens} tokens overflow a cache of {self.max_cache_len}")
        out = []
        token = first
        with torch.no_grad():
            for i in range(new_tokens):
                out.append(int(token))
                if i == new_tokens - 1:
                    break
                logits = self._call("decode", token, torch.tensor([start + i]))
                token = logits.argmax(-1, keepdim=True)
        return out

    def generate(self, input_ids: Any, new_tokens: int, *, compiled_prefill: bool = True) -> Any:
        """Greedy generation of `new_tokens` after the prompt: (1, prompt + new_tokens)."""
        import torch

        first = self.prefill(input_ids, compiled=compiled_prefill).argmax(-1, keepdim=True)
        ids = self.decode(first, input_ids.shape[1], new_tokens)
        return torch.cat([input_ids, torch.tensor([ids])], dim=1)


def eager_generate(model: Any, input_ids: Any, new_tokens: int) -> Any:
    """The same greedy loop without compile, on Transformers' default dynamic cache."""
    import torch
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    ids = []
    with torch.no_grad():
        logits = model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
        token = logits[:, -1].argmax(-1, keepdim=True)
        for i in range(new_tokens):
            ids.append(int(token))
            if i == new_tokens - 1:
                break
            logits = model(input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
            token = logits[:, -1].argmax(-1, keepdim=True)
    return torch.cat([input_ids, torch.tensor([ids])], dim=1)


def use_direct_attention(model: Any) -> None:
    """The model's attention on the bundled flash_attn's `attention_forward` (Transformers'
    attention-interface signature with SDPA's mask: no flash-attention glue)."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    from kernel_explorer._backend.attention_interface import load_local
    from kernel_explorer.catalog.bundled import bundled_repo_path

    fa = load_local(bundled_repo_path("flash_attn"))
    AttentionInterface.register(DIRECT_ATTENTION, fa.attention_forward)
    AttentionMaskInterface.register(DIRECT_ATTENTION, sdpa_mask)
    model.set_attn_implementation(DIRECT_ATTENTION)


def kernel_model(
    model: Any, tokenizer: Any = None, *, quantized: bool = True, mode: str = "torch.compile"
) -> Any:
    """Switch every bundled layer kernel on (kernels' `mode`), the decoder Linears on Q4_1 and
    lm_head on Q8_0 (the GGUF's own formats) when `quantized`, attention on the direct
    `attention_forward`; pack the quantized weights with one eager forward (compile traces the
    packed tensors). Returns the Explorer that holds the switches."""
    import torch
    from torch import nn

    from kernel_explorer import Explorer

    explorer = Explorer(model, tokenizer=tokenizer)
    layers = [name for name in explorer.layers if name != "attention"]
    if quantized:
        explorer.extend("Linear", nn.Linear, "model.layers.*")
        explorer.extend("LMHead", nn.Linear, "lm_head")
    for name in layers:
        explorer.on(name, mode=mode)
    if quantized:
        explorer.on("Linear", candidate="bundled/quantized_linear:Q4_1Linear", mode=mode)
        explorer.on("LMHead", candidate="bundled/quantized_linear:Q8_0Linear", mode=mode)
    use_direct_attention(model)
    with torch.no_grad():
        model(torch.zeros(1, 4, dtype=torch.long))  # packs every quantized weight
    return explorer


def explain_decode(decoder: StaticDecoder, input_ids: Any) -> str:
    """`torch._dynamo.explain` of one decode step after the prompt: graphs, graph breaks and their
    reasons, in a few lines."""
    import torch

    decoder.prefill(input_ids, compiled=False)  # the prompt eagerly: explain traces the decode step
    token = input_ids[:, -1:]
    with torch.no_grad():
        explanation = torch._dynamo.explain(decoder._forward)(token, torch.tensor([input_ids.shape[1]]))
    lines = [
        f"decode step: {explanation.graph_count} graph(s), {explanation.graph_break_count} graph break(s), "
        f"{explanation.op_count} ops"
    ]
    seen: set[str] = set()
    for br in explanation.break_reasons:
        frame = br.user_stack[-1] if br.user_stack else None
        where = f"{frame.filename.rsplit('/', 2)[-1]}:{frame.lineno}" if frame is not None else "?"
        line = f"  break: {br.reason.splitlines()[0][:160]} at {where}"
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return "\n".join(lines)
