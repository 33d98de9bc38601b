"""The graph passes a model's kernels offer (kernel_explorer/measure/graph_passes.py): asked of the
packages whose layer forwards run in the model now, once each; a stranger's offer that raises or
gives something that is no Inductor pass is left out with its reason, nothing else changes.

Real parts: the tiny Llama, the bundled quantized_linear (which offers its sibling batching) and
RMSNorm (which offers none), and Python-only repositories written here, switched through the
explorer (kernels' own loader).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from kernel_repos import write_repo
from kernels import LocalLayerRepository
from torch import nn

from kernel_explorer import Explorer
from kernel_explorer.loading import tiny_llama
from kernel_explorer.measure.graph_passes import kernel_graph_passes


def test_a_model_on_pytorch_offers_no_pass() -> None:
    offered = kernel_graph_passes(tiny_llama())
    assert offered.passes == [] and offered.left_out == []


def test_the_quantized_linears_offer_their_batching_once(hub: dict) -> None:
    model = tiny_llama()
    explorer = Explorer(model)
    try:
        explorer.on("RMSNorm")  # a kernel without passes: asked, nothing offered
        explorer.extend("Linear", nn.Linear, "model.layers.*")
        explorer.on("Linear", candidate="bundled/quantized_linear:Q4_1Linear")
        offered = kernel_graph_passes(model)
        assert [p.name for p in offered.passes] == ["SiblingLinears"]  # 14 Linears, one package
        assert offered.passes[0].kernel.startswith("_quantized_linear_cpu_")
        assert offered.left_out == []
        explorer.off("Linear")
        assert kernel_graph_passes(model).passes == []  # only what runs now offers
    finally:
        explorer.reset()


@pytest.mark.parametrize(
    ("offer", "reason"),
    [
        (
            "def graph_passes():\n    raise ValueError('injected fault: no passes today')\n",
            "graph_passes() raised ValueError: injected fault: no passes today",
        ),
        (
            "def graph_passes():\n    return [print]\n",
            "graph_passes() gave builtin_function_or_method, not an Inductor",
        ),
    ],
    ids=["raises", "not-a-pass"],
)
def test_a_strangers_bad_offer_is_left_out_with_its_reason(tmp_path: Path, offer: str, reason: str) -> None:
    repo = write_repo(tmp_path, "kx-passes", init="from . import layers\n" + offer)
    model = tiny_llama()
    mapping = {"RMSNorm": {"cpu": LocalLayerRepository(repo_path=repo, layer_name="RMSNorm")}}
    # through the explorer, which puts every forward back (a bare kernelize leaves Transformers'
    # shared function layers switched on the older kernels, for the tests after this one)
    explorer = Explorer(model, mapping, include_bundled=False, include_transformers=False)
    try:
        assert all(now.is_kernel for now in explorer.on("RMSNorm", candidate="kx-passes"))
        offered = kernel_graph_passes(model)
        assert offered.passes == []
        (left_out,) = offered.left_out
        assert left_out.startswith("_kx_passes_") and reason in left_out
        with torch.no_grad():  # the kernel itself still runs
            assert model(torch.zeros(1, 3, dtype=torch.long)).logits.shape == (1, 3, 256)
    finally:
        explorer.reset()
