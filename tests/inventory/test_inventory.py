"""The inventory table: candidates with availability, what runs now, rendering and export."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_explorer.explorer import Explorer
from kernel_explorer.inventory.table import Inventory
from kernel_explorer.loading import tiny_llama


@pytest.fixture
def explorer(hub: dict) -> Explorer:
    found = Explorer(tiny_llama())
    yield found
    found.reset()


def test_rows_follow_the_switches(explorer: Explorer) -> None:
    before = explorer.inventory()
    assert [row.group.name for row in before.rows] == ["rotary_pos_emb", "SiLU", "RMSNorm", "attention"]
    assert before.row("RMSNorm").running_summary == "PyTorch x5"
    explorer.on("RMSNorm", "model.norm")
    after = explorer.inventory().row("RMSNorm")
    kernel_id = explorer.running("RMSNorm")[-1].kernel_id
    # a person's name (repository and layer); the op namespace only where ids belong
    assert after.running_summary == "PyTorch x4, bundled/rmsnorm RMSNorm x1"
    assert kernel_id not in str(explorer.inventory())
    html = explorer.inventory()._repr_html_()
    assert f'<span title="kernel id {kernel_id}">bundled/rmsnorm RMSNorm x1</span>' in html
    assert after.best[0].source == "bundled" and after.status.startswith("ready")


def transformers_elsewhere(layer: str) -> tuple[int, str]:
    """How many of the installed Transformers' mapping entries for `layer` are for other devices
    than the CPU, and those devices in its order (5.22 maps RMSNorm for five, 5.25 for two)."""
    from kernel_explorer._backend.mappings import iter_mapping, transformers_mapping

    entries = [e for e in iter_mapping(transformers_mapping()) if e.layer_name == layer and e.device != "cpu"]
    return len(entries), ", ".join(dict.fromkeys(e.device for e in entries))


def test_text_and_html(explorer: Explorer) -> None:
    inventory = explorer.inventory()
    text = str(inventory)
    assert "RMSNorm" in text and "bundled/rmsnorm:RMSNorm (cpu, any mode)" in text
    assert "Not kernelizable (class declares no kernel layer name): Linear x15" in text
    count, devices = transformers_elsewhere("RMSNorm")
    assert count >= 2
    folded = f"+{count} candidates for other devices ({devices})"
    assert f"  RMSNorm: {folded}" in text.splitlines()
    assert "cuda, training" not in text  # folded: one line, not one per entry
    html = inventory._repr_html_()
    assert html.count("<tr>") == 1 + 4  # header + one row per layer name (attention's included)
    assert 'title="no mapping for this device or mode: mapped for cuda' in html  # reason on hover
    assert ">ready</span>" in html
    summary = f"<summary><small>{folded}</small></summary>"
    rmsnorm = html[html.index("<b>RMSNorm</b>") :]
    # the usable candidate first, the other devices' folded under one line after it
    assert rmsnorm.index(">ready</span>") < rmsnorm.index(summary) < rmsnorm.index("(cuda, ")


def test_the_usable_candidate_comes_first_whatever_the_source_order(hub: dict, tmp_path) -> None:
    from kernels import LocalLayerRepository

    mine = {
        "RMSNorm": {
            "cuda": LocalLayerRepository(repo_path=tmp_path / "for-cuda", layer_name="RMSNorm"),
            "cpu": LocalLayerRepository(repo_path=tmp_path / "not-built", layer_name="RMSNorm"),
        }
    }
    row = Explorer(tiny_llama(), mine).inventory().row("RMSNorm")
    assert [c.source for c, _ in row.candidates[:2]] == ["user", "user"]  # the catalog's order
    here = [(c.source, found.state.usable) for c, found in row.here]
    assert here == [("bundled", True), ("user", False)]
    count, devices = transformers_elsewhere("RMSNorm")  # and the user's own cuda entry
    assert all(c.device != "cpu" for c, _ in row.elsewhere) and len(row.elsewhere) == count + 1
    assert row.elsewhere_summary == f"+{count + 1} candidates for other devices ({devices})"
    html = Inventory((row,), (), "cpu", "inference")._repr_html_()
    assert html.index("bundled/rmsnorm:RMSNorm") < html.index("not-built") < html.index("<details>")
    text = str(Inventory((row,), (), "cpu", "inference"))
    assert f"  RMSNorm: 1 more for cpu; +{count + 1} candidates for other devices" in text


def test_pandas_export(explorer: Explorer) -> None:
    explorer.on("SiLU")
    inventory = explorer.inventory()
    instances = inventory.to_pandas()
    assert len(instances) == 2 + 2 + 5 + 2  # two attention modules
    silu = instances[instances.layer == "SiLU"]
    assert set(silu.runs) == {"kernel"} and silu.kernel_id.notna().all()
    assert set(silu.kernel) == {"bundled/activation Silu"}  # the name beside the id
    candidates = inventory.to_pandas("candidates")
    assert {"layer", "candidate", "source", "state", "reason"} <= set(candidates.columns)
    bundled = candidates[(candidates.source == "bundled") & (candidates.layer != "attention")]
    assert (bundled.state == "ready").all()  # (the bundled attention repository: its own branch)
    with pytest.raises(ValueError, match="level must be"):
        inventory.to_pandas("rows")


@pytest.mark.slow
def test_smollm2_inventory(hub: dict) -> None:
    from kernel_explorer.loading import load_default_model

    model, _ = load_default_model(progress=False)
    inventory = Explorer(model).inventory()
    counts = {row.group.name: len(row.group) for row in inventory.rows}
    assert counts == {"RMSNorm": 61, "rotary_pos_emb": 30, "SiLU": 30, "attention": 30}
    for row in inventory.rows[:3]:
        assert row.best[0].source == "bundled" and row.status.startswith("ready"), row.status
        others = [found for c, found in row.candidates if c.source == "transformers"]
        assert others and all(f.state.value == "no mapping for this device or mode" for f in others)


def test_the_inventory_shows_the_last_measured_speedup_with_its_interval(hub: dict) -> None:
    from kernel_explorer.explorer import Explorer
    from kernel_explorer.loading import tiny_llama

    explorer = Explorer(tiny_llama(), include_transformers=False)
    assert explorer.inventory().row("RMSNorm").measured_summary == "not measured"
    explorer.compare("RMSNorm", pairs=6)
    row = explorer.inventory().row("RMSNorm")
    (verdict,) = explorer.results.records("layer_verdict")
    assert row.measured == verdict.values and row.measured_summary.startswith(
        f"{verdict.values.speedup:.2f}x ["
    )
    assert (
        row.measured_summary in str(explorer.inventory())
        and "measured speedup" in explorer.inventory()._repr_html_()
    )


def test_runs_now_says_why_pytorch_runs_where_a_kernel_was_refused(tmp_path, hub: dict) -> None:  # type: ignore[no-untyped-def]
    from kernel_repos import NO_BACKWARD_RMSNORM, write_repo
    from kernels import LocalLayerRepository

    from kernel_explorer.explorer import Explorer
    from kernel_explorer.loading import tiny_llama

    path = write_repo(tmp_path, "kx-no-backward", layers=NO_BACKWARD_RMSNORM)
    mapping = {"RMSNorm": {"cpu": LocalLayerRepository(repo_path=path, layer_name="RMSNorm")}}
    explorer = Explorer(tiny_llama(), mapping, mode="training", include_transformers=False)
    explorer.on("RMSNorm")
    summary = explorer.inventory().row("RMSNorm").running_summary
    assert summary.startswith("PyTorch x5 (") and "does not support training" in summary
    explorer.off("RMSNorm")
    assert explorer.inventory().row("RMSNorm").running_summary == "PyTorch x5"  # asked for nothing now


def test_inventory_shows_the_projects_kernel_pins(hub: dict, tmp_path: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "app"\n\n[tool.kernels.dependencies]\n'
        '"kernels-community/activation" = 1\n"kernels-community/rotary" = 2\n'
    )
    (tmp_path / "kernels.lock").write_text(
        '[{"dependency": {"repo-id": "kernels-community/activation", "version": 1},'
        f' "lock": {{"commit": "{commit}"}}}}]'
    )
    inventory = Explorer(tiny_llama(), project=tmp_path).inventory()
    assert inventory.pins_summary == (
        "Project kernel pins: kernels-community/activation v1 @ 0123456, "
        "kernels-community/rotary v2 (not locked: `kernels lock <project>`)"
    )
    assert inventory.pins_summary in str(inventory) and "0123456" in inventory._repr_html_()


def test_a_broken_lock_file_is_one_line(hub: dict, tmp_path: Path) -> None:
    from kernel_explorer.errors import KernelExplorerError

    (tmp_path / "kernels.lock").write_text("[{]")
    with pytest.raises(KernelExplorerError, match="is not a kernels lock file") as info:
        Explorer(tiny_llama(), project=tmp_path).inventory()
    assert "\n" not in str(info.value)


def test_a_share_profiled_for_a_layer_retracted_since_says_profile_again(explorer: Explorer) -> None:
    from kernel_explorer.inventory.table import build_inventory

    shares = {"Linear (matmul)": 0.5, "Linear": 0.3, "RMSNorm": 0.02}  # "Linear": an extended row, gone
    found = build_inventory(
        explorer.model, explorer._catalog, explorer._switchboard, mode=explorer.mode, shares=shares
    )
    assert dict(found.uncovered) == {
        "Linear (matmul)": 0.5,
        "Linear (not a kernel layer now: profile again)": 0.3,
    }
