"""compare_model(compiled=True): compiled + kernels against compiled PyTorch and eager PyTorch.

One compiled run on a tiny Llama with every bundled layer kernel on (attention stays on SDPA: under
a static cache its mask sends the bundled flash_attn's flash glue out of the graph) is shared by the
record tests; the static decoder and the refusals need no compile of a model.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from kernel_explorer import Explorer, KernelExplorerError, tiny_llama
from kernel_explorer.measure.compiled_decode import EagerDecoder, StaticDecoder
from kernel_explorer.measure.model_modes import AGAINST_EAGER, COMPILED_SIDE, EAGER_SIDE, KERNEL_SIDE
from kernel_explorer.views.answers import run_answer

PROMPT = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(5))
LENGTH, NEW = 12, 6  # the prompt's length is the timed prefill length: one prefill graph per side less


@pytest.fixture(scope="module")
def compared(hub: dict) -> Iterator[Explorer]:
    torch._dynamo.reset()
    explorer = Explorer(tiny_llama(), include_transformers=False)
    for name in explorer.layers:
        if name != "attention":
            explorer.on(name, mode="torch.compile")
    explorer.before = explorer._switchboard.snapshot()  # type: ignore[attr-defined]
    explorer.compare_model(
        inputs=PROMPT, compiled=True, lengths=(LENGTH,), pairs=2, decode_tokens=NEW, decode_pairs=2
    )
    yield explorer
    explorer.reset()
    torch._dynamo.reset()


@pytest.mark.slow
def test_three_sides_are_timed_with_a_verdict_each(compared: Explorer) -> None:
    pairs = [r.values for r in compared.results.records("model_pair")]
    measures = ["compiled prefill", "compiled decode"]
    wanted = {
        (m + against, n)
        for m, n in zip(measures, (LENGTH, NEW), strict=True)
        for against in ("", AGAINST_EAGER)
    }
    assert {(p.measure, p.tokens) for p in pairs} == wanted
    assert len(pairs) == 8 and all(p.pytorch_s > 0 and p.kernel_s > 0 for p in pairs)
    verdicts = compared.results.model_summary()
    assert sorted(zip(verdicts.measure, verdicts.tokens, strict=True)) == sorted(wanted)
    assert (verdicts.pairs == 2).all()
    assert (verdicts.noise_floor > 0).all()  # decode borrows prefill's floor against the same reference
    assert all(set(on) == {"RMSNorm", "SiLU", "rotary_pos_emb"} for on in verdicts.kernels_on)
    assert compared._switchboard.snapshot() == compared.before  # type: ignore[attr-defined]


@pytest.mark.slow
def test_greedy_tokens_agree_with_compiled_and_eager_pytorch(compared: Explorer) -> None:
    found = {r.values.reference: r.values for r in compared.results.records("model_agreement")}
    assert set(found) == {COMPILED_SIDE, EAGER_SIDE}
    for agreement in found.values():
        assert agreement.greedy_tokens == NEW and agreement.first_divergence is None
        assert agreement.top1_agreement == 1.0 and agreement.kl < 1e-6
    run_id = compared.results.records("model_agreement")[0].run_id
    answer = run_answer(compared.results, run_id)
    lines = dict(answer.rows)
    assert f"greedy tokens identical ({NEW})" in lines["outputs against compiled PyTorch"]
    assert "outputs against eager PyTorch" in lines


@pytest.mark.slow
def test_compile_seconds_per_side_and_graph(compared: Explorer) -> None:
    times = {
        (r.values.side, r.values.graph): r.values.seconds for r in compared.results.records("compile_time")
    }
    graphs = {f"prefill {LENGTH}", f"prompt {PROMPT.shape[1]}", "decode"}
    assert set(times) == {(side, graph) for side in (KERNEL_SIDE, COMPILED_SIDE) for graph in graphs}
    assert all(seconds > 0 for seconds in times.values())


def test_a_static_cache_decodes_as_the_dynamic_one_and_again_from_the_same_position() -> None:
    """The loops compare_model(compiled=True) times, uncompiled: the static cache's greedy tokens
    and logits are the dynamic cache's, and a decode started again after one prefill repeats them."""
    model = tiny_llama()
    static, eager = StaticDecoder(model, 20, compiled=False), EagerDecoder(model)
    tokens, logits = static.generate_with_logits(PROMPT, 8)
    eager_tokens, eager_logits = eager.generate_with_logits(PROMPT, 8)
    assert torch.equal(tokens, eager_tokens) and logits.shape == (8, 256)
    torch.testing.assert_close(logits, eager_logits, rtol=1e-4, atol=1e-5)
    for decoder in (static, eager):
        first = decoder.prefill(PROMPT).argmax(-1, keepdim=True)
        once = decoder.decode(first, PROMPT.shape[1], 8)
        assert decoder.decode(first, PROMPT.shape[1], 8) == once == tokens[0, PROMPT.shape[1] :].tolist()
    with pytest.raises(ValueError, match="overflow"):
        static.decode(first, PROMPT.shape[1], 9)


def test_each_decoder_compiles_over_code_of_its_own() -> None:
    """Dynamo keeps graphs on the code object and never frees those of a dead decoder: on a shared
    code object, after 8 graphs (say two compiled runs) every later call would run eagerly unsaid."""
    from torch._dynamo.utils import counters

    from kernel_explorer.measure.compiled_decode import _own_code

    class Scaled:
        def __init__(self, by: float) -> None:
            self.by = by  # a constant the graph is guarded on: one graph per instance
            self.fn = torch.compile(_own_code(self.forward), backend="eager", dynamic=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.by

    before = counters["stats"]["unique_graphs"]
    for by in range(12):  # more than the recompile limit, one instance alive at a time
        assert torch.equal(Scaled(float(by)).fn(torch.ones(2)), torch.full((2,), float(by)))
    assert counters["stats"]["unique_graphs"] - before == 12
    model = tiny_llama()
    first, second = StaticDecoder(model, 8), StaticDecoder(model, 8)  # nothing compiles before a call
    assert first._fn._torchdynamo_orig_callable.__code__ is not second._fn._torchdynamo_orig_callable.__code__


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"mode": "training"}, "drop compiled=True"),
        ({"mode": "training+torch.compile"}, "leave mode at 'inference'"),
        ({"inputs": torch.zeros(2, 4, dtype=torch.long)}, "one prompt of token ids"),
        ({"compiled": "yes"}, "True or False"),
    ],
)
def test_a_compiled_comparison_it_cannot_run_is_refused_with_what_to_do(
    hub: dict, kwargs: dict, says: str
) -> None:
    explorer = Explorer(tiny_llama(), include_transformers=False)
    with pytest.raises(KernelExplorerError, match=says):
        explorer.compare_model(**{"compiled": True, **kwargs})
    assert not explorer.results.records("compile_time")
