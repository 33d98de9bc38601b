"""What another machine would load: kernels' resolver run for a described platform, on local
repositories whose `build/<variant>/` folders the test lays out (metadata.json only: nothing loads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama

STABLE = "torch-stable-abi-2.11-cuda-13.0-cpython-3.9-abi3-x86_64-linux"
CUDA = "torch213-cxx11-cu130-x86_64-linux"
OLD_CUDA = "torch213-cxx11-cu126-x86_64-linux"  # same torch, CUDA 12: rejected by a CUDA 13 machine
ROCM = "torch213-cxx11-rocm70-x86_64-linux"
METAL = "torch213-metal-aarch64-darwin"
CPU = "torch213-cxx11-cpu-x86_64-linux"
NOARCH = "torch-cpu"
BACKENDS = {
    STABLE: "cuda",
    CUDA: "cuda",
    OLD_CUDA: "cuda",
    ROCM: "rocm",
    METAL: "metal",
    CPU: "cpu",
    NOARCH: "cpu",
}


def lay_out(root: Path) -> Path:
    for variant, backend in BACKENDS.items():
        folder = root / "build" / variant
        folder.mkdir(parents=True)
        archs = {"cuda": ["8.0", "9.0"], "rocm": ["gfx90a", "gfx942"]}.get(backend)
        meta = {"id": "_laid_out", "name": "laid-out", "version": 1, "license": "MIT", "python-depends": []}
        meta["backend"] = {"type": backend, **({"archs": archs} if archs else {})}
        (folder / "metadata.json").write_text(json.dumps(meta))
    return root


@pytest.fixture
def explorer(tmp_path: Path) -> Explorer:
    from kernels import LocalLayerRepository

    repo = lay_out(tmp_path / "laid-out")
    mapping = {"RMSNorm": {"cpu": LocalLayerRepository(repo_path=repo, layer_name="RMSNorm")}}
    return Explorer(tiny_llama(), mapping, include_bundled=False, include_transformers=False)


def _only(report):  # type: ignore[no-untyped-def]
    [found] = report.candidates
    return found, {v.variant: v for v in found.verdicts}


def test_a_cuda_machine_takes_its_cuda_build_and_says_why_the_others_are_rejected(explorer: Explorer) -> None:
    found, verdicts = _only(explorer.variants("RMSNorm", platform="cuda 13.0, sm_90, torch 2.13"))
    stable_readable = "cannot read" not in verdicts[STABLE].reason  # kernels 0.17 reads no dotted form
    assert found.taken == (STABLE if stable_readable else CUDA)  # stable ABI first, where kernels reads it
    assert verdicts[CUDA].accepted and not found.refused_on_load
    assert "CUDA version (12.6)" in verdicts[OLD_CUDA].reason
    assert "does not match" in verdicts[ROCM].reason and "does not match" in verdicts[CPU].reason
    assert "CPU (aarch64)" in verdicts[METAL].reason
    text = str(explorer.variants("RMSNorm", platform="cuda 13.0, sm_90, torch 2.13"))
    assert f"takes {found.taken}" in text and "cuda 13.0, sm_90, torch 2.13" in text


def test_a_gpu_the_build_does_not_declare_is_refused_on_load(explorer: Explorer) -> None:
    found, _ = _only(explorer.variants("RMSNorm", platform="cuda 13.0, sm_120, torch 2.13"))
    assert found.taken is not None and "8.0, 9.0, not sm_120" in found.refused_on_load
    rocm, _ = _only(explorer.variants("RMSNorm", platform="rocm 7.0, gfx1100, torch 2.13"))
    assert rocm.taken == ROCM and "not gfx1100" in rocm.refused_on_load


def test_rocm_metal_and_cpu_machines(explorer: Explorer) -> None:
    rocm, verdicts = _only(explorer.variants("RMSNorm", platform="rocm 7.0, gfx942, torch 2.13"))
    assert rocm.taken == ROCM and not rocm.refused_on_load
    assert "does not match selected backend (rocm70)" in verdicts[CUDA].reason
    metal, verdicts = _only(explorer.variants("RMSNorm", platform="metal, torch 2.13"))
    assert metal.taken == METAL and not verdicts[CPU].accepted
    cpu, verdicts = _only(explorer.variants("RMSNorm", platform="cpu, x86_64, torch 2.13"))
    assert cpu.taken == CPU and verdicts[NOARCH].accepted  # the arch build is preferred over noarch
    older, verdicts = _only(explorer.variants("RMSNorm", platform="cpu, x86_64, torch 2.12"))
    assert older.taken == NOARCH and "Torch version (2.13)" in verdicts[CPU].reason
    arm, _ = _only(explorer.variants("RMSNorm", platform="cpu, aarch64, torch 2.13"))
    assert arm.taken == NOARCH


@pytest.mark.parametrize(
    "text", ["cuda, torch 2.13", "tpu, torch 2.13", "cuda 13.0, gfx942, torch 2.13", "cpu"]
)
def test_a_description_it_cannot_read_is_one_line_naming_the_forms(explorer: Explorer, text: str) -> None:
    with pytest.raises(KernelExplorerError, match=r"cuda 13\.0, sm_90, torch 2\.13") as info:
        explorer.variants("RMSNorm", platform=text)
    assert "\n" not in str(info.value) and repr(text) in str(info.value)


def test_the_hardware_panel_shows_another_machine(explorer: Explorer) -> None:
    panel = explorer.hardware_for("rocm 7.0, gfx942, torch 2.13")
    assert f"takes {ROCM}" in str(panel) and "RMSNorm elsewhere" in str(panel)
    assert panel.to_json()


def test_the_hardware_panel_gives_kernels_reason_for_every_variant_kind(explorer: Explorer) -> None:
    verdicts = {v.variant: v for v in explorer.hardware.variant_verdicts}
    assert any(v.accepted for v in verdicts.values())
    assert "mlx-metal" in verdicts and not verdicts["mlx-metal"].accepted and verdicts["mlx-metal"].reason
    stable = [name for name in verdicts if name.startswith("torch-stable-abi-")]
    tvm = [name for name in verdicts if name.startswith("tvm-ffi-")]
    assert len(stable) == 2 and tvm and all(verdicts[n].reason or verdicts[n].accepted for n in stable + tvm)
    assert "Variants (kernels' word)" in str(explorer.hardware)
