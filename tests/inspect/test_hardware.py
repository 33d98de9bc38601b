"""Hardware snapshot: real detection on this machine, plus accelerator branches.

The CUDA/ROCm/MPS/XPU tests fake only what torch reports about devices (there is no such device
here); the snapshot and `kernels`' resolver run for real on top of those fakes.
"""

from __future__ import annotations

import dataclasses
import json
import platform
from types import SimpleNamespace

import pytest
import torch

from kernel_explorer._backend.internals import internal
from kernel_explorer.inspect.hardware import HardwareSnapshot, detect_hardware

get_variants_local = internal("kernels.variants", "get_variants_local")
resolve_variant = internal("kernels.variants", "resolve_variant")


def _torch_tag() -> str:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return f"torch{major}{minor}"


def test_snapshot_is_immutable() -> None:
    snap = detect_hardware()
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.os = "other"  # type: ignore[misc]


@pytest.mark.skipif(torch.version.cuda is not None, reason="CPU-only torch expected")
def test_accepted_variants_start_with_this_machines_torch_cpu_forms() -> None:
    snap = detect_hardware()
    suffix = f"-cpu-{platform.machine()}-{platform.system().lower()}"
    assert snap.kernels_backend == "cpu"
    first_two = snap.accepted_variants[:2]
    assert all(v.startswith(_torch_tag()) and v.endswith(suffix) for v in first_two), first_two
    assert "torch-cpu" in snap.accepted_variants
    # The other C++ ABI tag is a near-miss the resolver must have rejected.
    other_abi = "cxx98" if torch.compiled_with_cxx11_abi() else "cxx11"
    assert not any(other_abi in v for v in snap.accepted_variants)


def test_accepted_order_is_what_kernels_picks_from_a_repository(tmp_path) -> None:
    """Lay out a repository with every accepted variant plus rejects; kernels must pick our first."""
    snap = detect_hardware()
    for name in [*reversed(snap.accepted_variants), "torch29-cxx11-cu126-x86_64-linux", "torch-metal"]:
        (tmp_path / name).mkdir()
    picked, _ = resolve_variant(get_variants_local(tmp_path))
    assert picked is not None and picked.variant_str == snap.accepted_variants[0]


def test_cpu_isa_matches_what_aten_dispatches() -> None:
    snap = detect_hardware()
    if snap.cpu.torch_capability.startswith("AVX512"):
        assert "AVX-512F" in snap.cpu.isa
    if snap.cpu.torch_capability in ("AVX2", "AVX512"):
        assert "AVX2" in snap.cpu.isa
    assert 1 <= snap.cpu.usable_cores <= snap.cpu.logical_cores


def test_json_has_every_field() -> None:
    data = json.loads(detect_hardware().to_json())
    expected = {f.name for f in dataclasses.fields(HardwareSnapshot)}
    assert expected <= set(data)
    assert {"model", "isa", "logical_cores", "torch_capability"} <= set(data["cpu"])
    assert {"kernels_version", "transformers_version", "ok", "message"} <= set(data["compatibility"])


def test_text_and_html_show_the_variants() -> None:
    snap = detect_hardware()
    text, page = str(snap), snap._repr_html_()
    for variant in snap.accepted_variants:
        assert variant in text and variant in page
    assert "<table>" in page


# --- Faked devices: only torch's device reports are fake; the rest runs for real. ---


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake CUDA 12.8 torch build with one H200, as torch would report it."""
    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, total_memory=141 * 2**30)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)


def test_fake_cuda_device_and_variants(fake_cuda: None) -> None:
    snap = detect_hardware()
    (acc,) = snap.accelerators
    assert (acc.kind, acc.name, acc.arch, acc.runtime_version) == ("cuda", "NVIDIA H200", "9.0", "12.8")
    assert snap.torch_build == "cuda 12.8"
    assert snap.kernels_backend == "cu128"
    # kernels prefers the newest compatible CUDA minor; cu12x for x <= 8 are all accepted.
    assert snap.accepted_variants[0].startswith(f"{_torch_tag()}-") and "cu128" in snap.accepted_variants[0]
    assert any("cu120" in v for v in snap.accepted_variants)
    assert "torch-cuda" in snap.accepted_variants
    assert not any("-cpu-" in v for v in snap.accepted_variants)
    assert any("-cpu-" in v for v in snap.accepted_cpu_variants)
    assert "cuda:0" in str(snap)


def test_fake_rocm_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake ROCm 6.3 build with one MI300X; gfx arch comes from gcnArchName."""
    props = SimpleNamespace(
        name="AMD Instinct MI300X", gcnArchName="gfx942:sramecc+:xnack-", total_memory=2**37
    )
    monkeypatch.setattr(torch.version, "hip", "6.3.42131-fa1d09cbd")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    snap = detect_hardware()
    (acc,) = snap.accelerators
    assert (acc.kind, acc.arch) == ("rocm", "gfx942")
    assert snap.kernels_backend == "rocm63"
    assert snap.accepted_variants[0].split("-")[-3] == "rocm63"


def test_fake_mps_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake Apple MPS availability: kernels selects the Metal backend."""
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    snap = detect_hardware()
    assert [a.kind for a in snap.accelerators] == ["mps"]
    assert snap.kernels_backend == "metal"
    assert "torch-metal" in snap.accepted_variants


def test_fake_xpu_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake Intel XPU with one device."""
    props = SimpleNamespace(name="Intel Data Center GPU Max 1550", total_memory=2**36, driver_version="1.3")
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    monkeypatch.setattr(torch.xpu, "device_count", lambda: 1)
    monkeypatch.setattr(torch.xpu, "get_device_properties", lambda i: props)
    snap = detect_hardware()
    (acc,) = snap.accelerators
    assert (acc.kind, acc.name, acc.driver_version) == ("xpu", props.name, "1.3")
