"""Flash-attention names that Transformers turns into Hub repositories: the inventory's attention
name rows say which repository and revision each name becomes here, and which one the model runs."""

from __future__ import annotations

import importlib.util

import pytest

from kernel_explorer._backend.flash_names import flash_names
from kernel_explorer.catalog.door_row import ATTENTION_NAME
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama


def _rows(explorer: Explorer) -> dict[str, object]:
    return {d.name: d for d in explorer.inventory().doors if d.kind == ATTENTION_NAME}


def test_each_flash_name_says_the_repository_and_revision_it_becomes() -> None:
    from transformers.integrations.hub_kernels import get_attn_kernel_version
    from transformers.modeling_flash_attention_utils import FLASH_ATTN_KERNEL_FALLBACK

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed here: the names stay the package")
    rows = _rows(Explorer(tiny_llama(), include_bundled=False))
    assert set(rows) == set(FLASH_ATTN_KERNEL_FALLBACK)  # Transformers' own table, every name
    for name, repo in FLASH_ATTN_KERNEL_FALLBACK.items():
        row = rows[name]
        revision = f"v{get_attn_kernel_version(repo)}"
        assert (row.repository, row.revision, row.runs) == (repo, revision, f"{repo}@{revision}")
        assert "pip package" in row.reason and "is not installed" in row.reason
    facts = {f.name: f for f in flash_names()}
    flash2 = rows["flash_attention_2"]
    if "cpu" not in facts["flash_attention_2"].devices:
        assert "no build for cpu" in flash2.reason and "cuda" in flash2.reason


def test_the_row_says_which_name_the_models_attention_came_from(
    hub: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flash_attention_2 without the package becomes kernels-community/flash-attn2; its build here
    is the bundled flash_attn (LOCAL_KERNELS, the Hub being unreachable)."""
    from kernel_explorer.build.bundled import bundled_repo_path

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed here: the name stays the package")
    (flash2,) = [f for f in flash_names() if f.name == "flash_attention_2"]
    monkeypatch.setenv("LOCAL_KERNELS", f"{flash2.repository}={bundled_repo_path('flash_attn')}")
    model = tiny_llama()
    model.set_attn_implementation("flash_attention_2")  # what a user types
    explorer = Explorer(model, include_bundled=False)
    row = _rows(explorer)["flash_attention_2"]
    assert f"the model's attention runs {flash2.repository} now" in row.reason
    assert explorer.inventory().row("attention").running_summary.startswith(flash2.repository)
    others = [r for name, r in _rows(explorer).items() if name != "flash_attention_2"]
    assert others and all("the name became it" not in r.reason for r in others)
    model.set_attn_implementation("sdpa")


def test_a_model_that_does_not_take_flash_attention_is_refused_by_name() -> None:
    from kernel_explorer.catalog.flash_names import name_row

    (found,) = [f for f in flash_names() if f.name == "flash_attention_3"]
    row = name_row(found, "cuda", supported=False, running="sdpa")
    assert "does not support flash attention" in row.reason and row.repository == found.repository


def test_a_model_without_transformers_attention_has_no_name_rows() -> None:
    from torch import nn

    explorer = Explorer(nn.Sequential(nn.Linear(4, 4)), include_bundled=False)
    assert not [d for d in explorer.inventory().doors if d.kind == ATTENTION_NAME]
