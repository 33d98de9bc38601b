"""Catalog: every source in one place, availability states with their reasons, choosing."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_repos import write_repo
from kernels import CUDAProperties, Device, LayerRepository, LocalLayerRepository, Mode, use_kernel_mapping

from kernel_explorer.catalog.availability import State
from kernel_explorer.catalog.candidates import Catalog
from kernel_explorer.errors import KernelExplorerError, NoUsableKernelError

INFERENCE = Mode.INFERENCE


def test_sources_in_preference_order(hub: dict, tmp_path: Path) -> None:
    user = LocalLayerRepository(repo_path=write_repo(tmp_path, "kx-user"), layer_name="RMSNorm")
    registered = LayerRepository("someone/rmsnorm", layer_name="RMSNorm", version=2)
    with use_kernel_mapping({"RMSNorm": {"cuda": registered}}):
        catalog = Catalog({"RMSNorm": {"cpu": user}})
    sources = [c.source for c in catalog.candidates("RMSNorm")]
    assert sources[:3] == ["user", "registered", "bundled"]
    assert set(sources[3:]) == {"transformers"}
    assert {"RMSNorm", "SiLU", "rotary_pos_emb", "GeLU", "QuickGELU"} <= set(catalog.layer_names())


def test_registered_cuda_capability_ranges_are_listed(hub: dict) -> None:
    repo = LayerRepository("someone/norm", layer_name="RMSNorm", version=1)
    device = Device(type="cuda", properties=CUDAProperties(min_capability=80, max_capability=90))
    with use_kernel_mapping({"RMSNorm": {device: repo}}, inherit_mapping=False):
        catalog = Catalog(include_bundled=False, include_transformers=False)
    (candidate,) = catalog.candidates("RMSNorm")
    assert candidate.entry.properties == "capability 80-90"
    assert candidate.label == "someone/norm@v1:RMSNorm (cuda capability 80-90, any mode)"


def test_transformers_defaults_read_as_for_other_devices(hub: dict) -> None:
    catalog = Catalog(include_bundled=False)
    found = [catalog.availability(c, device="cpu", mode=INFERENCE) for c in catalog.candidates("RMSNorm")]
    assert found and all(f.state is State.NO_MAPPING for f in found)
    assert any("mapped for cuda, the model is on cpu" in f.reason for f in found)


def test_a_mode_the_mapping_lacks(hub: dict) -> None:
    repo = LayerRepository("someone/norm", layer_name="RMSNorm", version=1)
    catalog = Catalog(
        {"RMSNorm": {"cpu": {Mode.INFERENCE | Mode.TORCH_COMPILE: repo}}}, include_bundled=False
    )
    (candidate,) = [c for c in catalog.candidates("RMSNorm") if c.source == "user"]
    found = catalog.availability(candidate, device="cpu", mode=Mode.TRAINING)
    assert found.state is State.NO_MAPPING
    assert found.reason == "mapped for inference+torch.compile, not for training"


def test_local_states(hub: dict, tmp_path: Path) -> None:
    good = LocalLayerRepository(repo_path=write_repo(tmp_path, "kx-good"), layer_name="RMSNorm")
    cuda = write_repo(tmp_path, "kx-cuda", variant="torch213-cxx11-cu126-x86_64-linux")
    no_build = LocalLayerRepository(repo_path=cuda, layer_name="RMSNorm")
    absent = LocalLayerRepository(repo_path=tmp_path / "nowhere", layer_name="RMSNorm")
    catalog = Catalog({"RMSNorm": {"cpu": good}, "SiLU": {"cpu": no_build}, "GeLU": {"cpu": absent}})
    states = {
        c.layer_name: catalog.availability(c, device="cpu", mode=INFERENCE)
        for c in catalog.candidates()
        if c.source == "user"
    }
    assert states["RMSNorm"].state is State.READY and states["RMSNorm"].variant == "torch-cpu"
    assert states["SiLU"].state is State.NO_BUILD
    assert any("cu126" in line for line in states["SiLU"].trace)
    assert "cu126" in states["SiLU"].details
    assert states["GeLU"].state is State.FAILED and "does not exist" in states["GeLU"].reason


def test_hub_candidates_are_not_queried_unless_asked(hub: dict) -> None:
    repo = LayerRepository("someone/norm", layer_name="RMSNorm", version=1)
    catalog = Catalog({"RMSNorm": {"cpu": repo}}, include_bundled=False, include_transformers=False)
    (candidate,) = catalog.candidates("RMSNorm")
    found = catalog.availability(candidate, device="cpu", mode=INFERENCE)
    assert found.state is State.CHECKING and "not been asked" in found.reason


def test_failures_are_remembered_and_can_be_cleared(hub: dict) -> None:
    catalog = Catalog(include_transformers=False)
    (candidate,) = catalog.candidates("RMSNorm")
    catalog.record_failure(candidate, "ImportError: injected")
    assert (
        str(catalog.availability(candidate, device="cpu", mode=INFERENCE))
        == "failed to load: ImportError: injected"
    )
    catalog.clear_failure(candidate)
    assert catalog.availability(candidate, device="cpu", mode=INFERENCE).state is State.READY


def test_choose(hub: dict, tmp_path: Path) -> None:
    cuda = write_repo(tmp_path, "kx-cuda", variant="torch213-cxx11-cu126-x86_64-linux")
    mapping = {"RMSNorm": {"cpu": LocalLayerRepository(repo_path=cuda, layer_name="RMSNorm")}}
    catalog = Catalog(mapping, include_transformers=False)
    assert catalog.choose("RMSNorm", device="cpu", mode=INFERENCE).source == "bundled"  # user's has no build
    named = catalog.choose("RMSNorm", device="cpu", mode=INFERENCE, candidate="user/kx-cuda")
    assert named.source == "user"
    with pytest.raises(
        KernelExplorerError,
        match=r"No candidate 'nope' for layer 'RMSNorm': name one of kx-cuda, rmsnorm \(or a source: user, "
        r"bundled\)",
    ):
        catalog.choose("RMSNorm", device="cpu", mode=INFERENCE, candidate="nope")
    with pytest.raises(NoUsableKernelError, match="mapped for cpu, the model is on cuda"):
        catalog.choose("RMSNorm", device="cuda", mode=INFERENCE)


def test_added_candidates_take_their_sources_place_once(hub: dict, tmp_path: Path) -> None:
    repo = write_repo(tmp_path, "kx-dense")
    first = LocalLayerRepository(repo_path=repo, layer_name="A")
    second = LocalLayerRepository(repo_path=repo, layer_name="B")
    catalog = Catalog(include_transformers=False)
    assert catalog.add({"Dense": {"cpu": second}}, "bundled")[0].source == "bundled"
    added = catalog.add({"Dense": {"cpu": first}})
    assert [c.source for c in added] == ["user"]
    assert catalog.add({"Dense": {"cpu": first}}) == []  # already there: kept once
    assert [c.repository.layer_name for c in catalog.candidates("Dense")] == ["A", "B"]  # user before bundled
    assert catalog.candidates()[0].source == "user"
    with pytest.raises(KernelExplorerError, match="source must be one of user, registered"):
        catalog.add({"Dense": {"cpu": first}}, "mine")
    assert (
        catalog.choose("Dense", device="cpu", mode=INFERENCE, candidate="bundled/kx-dense:B").repository
        == second
    )
