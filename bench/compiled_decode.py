"""The bench's side of compiled decode: the kernel model SmolLM2 is measured with.

The decoders live in the package (kernel_explorer/measure/compiled_decode.py), where
`compare_model(..., compiled=True)` uses them; they are re-exported here for the benches. What
stays here is bench-only: switching every bundled kernel plus the GGUF's Q4_1/Q8_0 Linear layers
on, and attention on the bundled flash_attn's direct `attention_forward`.

    from compiled_decode import StaticDecoder, kernel_model, explain_decode

    explorer = kernel_model(model, tokenizer)        # every bundled kernel + Q4_1/Q8_0 Linear, compile mode
    decoder = StaticDecoder(model, max_cache_len=192, compiled=True)
    tokens = decoder.generate(ids, new_tokens=64)    # greedy, (1, prompt + 64) LongTensor
    print(explain_decode(decoder, ids))              # graphs and graph breaks of one decode step

Under a static cache SDPA gets a mask: the direct `attention_forward` runs the kernel on a decode
step's mask (the op's key mask: only the cache's filled part is read, and K and V are not expanded
to every query head as SDPA's path does) and answers a masked prefill with SDPA. The Linear layers
are most of a SmolLM2 decode step.
"""

from __future__ import annotations

from typing import Any

from kernel_explorer.measure.compiled_decode import EagerDecoder, StaticDecoder, explain_decode

__all__ = [
    "DIRECT_ATTENTION",
    "ELEMENTWISE",
    "StaticDecoder",
    "eager_generate",
    "explain_decode",
    "kernel_model",
    "use_direct_attention",
]

#: the layers `kernel_model(elementwise=False)` leaves to PyTorch (and under compile to Inductor)
ELEMENTWISE = ("RMSNorm", "SiLU", "rotary_pos_emb")
DIRECT_ATTENTION = "kx_direct_attention"  # no "flash" in it: Transformers would take it for flash-attention


def eager_generate(model: Any, input_ids: Any, new_tokens: int) -> Any:
    """The same greedy loop without compile, on Transformers' default dynamic cache."""
    return EagerDecoder(model).generate(input_ids, new_tokens)


def use_direct_attention(model: Any) -> None:
    """The model's attention on the bundled flash_attn's `attention_forward` (Transformers'
    attention-interface signature with SDPA's mask: no flash-attention glue)."""
    from transformers import AttentionInterface, AttentionMaskInterface

    from kernel_explorer._backend.attention_interface import load_local
    from kernel_explorer.build.bundled import bundled_repo_path
    from kernel_explorer.measure.compiled_decode import prefill_mask

    fa = load_local(bundled_repo_path("flash_attn"))
    AttentionInterface.register(DIRECT_ATTENTION, fa.attention_forward)
    AttentionMaskInterface.register(DIRECT_ATTENTION, prefill_mask)  # SDPA's, but a decoder's prefill
    model.set_attn_implementation(DIRECT_ATTENTION)


def kernel_model(
    model: Any,
    tokenizer: Any = None,
    *,
    quantized: bool = True,
    mode: str = "torch.compile",
    elementwise: bool = True,
) -> Any:
    """Switch every bundled layer kernel on (kernels' `mode`), the decoder Linears on Q4_1 and
    lm_head on Q8_0 (the GGUF's own formats) when `quantized`, attention on the direct
    `attention_forward`; pack the quantized weights with one eager forward (compile traces the
    packed tensors). `elementwise=False` leaves RMSNorm, SiLU and rotary on PyTorch: under
    torch.compile Inductor fuses each with its neighbours (the residual add, the gate's product),
    which a kernel's opaque op prevents. Returns the Explorer that holds the switches."""
    import torch
    from torch import nn

    from kernel_explorer import Explorer

    explorer = Explorer(model, tokenizer=tokenizer)
    layers = [
        name for name in explorer.layers if name != "attention" and (elementwise or name not in ELEMENTWISE)
    ]
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
