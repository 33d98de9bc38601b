"""Function kernels with Transformers' fallback chain (Hub kernel, pip package, torch reference): the
inventory's function chain rows say which link runs here and why, on tiny random models whose
layers carry such functions (a gated-delta-net model and a mamba model), and for a function
decorated here with Transformers' own decorator over an installed package."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from kernel_explorer._backend.function_chains import FallbackChain, decorator, fallback_chain
from kernel_explorer.catalog.door_row import FUNCTION_CHAIN, HubLink
from kernel_explorer.catalog.function_chains import chain_row, chains
from kernel_explorer.explorer import Explorer

sys.path.insert(0, str(Path(__file__).parent))
from architectures import tiny_config


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.parametrize(
    ("model_type", "expected"),
    [
        (
            "qwen3_next",
            {"chunk_gated_delta_rule": "flash-linear-attention", "causal_conv1d_fn": "causal_conv1d"},
        ),
        ("mamba", {"selective_scan_fn": "mamba_ssm", "causal_conv1d_update": "causal_conv1d"}),
    ],
)
def test_a_tiny_model_says_which_link_of_each_chain_runs(model_type: str, expected: dict[str, str]) -> None:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(model_type)).eval()
    explorer = Explorer(model, include_bundled=False)
    inventory = explorer.inventory()
    rows = {d.name: d for d in inventory.doors if d.kind == FUNCTION_CHAIN}
    assert set(expected) <= set(rows)
    function_rows = {row.group.name for row in inventory.rows if row.group.kind == "function"}
    assert set(rows) <= function_rows  # a chain row for a function layer the model has
    assert "causal_conv1d_forward" not in rows  # a function layer without a chain gets none
    for name, distribution in expected.items():
        row = rows[name]
        assert row.instances >= 1
        # the Hub link's why is the layer row's own state (the Hub kernel is mapped for GPUs only)
        assert f"Hub kernel: {inventory.row(name).status}" in row.reason
        if _installed(distribution):
            continue  # the package's own link then; not the case on this CPU-only stack
        assert row.runs.startswith("torch reference (")
        assert f"the pip package {distribution} is not installed" in row.reason
    assert "function chain" in str(inventory) and len(inventory.to_pandas("doors")) == len(inventory.doors)


def _holder_with(function: nn.Module) -> nn.Module:
    from kernels import use_kernelized_func

    @use_kernelized_func(function)
    class Holder(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return function(x)

    return nn.Sequential(Holder())


def test_an_installed_package_is_the_link_that_runs_and_a_switched_kernel_comes_first() -> None:
    """Transformers' decorator over the standard library's `json.dumps` (an installed package that
    takes any device): the package link runs; a Hub kernel switched on would come before it."""

    def dumps(x: torch.Tensor) -> torch.Tensor:  # the torch reference
        return x

    function = decorator()("dumps", "json")(dumps)
    model = _holder_with(function)
    (chain, count) = chains(model)["dumps"]
    assert (chain.package, chain.package_imported, count) == ("json", True, 1)
    row = chain_row("dumps", chain, count, "cpu", HubLink(why_not="no mapping from any source"))
    assert row.runs == "pip package json" and "Hub kernel: no mapping from any source" in row.reason
    switched = chain_row("dumps", chain, count, "cpu", HubLink(running="org/repo dumps"))
    assert (switched.runs, switched.reason) == ("Hub kernel", "org/repo dumps is switched on")


def test_a_package_that_does_not_import_leaves_the_torch_reference() -> None:
    def no_such_function(x: torch.Tensor) -> torch.Tensor:
        return x

    function = decorator()("no_such_function", "packaging")(no_such_function)  # installed, lacks it
    chain = fallback_chain(function)
    assert chain is not None and not chain.package_imported
    row = chain_row("no_such_function", chain, 1, "cpu", HubLink(why_not="x"))
    assert row.runs == "torch reference (no_such_function)"
    assert "packaging is installed but packaging's no_such_function did not import" in row.reason


def test_a_package_for_other_devices_leaves_the_torch_reference_on_this_one() -> None:
    """Transformers 5.25 sends CPU inputs of an installed package that runs on CUDA only to torch."""
    chain = FallbackChain("selective_scan_fn", "mamba_ssm", "mamba_ssm", True, ("cuda",), "selective_scan_fn")
    row = chain_row("selective_scan_fn", chain, 2, "cpu", HubLink(why_not="mapped for cuda"))
    assert row.runs.startswith("torch reference") and "runs on cuda only, not on cpu" in row.reason
    assert chain_row("selective_scan_fn", chain, 2, "cuda", HubLink()).runs == "pip package mamba_ssm"


def test_a_function_layer_without_a_chain_gives_none(hub: dict) -> None:
    from kernel_explorer.loading import tiny_llama

    model = tiny_llama()  # rotary: a function layer (use_kernelized_func) without a fallback chain
    assert chains(model) == {}
    assert not [d for d in Explorer(model).inventory().doors if d.kind == FUNCTION_CHAIN]
