"""Peers: a kernel-builder repository written here (several [kernel.*] sections, ISA-specific
cxx-flags, a CUDA one; and a noarch one), built, loaded by `kernels`, run on the tiny model next to
the bundled kernel, and compared with PyTorch and the bundled kernel in one run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from kernel_repos import write_noarch_repo, write_standard_repo
from kernels import get_local_kernel

from kernel_explorer import Explorer
from kernel_explorer.build.builder import BuiltRepo, build_path
from kernel_explorer.build.repo_format import cpu_features
from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.loading import tiny_llama


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BuiltRepo]:
    source = write_standard_repo(tmp_path_factory.mktemp("peer") / "peer-rmsnorm")
    return source, build_path(source, progress=False)


def _reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


@pytest.mark.slow
def test_standard_repo_builds_every_cpu_section_and_loads(peer: tuple[Path, BuiltRepo]) -> None:
    _, built = peer
    assert built.isas == ("rms_norm_cpu", "rms_norm_avx2")
    assert any("[kernel.rms_norm_cuda] skipped" in note for note in built.notes)
    assert built.kernel_id.startswith("_peer_rmsnorm_cpu_") and built.variant.startswith("torch")
    files = {p.name for p in built.variant_path.iterdir()}
    assert {"metadata.json", "_ops.py", "__init__.py", "layers.py", f"{built.kernel_id}.abi3.so"} <= files
    assert not {"obj", "generated", "registration.h"} & files  # build intermediates are gone
    module = get_local_kernel(built.repo_path)
    assert module.__name__ == built.kernel_id
    assert module.path() == ("avx2" if {"avx2", "fma"} <= cpu_features() else "portable")
    x, w = torch.randn(3, 64), torch.randn(64)
    torch.testing.assert_close(module.rms_norm(x, w, 1e-6), _reference(x, w, 1e-6))
    assert hasattr(getattr(torch.ops, built.kernel_id), "rms_norm")  # the ops namespace is the id


@pytest.mark.slow
def test_peer_runs_on_the_tiny_model_next_to_the_bundled_kernel(
    hub: dict, peer: tuple[Path, BuiltRepo]
) -> None:
    source, built = peer
    model = tiny_llama()
    inputs = torch.randint(0, model.config.vocab_size, (1, 12))
    with torch.no_grad():
        expected = model(inputs).logits
    explorer = Explorer(model, peers=[source])
    sources = [c.source for c in explorer._catalog.candidates("RMSNorm")]
    assert "bundled" in sources and "peer" in sources
    peer_candidate = next(c for c in explorer._catalog.candidates("RMSNorm") if c.source == "peer")
    running = explorer.on("RMSNorm", candidate=peer_candidate)
    assert running and all(now.kernel_id == built.kernel_id for now in running)
    with torch.no_grad():
        torch.testing.assert_close(model(inputs).logits, expected, atol=1e-4, rtol=1e-4)
    explorer.reset()

    handle = explorer.compare("RMSNorm", candidates=["bundled", "peer"], pairs=3, calibration_pairs=2)
    summary = explorer.results.layer_summary()
    rows = summary[summary.run_id == handle.run_id]
    assert sorted(rows.kernel) == sorted([hub["rmsnorm"].__name__, built.kernel_id])
    assert (rows.pairs > 0).all() and rows.speedup.notna().all()
    assert not any(now.is_kernel for now in explorer.running())  # both switched back after their turn


@pytest.mark.slow
def test_a_built_path_is_taken_as_a_peer(peer: tuple[Path, BuiltRepo]) -> None:
    _, built = peer
    explorer = Explorer(tiny_llama())
    added = explorer.add_peer(built.repo_path)
    assert [c.layer_name for c in added] == ["RMSNorm"] and added[
        0
    ].repo_label == f"peer/{built.repo_path.name}"


def test_noarch_peer(tmp_path: Path, fresh_cache: Path) -> None:
    source = write_noarch_repo(tmp_path / "py-rmsnorm")
    explorer = Explorer(tiny_llama(), peers=[source], include_bundled=False)
    running = explorer.on("RMSNorm", candidate=f"peer/{build_path(source).repo_path.name}")
    assert running and all(now.kernel_id and now.kernel_id.startswith("_py_rmsnorm_cpu_") for now in running)
    explorer.reset()


def test_peer_serving_none_of_the_layers_is_one_line(tmp_path: Path, fresh_cache: Path) -> None:
    from kernel_explorer.catalog.peers import peer_mapping

    source = write_noarch_repo(tmp_path / "py-rmsnorm")
    with pytest.raises(KernelExplorerError, match="none of its layer classes") as info:
        peer_mapping(source, ["SiLU"])
    assert "\n" not in str(info.value)


def test_compare_with_an_unknown_candidate_is_one_line(hub: dict) -> None:
    explorer = Explorer(tiny_llama())
    with pytest.raises(
        KernelExplorerError, match="No candidate 'nobody' for layer 'RMSNorm': name one of rmsnorm"
    ) as info:
        explorer.compare("RMSNorm", candidates=["nobody"], pairs=3)
    assert "\n" not in str(info.value)
