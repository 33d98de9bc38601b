"""The layer table's candidate picker: each kernel once per device, this device first, no PyTorch."""

from __future__ import annotations

from types import SimpleNamespace

from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama
from kernel_explorer.views.layer_table import picker_candidates, table_rows


def _found(label: str, device: str, usable: bool, pytorch: bool = False) -> tuple:
    candidate = SimpleNamespace(label=label, device=device, pytorch=pytorch)
    state = SimpleNamespace(usable=usable, value="ready" if usable else "no mapping for this device or mode")
    return candidate, SimpleNamespace(state=state, details="why")


def test_each_candidate_once_per_device_this_device_first_and_no_pytorch() -> None:
    liger = "kernels-community/liger-kernels@v3:LigerRMSNorm"
    found = [
        *[
            _found(f"{liger} (cuda {cap}, {mode})", "cuda", False)
            for cap in ("80", "90")
            for mode in ("a", "b")
        ],
        *[_found(f"{liger} (rocm, {mode})", "rocm", False) for mode in ("a", "b")],
        _found("bundled/rmsnorm:RMSNorm (cpu, inference)", "cpu", True),
        _found("eager", "cpu", True, pytorch=True),
    ]
    options = picker_candidates(found, "cpu")
    assert [(o["short"], o["device"]) for o in options] == [
        ("bundled/rmsnorm:RMSNorm", "cpu"),
        (liger, "cuda"),
        (liger, "rocm"),
    ]


def test_the_attention_picker_offers_kernels_only(hub: dict) -> None:
    """Picking "eager" gave a row that read off (0/N) while "runs now" said eager, measured as a
    kernel against PyTorch; PyTorch is the switch's off state, not a kernel to pick."""
    explorer = Explorer(tiny_llama(), include_transformers=False)
    try:
        rows = {row["name"]: row for row in table_rows(explorer)}
        shorts = [option["short"] for option in rows["attention"]["candidates"]]
        assert shorts and "eager" not in shorts and "sdpa" not in shorts, shorts
    finally:
        explorer.reset()
