"""The experts row: Transformers' MoE experts implementations switched like any door, on tiny random
MoE models of three architectures (Qwen3-MoE, GPT-OSS, Mixtral; random weights, no download).

Each implementation is tried before it stands, its logits agree with the class's own loop (eager)
within the tolerance the trial judges by (`probe.wrong_values` against a float64 run), `off` gives
the original logits bitwise, and the Hub kernels read "no build for this machine" with their
repository, from Transformers' own check (the Hub is never asked). Transformers 5.22 (the oldest
pair) already has `set_experts_implementation`, so the row is there on both pairs; a model or module
without it has none. No mock: the only things that
cannot exist here (a CUDA GPU for deep-gemm and sonic-moe) are what the row reports missing.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import pytest
import torch
from hub_like_repos import tiny_gpt_oss, tiny_mixtral, tiny_qwen3_moe
from torch import nn

from kernel_explorer import Explorer
from kernel_explorer.catalog.availability import State
from kernel_explorer.errors import KernelExplorerError, NoUsableKernelError
from kernel_explorer.loading import tiny_llama
from kernel_explorer.switching.probe import wrong_values

IDS = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79, 23, 84, 62, 64]])
BUILT_IN = ("grouped_mm", "batched_mm", "eager")
HUB = {"deepgemm": "kernels-community/deep-gemm", "sonicmoe": "kernels-community/sonic-moe"}


MODELS: dict[str, Callable[[], nn.Module]] = {
    "qwen3_moe": tiny_qwen3_moe,
    "gpt_oss": tiny_gpt_oss,
    "mixtral": tiny_mixtral,
}


def logits(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits


def float64_logits(model: nn.Module) -> torch.Tensor:
    """The model in float64 with the class's own loop (the definition of its experts)."""
    shadow = copy.deepcopy(model).double()
    shadow.set_experts_implementation("eager")
    return logits(shadow)


def explorer(model: nn.Module, **kwargs: object) -> Explorer:
    found = Explorer(model, include_bundled=False, include_transformers=False, **kwargs)  # type: ignore[arg-type]
    found.capture(IDS)
    return found


@pytest.mark.parametrize("arch", list(MODELS))
def test_the_row_lists_every_implementation_with_its_state(arch: str) -> None:
    model = MODELS[arch]()
    row = explorer(model).inventory().row("experts")
    experts = [path for path, m in model.named_modules() if path.endswith("mlp.experts")]
    assert row.kind == "experts" and list(row.group.instances) == experts and len(experts) == 2
    found = {c.label: f for c, f in row.candidates}
    assert set(BUILT_IN) | set(HUB) | {"deepgemm_megamoe"} <= set(found)
    for name in BUILT_IN:
        assert found[name].state is State.READY, (name, found[name])
    for name, repo in HUB.items():  # Transformers' own check on this CPU machine, never the Hub
        assert found[name].state is State.NO_BUILD and repo in found[name].reason, found[name]
        assert "CUDA" in found[name].reason
    assert [now.name for now in row.running] == [model.config._experts_implementation] * 2
    assert not any(now.is_kernel for now in row.running)


@pytest.mark.parametrize("arch", list(MODELS))
def test_each_implementation_switches_matches_eager_and_off_restores_bitwise(arch: str) -> None:
    model = MODELS[arch]()
    original = model.config._experts_implementation
    found = explorer(model)
    before = logits(model)
    reference = float64_logits(model)
    found.on("experts", candidate="eager")
    eager = logits(model)
    for name in BUILT_IN:
        running = found.on("experts", candidate=name)
        assert [now.name for now in running] == [name] * 2
        assert all(now.is_kernel == (name != original) for now in running), running
        assert all(m.config._experts_implementation == name for m in model.modules() if hasattr(m, "config"))
        got = logits(model)
        assert torch.isfinite(got).all()
        assert wrong_values(got, eager, reference) == "", name  # within the bound the trial judges by
        verdict = found.inventory().row("experts").candidates
        assert dict((c.label, f.state) for c, f in verdict)[name] is State.READY
    found.on("experts", candidate="batched_mm")
    assert found.running("experts")[0].is_kernel
    found.off("experts")
    assert [now.name for now in found.running("experts")] == [original] * 2
    assert torch.equal(logits(model), before)
    found.on("experts", candidate="eager")
    found.reset()
    assert torch.equal(logits(model), before)


@pytest.mark.parametrize("arch", list(MODELS))
def test_a_hub_kernel_is_refused_with_its_repository(arch: str) -> None:
    model = MODELS[arch]()
    found = explorer(model)
    before = logits(model)
    for name, repo in HUB.items():
        (now, _) = found.on("experts", candidate=name)
        assert not now.is_kernel and "no build for this machine" in now.reason and repo in now.reason
    (now, _) = found.on("experts")  # the default choice takes a Hub kernel only: none runs here
    assert not now.is_kernel and "No experts kernel can run here" in now.reason
    assert "candidate='batched_mm'" in now.reason
    assert torch.equal(logits(model), before)
    strict = explorer(model, strict=True)
    with pytest.raises(NoUsableKernelError, match="kernels-community/deep-gemm"):
        strict.on("experts", candidate="deepgemm")
    with pytest.raises(KernelExplorerError, match="not an experts implementation of this model"):
        found.on("experts", candidate="fast_mm")


def test_compare_times_an_implementation_against_the_original() -> None:
    model = tiny_qwen3_moe()
    found = explorer(model)
    before = logits(model)
    handle = found.compare(
        "experts", candidates=["batched_mm", "eager"], pairs=3, calibration_pairs=2, precision=0.5
    )
    verdicts = found.results.records("layer_verdict", handle.run_id)
    assert len(verdicts) == 2 and all(r.layer == "experts" for r in verdicts)
    assert all(r.values.kernel_on for r in verdicts)  # the other side ran, not the original again
    assert {r.provenance.candidate for r in verdicts} == {"batched_mm", "eager"}
    assert all(r.values.pairs >= 3 for r in verdicts)
    assert not found.running("experts")[0].is_kernel  # back as it was
    assert torch.equal(logits(model), before)


@pytest.fixture
def registered() -> object:
    """Names registered in Transformers' experts interface for one test (a user may register any)."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    added: list[str] = []

    def register(name: str, function: Callable[..., torch.Tensor]) -> None:
        ALL_EXPERTS_FUNCTIONS[name] = function
        added.append(name)

    yield register
    for name in added:
        del ALL_EXPERTS_FUNCTIONS[name]


def test_an_implementation_that_raises_later_falls_back_to_the_original(registered: Callable) -> None:
    from transformers.integrations.moe import batched_mm_experts_forward

    def short_only(module: nn.Module, hidden: torch.Tensor, *args: object) -> torch.Tensor:
        if hidden.shape[0] > 16:
            raise RuntimeError("this implementation takes at most 16 tokens")
        return batched_mm_experts_forward(module, hidden, *args)

    registered("kx_short_only", short_only)
    model = tiny_qwen3_moe()
    found = explorer(model)  # captured on 12 tokens: the trial passes
    (now, _) = found.on("experts", candidate="kx_short_only")
    assert now.is_kernel and now.name == "kx_short_only"
    long_ids = torch.arange(40)[None] % 128
    with torch.no_grad():
        got = model(input_ids=long_ids).logits  # the kernel raises: answered by the original
    (now, _) = found.running("experts")
    assert not now.is_kernel and "raised when run" in now.reason and "at most 16 tokens" in now.reason
    with torch.no_grad():
        assert torch.equal(got, model(input_ids=long_ids).logits)  # the original answered, and runs now
    states = {c.label: str(f) for c, f in found.inventory().row("experts").candidates}
    assert states["kx_short_only"].startswith("failed") and "at most 16 tokens" in states["kx_short_only"]


def test_a_trial_refuses_wrong_values_unless_named(registered: Callable) -> None:
    from transformers.integrations.moe import batched_mm_experts_forward

    def doubled(module: nn.Module, *args: object) -> torch.Tensor:
        return 2 * batched_mm_experts_forward(module, *args)

    def flat(module: nn.Module, hidden: torch.Tensor, *args: object) -> torch.Tensor:
        return hidden.flatten()

    registered("kx_doubled", doubled)
    registered("kx_flat", flat)
    model = tiny_qwen3_moe()
    found = explorer(model)
    before = logits(model)
    (now, _) = found.on("experts", candidate="kx_flat")
    assert not now.is_kernel and "cannot run here" in now.reason and "shape" in now.reason
    assert torch.equal(logits(model), before)  # the model kept its original
    with pytest.warns(UserWarning, match="wrong results here"):
        (now, _) = found.on("experts", candidate="kx_doubled")
    assert now.is_kernel and "wrong results here" in now.note
    found.off("experts")
    strict = explorer(model, strict=True)
    with pytest.raises(KernelExplorerError, match="wrong results here"):
        strict.on("experts", candidate="kx_doubled")
    assert torch.equal(logits(model), before)


def test_models_without_experts_have_no_row() -> None:
    assert "experts" not in Explorer(tiny_llama(), include_bundled=False).layers
    # a module holding real experts but no model around them: no set_experts_implementation
    moe = tiny_qwen3_moe()
    bare = nn.Sequential(moe.model.layers[0].mlp)
    from kernel_explorer.switching.experts_door import ExpertsDoor

    class Host:
        model = bare

    assert ExpertsDoor.find(Host()) is None  # type: ignore[arg-type]


def test_a_second_explorer_keeps_the_models_original() -> None:
    model = tiny_qwen3_moe()
    before = logits(model)
    first = explorer(model)
    first.on("experts", candidate="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        second = explorer(model)
    assert second.running("experts")[0].is_kernel  # eager is not what the model came with
    second.off("experts")
    assert torch.equal(logits(model), before)
    assert not first.running("experts")[0].is_kernel
