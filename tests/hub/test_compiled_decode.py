"""The bundled kernels under torch.compile: the quantized Linear layers trace without a graph
break once an eager forward packed their weight (and refuse to trace before, with a reason), and
a tiny Llama with every bundled kernel and the quantized Linear layers on decodes greedily under
torch.compile with a static KV cache (kernel_explorer/measure/compiled_decode.py, with the bench's
kernel model from bench/compiled_decode.py) exactly as it does uncompiled."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


@pytest.mark.parametrize("layer", ["Q8_0Linear", "Q4_1Linear"])
def test_quantized_layer_compiles_in_one_graph_after_an_eager_pack(hub: dict, layer: str) -> None:
    cls = getattr(hub["quantized_linear"].layers, layer)
    assert cls.can_torch_compile
    torch.manual_seed(0)
    lin = nn.Linear(64, 24)
    x = torch.randn(1, 64)

    def forward(inp: torch.Tensor) -> torch.Tensor:
        return cls.forward(lin, inp)

    torch._dynamo.reset()
    with pytest.raises(Exception, match="run one forward eagerly"):
        torch.compile(forward, fullgraph=True, backend="eager")(x)
    with torch.no_grad():
        eager = forward(x)  # packs
        explanation = torch._dynamo.explain(forward)(x)
        assert explanation.graph_count == 1 and explanation.graph_break_count == 0
        compiled = torch.compile(forward, fullgraph=True, backend="eager")(x)
    assert torch.equal(compiled, eager)


@pytest.mark.slow
def test_tiny_llama_decodes_the_same_compiled_with_every_kernel(hub: dict) -> None:
    from compiled_decode import StaticDecoder, explain_decode, kernel_model

    from kernel_explorer.loading import tiny_llama

    model = tiny_llama()
    for module in model.modules():  # the quantized layers need rows of whole 32-blocks
        if isinstance(module, nn.Linear) and module.in_features % 32:
            pytest.skip(f"tiny_llama has a Linear of {module.in_features} inputs")
    explorer = kernel_model(model)
    assert sum(now.is_kernel for now in explorer.running()) > 0
    ids = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(0))
    eager = StaticDecoder(model, 32, compiled=False).generate(ids, 8)
    decoder = StaticDecoder(model, 32, compiled=True)
    assert torch.equal(decoder.generate(ids, 8), eager)
    assert set(decoder.compile_s) == {"prefill 9", "decode"}
    assert "0 graph break(s)" in explain_decode(decoder, ids)
    # the quantized Linears' graph pass: per layer q, k, v in one call and gate, up in another,
    # o and down their own; without the pass every projection is its own call, the tokens the same
    assert [p.name for p in decoder.graph_passes] == ["SiblingLinears"]
    unbatched = StaticDecoder(model, 32, compiled=True, graph_passes=False)
    assert unbatched.graph_passes == [] and torch.equal(unbatched.generate(ids, 8), eager)
    layers = model.config.num_hidden_layers
    for each, (many, single) in ((decoder, (2, 2)), (unbatched, (0, 7))):
        first = each.prefill(ids).argmax(-1, keepdim=True)
        each.decode(first, ids.shape[1], 3)  # any recompile (explain_decode above traced the step) first
        with torch.profiler.profile() as prof:
            each.decode(first, ids.shape[1], 3)  # the first token is prefill's: two steps
        calls = {
            e.key.rsplit("::", 1)[-1]: e.count for e in prof.key_averages() if "quantized_linear" in e.key
        }
        assert calls.get("linear_q4_1_many", 0) == 2 * layers * many, calls
        assert calls.get("linear_q4_1", 0) == 2 * layers * single, calls


@pytest.mark.slow
def test_a_compiled_decoder_sees_a_layer_switched_after_its_graphs(hub: dict) -> None:
    """The decoder's graphs skip Dynamo's checks on its own cache and on packed weights, never the
    ones that see a layer changed: after its first graphs, one int8 pass asked of the quantized
    layers, then the Linear kernels switched off, each next generation is the uncompiled one of the
    model as it is now (and differs from the one before, so a stale graph would show)."""
    from compiled_decode import StaticDecoder, kernel_model

    from kernel_explorer.loading import tiny_llama

    model = tiny_llama()
    explorer = kernel_model(model)
    ids = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(1))
    decoder = StaticDecoder(model, 32, compiled=True)
    _, before = decoder.generate_with_logits(ids, 6)
    use_int8_gemm = hub["quantized_linear"].layers.use_int8_gemm

    def one_pass() -> None:
        for module in model.modules():
            if isinstance(module, nn.Linear):
                use_int8_gemm(module, 1)

    for change in (one_pass, lambda: explorer.off("Linear"), lambda: explorer.off("LMHead")):
        change()
        eager_tokens, eager_logits = StaticDecoder(model, 32, compiled=False).generate_with_logits(ids, 6)
        tokens, logits = decoder.generate_with_logits(ids, 6)
        assert torch.equal(tokens, eager_tokens)
        torch.testing.assert_close(logits, eager_logits, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(logits, before, rtol=1e-5, atol=1e-5)
        before = logits


@pytest.mark.slow
def test_a_compiled_prefill_runs_the_attention_kernel_on_the_prompts_keys(hub: dict) -> None:
    """Under torch.compile Transformers cannot skip a static cache's mask (its query offset is a
    tensor), and with a mask over several queries the direct attention answered with SDPA over the
    whole cache; in a StaticDecoder's prefill (a fresh cache from position 0) `prefill_mask` gives
    none, and the kernel's causal path on the first seqlen_q keys runs in the compiled graph: the
    flash_attn op is among the ops that ran, and the logits are the dynamic cache's. Outside a
    decoder's prefill the mask is SDPA's."""
    from compiled_decode import StaticDecoder, use_direct_attention
    from transformers.masking_utils import causal_mask_function

    from kernel_explorer.loading import tiny_llama
    from kernel_explorer.measure.compiled_decode import EagerDecoder, _from_start, prefill_mask

    model = tiny_llama()
    use_direct_attention(model)
    ids = torch.randint(0, 256, (1, 11), generator=torch.Generator().manual_seed(2))
    decoder = StaticDecoder(model, 40, compiled=True)
    decoder.prefill(ids)  # compiles
    with torch.profiler.profile() as prof:
        logits = decoder.prefill(ids)
    assert any("flash_attn" in e.key for e in prof.key_averages())
    torch.testing.assert_close(logits, EagerDecoder(model).prefill(ids), rtol=1e-5, atol=1e-5)
    chunk = {"batch_size": 1, "q_length": 3, "kv_length": 8, "mask_function": causal_mask_function}
    assert prefill_mask(**chunk, q_offset=5).shape == (1, 1, 3, 8)  # a chunk at position 5: masked
    with _from_start():
        assert prefill_mask(**chunk, q_offset=torch.tensor(0)) is None


@pytest.mark.slow
def test_the_cpp_wrapper_decodes_the_same_with_the_elementwise_layers_left_to_inductor(hub: dict) -> None:
    """The bench's other compiled sides: `kernel_model(elementwise=False)` keeps RMSNorm, SiLU and
    rotary on PyTorch (Inductor fuses them) with the quantized Linears still on kernels, and
    `StaticDecoder(cpp_wrapper=True)` calls the graph's kernels from C++; both decode what the
    uncompiled model does."""
    from compiled_decode import ELEMENTWISE, StaticDecoder, kernel_model

    from kernel_explorer.loading import tiny_llama

    model = tiny_llama()
    explorer = kernel_model(model, elementwise=False)
    running = {now.layer_name for now in explorer.running() if now.is_kernel}
    assert "Linear" in running and not running & set(ELEMENTWISE), running
    ids = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(2))
    eager = StaticDecoder(model, 32, compiled=False).generate(ids, 8)
    decoder = StaticDecoder(model, 32, compiled=True, cpp_wrapper=True)
    # the decode step's graph only: a C++ wrapper's first compile is the slow part (minutes cold)
    assert torch.equal(decoder.generate(ids, 8, compiled_prefill=False), eager)
    assert set(decoder.compile_s) == {"decode"}
