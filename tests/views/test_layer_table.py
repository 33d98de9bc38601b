"""The layer table's candidate picker: each kernel once per device, this device first, no PyTorch."""

from __future__ import annotations

from types import SimpleNamespace

from kernel_explorer._backend.mappings import transformers_mapping
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
        (liger, "cuda, rocm"),  # not choosable on either, for one reason: one entry
    ]


def test_a_kernel_no_device_here_can_take_is_one_entry_naming_its_devices(hub: dict) -> None:
    """The SiLU picker listed the Hub's activation kernel three times, alike: "(no mapping for this
    device or mode)" under cuda, rocm and xpu. It is one entry naming the three; the bundled kernel,
    which can be chosen, stays an entry of its own. The devices are those the installed
    Transformers maps SiLU for (5.25: cuda, rocm, xpu; 5.22: cuda, xpu)."""
    devices = list(transformers_mapping()["SiLU"])
    assert len(devices) >= 2 and "cpu" not in devices, devices
    explorer = Explorer(tiny_llama())  # Transformers' mapping: the Hub's kernels for the GPUs
    try:
        rows = {row["name"]: row for row in table_rows(explorer)}
        options = rows["SiLU"]["candidates"]
        hub_entries = [o for o in options if o["short"].startswith("kernels-community/activation")]
        assert [(o["device"], o["usable"]) for o in hub_entries] == [(", ".join(devices), False)], options
        assert all(f"mapped for {device}" in hub_entries[0]["reason"] for device in devices)
        assert [o["short"] for o in options if o["usable"]] == ["bundled/activation:Silu"]
    finally:
        explorer.reset()


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


def test_a_redraw_after_a_switch_reads_no_source_again(hub: dict, monkeypatch) -> None:
    """A click is answered with a redraw of every row, while a Run holds the GIL half the time: the
    redraw read each attention class's source (inspect.getsource tokenizes the file) on every click,
    and matched each instance's kernel against every candidate ~15 times. Now the first redraw reads
    the source once and the next reads none; one instance's kernel name is matched once per redraw."""
    import inspect

    from kernel_explorer.inventory.row import InventoryRow

    reads: list[object] = []
    real = inspect.getsource
    monkeypatch.setattr(inspect, "getsource", lambda obj: reads.append(obj) or real(obj))
    matched: list[object] = []
    real_match = InventoryRow._kernel_name
    monkeypatch.setattr(
        InventoryRow, "_kernel_name", lambda self, now: matched.append(now) or real_match(self, now)
    )
    explorer = Explorer(tiny_llama(), include_transformers=False)
    try:
        explorer.on("RMSNorm")
        table_rows(explorer)
        explorer.off("RMSNorm")
        explorer.on("RMSNorm")
        reads.clear()
        matched.clear()
        rows = {row["name"]: row for row in table_rows(explorer)}
        assert not reads, reads
        on = [i for i in rows["RMSNorm"]["instances"] if i["on"]]
        assert len(on) > 1 and all(i["runs"].startswith("bundled/rmsnorm") for i in on), on
        assert len(matched) == 1, matched  # one kernel on every instance: one match
    finally:
        explorer.reset()
