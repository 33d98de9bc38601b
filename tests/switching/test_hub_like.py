"""Kernels that behave like the Hub's keep the explorer's promises, at every door they enter by.

Each repository (tests/hub_like_repos.py) is in kernel-builder's format and built by the project's
builder; each reproduces one way a real kernels-community repository breaks a naive switch: weights
repacked in place on first use, an op with no CPU kernel, attention that refuses float32, a Python
dependency this machine lacks, a CPU class named otherwise than its layer. No switch in these
tests may raise, leave a row saying a kernel runs that does not, or leave the model changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from attention_repos import FLASH_ATTN, write_attention_repo
from hub_like_repos import (
    MISSING_MODULE,
    tiny_gpt_oss,
    write_missing_dependency,
    write_op_without_cpu_kernel,
    write_repacking_moe,
    write_repacking_rmsnorm,
    write_varlen_only_attention,
)

from kernel_explorer.explorer import Explorer
from kernel_explorer.inspect.layer_groups import ATTENTION
from kernel_explorer.loading import tiny_llama
from kernel_explorer.switching import instance_door

TOKENS = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79]])


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hub-like")
    return {
        "moe": write_repacking_moe(root),
        "packing": write_repacking_rmsnorm(root),
        "cuda_only": write_op_without_cpu_kernel(root),
        "varlen": write_varlen_only_attention(root),
        "missing": write_missing_dependency(root),
    }


def logits(model: torch.nn.Module, tokens: torch.Tensor = TOKENS) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens).logits


def state_of(module: torch.nn.Module) -> dict[str, tuple[int, torch.dtype, tuple[int, ...], int]]:
    """Each tensor's identity, dtype, shape and storage: what 'exactly as before' means."""
    found = {}
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        found[name] = (id(tensor), tensor.dtype, tuple(tensor.shape), tensor.data_ptr())
    return found


def candidate(explorer: Explorer, layer: str, folder: str) -> object:
    return next(c for c in explorer._catalog.candidates(layer) if folder in c.repo_label)


# -- a layer that repacks its module in place, under a Hub repo-id with a CPU class of its own ------


def _gpt_oss_marks_megablocks() -> bool:
    """Transformers up to 5.22 marks GPT-OSS's MLP `MegaBlocksMoeMLP`; 5.23+ runs its experts
    through `experts_implementation` instead (the experts door's tests)."""
    return any(
        getattr(type(module), "kernel_layer_name", None) == "MegaBlocksMoeMLP"
        for module in tiny_gpt_oss().modules()
    )


@pytest.mark.skipif(not _gpt_oss_marks_megablocks(), reason="this Transformers marks no MegaBlocksMoeMLP")
def test_megablocks_like_moe_is_offered_by_the_hub_mapping_and_restored_exactly(
    repos: dict[str, Path],
) -> None:
    model = tiny_gpt_oss()
    before, tensors = logits(model), state_of(model)
    explorer = Explorer(model, peers=[repos["moe"]])  # no layers={...}: Transformers' mapping says
    peer = candidate(explorer, "MegaBlocksMoeMLP", "megablocks")
    assert peer.repository.layer_name == "CPUMegaBlocksMoeMLP"
    found = dict(explorer.inventory().row("MegaBlocksMoeMLP").candidates)[peer]
    assert found.state.value == "ready" and "changes its module on first use" in found.reason
    assert "gate_up_proj converted to bfloat16" in found.reason  # seen on a copy, before the model

    running = explorer.on("MegaBlocksMoeMLP", candidate="peer")
    assert all(now.is_kernel for now in running)
    torch.testing.assert_close(logits(model), before, atol=2e-2, rtol=0)  # bfloat16 inside
    experts = model.model.layers[0].mlp.experts
    assert experts.gate_up_proj.dtype == torch.bfloat16 and experts.packed_weight
    note = explorer.running("MegaBlocksMoeMLP")[0].note
    assert "changes its module on first use" in note and "MB kept while on" in note
    inventory = explorer.inventory()
    assert "restored on off" in inventory.row("MegaBlocksMoeMLP").changes_summary
    assert "MegaBlocksMoeMLP: changes its module on first use" in str(inventory)

    explorer.compare("MegaBlocksMoeMLP", pairs=2)  # PyTorch's side runs on the original weights
    worst = max(r.values.max_abs for r in explorer.results.records("layer_divergence"))
    assert worst < 2e-2

    explorer.off("MegaBlocksMoeMLP")
    assert torch.equal(logits(model), before)
    assert state_of(model) == tensors
    assert "packed_weight" not in experts.__dict__


def test_a_change_that_would_hold_too_much_memory_is_refused_unless_allowed(
    repos: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(instance_door, "DEFAULT_MEMORY_SHARE", 1e-9)  # any copy is "too much" here
    model = tiny_llama()
    explorer = Explorer(model, peers=[repos["packing"]], include_transformers=False)
    refused = explorer.on("RMSNorm", candidate="peer")
    assert not any(now.is_kernel for now in refused)
    assert all("allow_changes=True" in now.reason and "MB available" in now.reason for now in refused)
    allowed = explorer.on("RMSNorm", candidate="peer", allow_changes=True)
    assert all(now.is_kernel for now in allowed)
    explorer.reset()
    assert torch.equal(logits(model), logits(tiny_llama()))


# -- an op with no kernel for the CPU, a dependency this machine lacks ------------------------------


def test_an_op_with_no_cpu_kernel_is_cannot_run_here_and_passed_over(repos: dict[str, Path]) -> None:
    model = tiny_llama()
    explorer = Explorer(model, peers=[repos["cuda_only"]], include_transformers=False)
    peer = candidate(explorer, "RMSNorm", "cuda-only")
    found = dict(explorer.inventory().row("RMSNorm").candidates)[peer]
    assert found.state.value == "cannot run here"
    assert "its CPU build has no `fwd`" in found.reason
    frame = explorer.inventory().to_pandas("candidates")
    assert "`fwd`" in frame[frame.candidate == peer.label].reason.item()
    chosen = explorer.on("RMSNorm")  # the default choice passes over it
    assert all("bundled" in explorer.inventory().row("RMSNorm").kernel_name(now) for now in chosen)
    named = explorer.on("RMSNorm", candidate=peer)
    assert not any(now.is_kernel for now in named)
    assert all("cannot run here: its CPU build has no `fwd`" in now.reason for now in named)
    assert torch.equal(logits(model), logits(tiny_llama()))


def test_a_peer_whose_python_needs_a_missing_module_is_listed_with_the_install_command(
    repos: dict[str, Path],
) -> None:
    explorer = Explorer(tiny_llama(), peers=[repos["missing"]], include_transformers=False)  # no raise
    peer = candidate(explorer, "RMSNorm", "needs-dependency")
    found = dict(explorer.inventory().row("RMSNorm").candidates)[peer]
    assert found.state.value == "cannot run here"
    assert found.reason == f"its Python code needs `{MISSING_MODULE}` (pip install {MISSING_MODULE})"
    named = explorer.on("RMSNorm", candidate=peer)
    assert all(f"pip install {MISSING_MODULE}" in now.reason for now in named)


def test_on_using_and_compare_accept_the_same_candidate_words(repos: dict[str, Path]) -> None:
    explorer = Explorer(tiny_llama(), peers=[repos["packing"]], include_transformers=False)
    assert all("packing-rmsnorm" in now.repository for now in explorer.on("RMSNorm", candidate="peer"))
    with explorer.using("RMSNorm", candidate="bundled") as running:
        assert all("rmsnorm" in now.repository and "packing" not in now.repository for now in running)
    explorer.compare("RMSNorm", pairs=1, candidates=["peer"])
    ran = {r.provenance.kernel_id for r in explorer.results.records("layer_latency") if r.provenance}
    assert any(kernel and "packing_rmsnorm" in kernel for kernel in ran), ran


# -- attention: only the varlen entry point, float32 refused; a kernel raising on a forward ----------


def test_varlen_only_attention_refusing_float32_stays_on_pytorch_with_why(repos: dict[str, Path]) -> None:
    model = tiny_llama()
    before = logits(model)
    explorer = Explorer(model, include_transformers=False)
    running = explorer.on(ATTENTION, candidate=repos["varlen"])  # a source: built, then tried
    assert not any(now.is_kernel for now in running)
    reason = running[0].reason
    assert "cannot run here" in reason and "fp16 and bf16" in reason and "`fwd`" in reason
    assert model.config._attn_implementation == "sdpa"
    assert torch.equal(logits(model), before)
    row = explorer.inventory().row(ATTENTION)
    assert "cannot run here" in row.running_summary
    assert any(a.state.value == "cannot run here" for _, a in row.candidates)
    explorer.reset()  # asked for PyTorch: the failed switch's reason goes with it
    assert explorer.running(ATTENTION)[0].reason == ""


RAISING_ON_BATCH_ATTENTION = FLASH_ATTN.replace(
    '    CALLS["flash_attn_func"] += 1\n',
    '    CALLS["flash_attn_func"] += 1\n'
    "    if q.shape[0] > 1:\n"
    '        raise RuntimeError("injected fault: this attention raises on batches")\n',
)


def test_an_attention_kernel_raising_on_a_forward_puts_the_model_back_on_pytorch(tmp_path: Path) -> None:
    model = tiny_llama()
    batch = TOKENS.repeat(2, 1)
    before = logits(model, batch)
    explorer = Explorer(model, include_transformers=False)
    repo = write_attention_repo(tmp_path, "raising-attention", source=RAISING_ON_BATCH_ATTENTION)
    assert all(now.is_kernel for now in explorer.on(ATTENTION, candidate=repo))  # passes its trial
    torch.testing.assert_close(logits(model, batch), before)  # the failing call answered by PyTorch
    running = explorer.running(ATTENTION)
    assert not any(now.is_kernel for now in running)
    assert all("raised when run" in now.reason and "raises on batches" in now.reason for now in running)
    assert model.config._attn_implementation == "sdpa"
    assert torch.equal(logits(model, batch), before)


def test_a_candidate_with_no_inputs_to_try_is_unverified_until_there_are(hub: dict) -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    model = torch.nn.Sequential(LlamaRMSNorm(64))  # no config, no tokenizer: no input to guess
    explorer = Explorer(model, include_transformers=False)
    # (a model loaded earlier in the process may have registered Transformers' mapping: not here)
    here = [(c, a) for c, a in explorer.inventory().row("RMSNorm").candidates if c.device == "cpu"]
    assert [(c.source, a.state.value) for c, a in here] == [("bundled", "unverified")]
    assert "capture() first" in here[0][1].reason
    assert all(now.is_kernel for now in explorer.on("RMSNorm"))  # unverified is still worth a try
    explorer.off("RMSNorm")
    explorer.capture({"input": torch.rand(2, 5, 64)})
    here = [a for c, a in explorer.inventory().row("RMSNorm").candidates if c.device == "cpu"]
    assert [a.state.value for a in here] == ["ready"]


def test_a_second_explorer_of_the_model_reads_the_verdict_the_first_found(repos: dict[str, Path]) -> None:
    model = tiny_llama()
    first = Explorer(model, peers=[repos["cuda_only"]], include_transformers=False)
    peer = candidate(first, "RMSNorm", "cuda-only")
    assert dict(first.inventory().row("RMSNorm").candidates)[peer].state.value == "cannot run here"
    second = Explorer(model, peers=[repos["cuda_only"]], include_transformers=False)  # its own catalog
    found = dict(second.inventory().row("RMSNorm").candidates)[candidate(second, "RMSNorm", "cuda-only")]
    assert found.state.value == "cannot run here" and "`fwd`" in found.reason
