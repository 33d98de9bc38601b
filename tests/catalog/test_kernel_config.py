"""A Transformers KernelConfig as the explorer's mapping (issue 28 item 15)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama


def test_a_local_kernel_config_is_explored_and_transformers_refusal_of_cpu_is_said(hub: dict) -> None:
    from transformers import KernelConfig

    rmsnorm = Path(hub["rmsnorm"].__file__).parents[2]  # the built repository: build/<variant>/...
    config = KernelConfig({"RMSNorm": f"{rmsnorm}:RMSNorm"}, use_local_kernel=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        explorer = Explorer(tiny_llama(), mapping=config, include_bundled=False, include_transformers=False)
    (warning,) = [w for w in caught if "KernelConfig" in str(w.message)]
    text = str(warning.message)
    assert "Transformers would refuse this KernelConfig" in text and "RMSNorm on 'cpu'" in text
    assert warning.filename == __file__  # the line that made the explorer, not the toolkit's
    row = explorer.inventory().row("RMSNorm")
    assert [c.source for c, _ in row.candidates][:1] == ["user"] and row.best[1].state.usable
    explorer.on("RMSNorm")
    assert all(now.is_kernel for now in explorer.running("RMSNorm"))
    explorer.reset()


def test_hub_entries_per_device_and_bad_entries() -> None:
    from kernels import LayerRepository
    from transformers import KernelConfig

    from kernel_explorer.catalog.kernel_config import mapping_from_kernel_config

    config = KernelConfig(
        {"SiLU": {"cuda": ("org/act:Silu", {"revision": "v2"})}, "RMSNorm": "org/norm:RMSNorm"}
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mapping = mapping_from_kernel_config(config, "cuda")
    assert not caught  # all on devices Transformers takes
    assert isinstance(mapping["SiLU"]["cuda"], LayerRepository) and set(mapping) == {"SiLU", "RMSNorm"}
    with pytest.raises(KernelExplorerError, match="is not of the form 'org/repo:Layer'"):
        mapping_from_kernel_config(KernelConfig({"SiLU": "no-colon"}), "cpu")
