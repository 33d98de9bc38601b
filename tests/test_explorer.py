"""Explorer: the one object views drive; bad input and `using`."""

from __future__ import annotations

import pytest

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_gpt2, tiny_llama


def test_rejects_what_is_not_a_module() -> None:
    with pytest.raises(KernelExplorerError, match=r"needs a torch\.nn\.Module, got str"):
        Explorer("SmolLM2")  # type: ignore[arg-type]
    with pytest.raises(KernelExplorerError, match="mapping must be a dict"):
        Explorer(tiny_llama(), mapping=["RMSNorm"])  # type: ignore[arg-type]
    with pytest.raises(KernelExplorerError, match="Unknown mode 'fast'"):
        Explorer(tiny_llama(), mode="fast")


def test_using_restores_the_state_before_also_on_error(hub: dict) -> None:
    explorer = Explorer(tiny_llama())
    explorer.on("RMSNorm", "model.norm")
    before = {now.instance: now.kernel_id for now in explorer.running()}
    with pytest.raises(ZeroDivisionError), explorer.using("RMSNorm", "SiLU") as running:
        assert len(running) == 5 + 2 and all(now.is_kernel for now in running)
        1 / 0  # noqa: B018
    assert {now.instance: now.kernel_id for now in explorer.running()} == before
    explorer.reset()


def test_using_without_names_switches_every_layer(hub: dict) -> None:
    explorer = Explorer(tiny_gpt2())
    assert explorer.layers == ["NewGELU", "attention"]
    with explorer.using() as running:
        assert [now.is_kernel for now in running if now.layer_name == "NewGELU"] == [True, True]
        # attention too: the bundled attention kernel where it is built, else PyTorch and why
        attention = [now for now in running if now.layer_name == "attention"]
        assert len(attention) == 2 and all(now.is_kernel or now.reason for now in attention)
        on = 2 + sum(now.is_kernel for now in attention)
        assert repr(explorer) == f"<Explorer GPT2LMHeadModel: 2 kernel layers, {on}/4 instances on kernels>"
    assert not any(now.is_kernel for now in explorer.running())


def test_training_mode_by_default(hub: dict) -> None:
    explorer = Explorer(tiny_llama(), mode="training")
    running = explorer.on("RMSNorm")  # the bundled RMSNorm has a backward: it runs in training mode
    assert running and all(now.is_kernel for now in running)
    assert explorer.inventory().mode == "training"


def test_the_constructor_never_builds_and_says_how_to(fresh_cache) -> None:  # type: ignore[no-untyped-def]
    explorer = Explorer(tiny_llama(), include_transformers=False)
    assert not (fresh_cache / "hub").exists()  # nothing compiled, nothing written
    found = explorer.inventory().row("RMSNorm").candidates[0][1]
    assert found.state.value == "no build for this machine" and "kernel-explorer build-hub" in found.reason
    (now, *_) = explorer.on("RMSNorm")
    assert not now.is_kernel and "kernel-explorer build-hub" in now.reason
    assert not (fresh_cache / "hub").exists()
