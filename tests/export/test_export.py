"""`Explorer.export`: the switch state as a module that runs without the explorer, with its numbers.

Each exported module runs in a fresh Python process on the model loaded from its saved folder; its
logits must equal, bitwise, the explorer's with the same state. The module may import only
Transformers, `kernels` and torch.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from kernel_explorer import Explorer
from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.loading import load_model, tiny_llama

IDS = torch.tensor([[5, 17, 42, 99, 3, 250, 7, 64, 128, 31, 2, 77]])

DRIVER = textwrap.dedent(
    """
    import importlib.util, sys, torch
    from transformers import AutoModelForCausalLM
    spec = importlib.util.spec_from_file_location("exported", sys.argv[1])
    exported = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exported)
    model = AutoModelForCausalLM.from_pretrained(sys.argv[2], dtype=exported.DTYPE).eval()
    switched = exported.apply(model)
    with torch.no_grad():
        logits = model(torch.tensor(eval(sys.argv[3]))).logits
    torch.save({"logits": logits, "switched": switched,
                "explorer": [m for m in sys.modules if m.startswith("kernel_explorer")]}, sys.argv[4])
    """
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama saved with save_pretrained (RMSNorm, rotary, SiLU, attention, Linear)."""
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama(num_layers=3).save_pretrained(path)
    return path


def run_exported(module: Path, folder: Path, tmp_path: Path) -> dict:
    """Apply the exported module in a fresh process; its logits, what it switched, what it imported."""
    out = tmp_path / "out.pt"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    ids = str(IDS.tolist())
    done = subprocess.run(
        [sys.executable, str(driver), str(module), str(folder), ids, str(out)],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out)


def explorer_logits(explorer: Explorer) -> torch.Tensor:
    with torch.no_grad():
        return explorer.model(IDS).logits


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_every_door_exported_gives_the_explorers_logits_bitwise(
    folder: Path, tmp_path: Path, hub: dict
) -> None:
    model, _ = load_model(folder, dtype="float32", progress=False)
    explorer = Explorer(model, include_transformers=False)
    pytorch = explorer_logits(explorer)
    explorer.extend("Linear", nn.Linear, instances="model.layers.*.mlp.*")
    for layer in ("RMSNorm", "SiLU", "rotary_pos_emb", "Linear"):
        assert all(now.is_kernel for now in explorer.on(layer, candidate="bundled")), layer
    explorer.on("attention", candidate="bundled")
    assert explorer.running("attention")[0].is_kernel
    expected = explorer_logits(explorer)
    assert not torch.equal(expected, pytorch)  # the kernels do change the numbers: the test can fail

    module = explorer.export(tmp_path / "chosen_kernels.py")
    ruff = str(Path(sys.executable).with_name("ruff"))
    for check in (["check"], ["format", "--check"]):  # the code a user reads is tidy
        done = subprocess.run(
            [ruff, *check, "--isolated", "--line-length", "110", str(module)], capture_output=True
        )
        assert done.returncode == 0, done.stdout.decode()
    assert imports_of(module) <= {
        "__future__",
        "contextlib",
        "logging",
        "os",
        "sys",
        "pathlib",
        "torch",
        "kernels",
        "transformers",
        "argparse",
    }
    got = run_exported(module, folder, tmp_path)
    assert got["explorer"] == []  # kernel_explorer was never imported, not even indirectly
    assert torch.equal(got["logits"], expected)
    assert len(got["switched"]["RMSNorm"]) == len(explorer.group("RMSNorm").instances)
    assert len(got["switched"]["Linear"]) == 9  # 3 layers x gate, up, down; attention's Linear stay
    if hasattr(__import__("kernels"), "get_kernelized_layers"):  # 0.18+: kernels' word, functions too
        assert len(got["switched"]["rotary_pos_emb"]) == len(explorer.group("rotary_pos_emb").instances)
    explorer.reset()  # the pins and the shared rotary function as they were, for the tests after


@pytest.mark.parametrize("trusted", [True, False])
def test_allow_all_kernels_is_exported_only_where_the_user_opted_in(trusted: bool) -> None:
    from kernel_explorer.export.plan import AttentionPlan
    from kernel_explorer.export.script import _attention_lines

    lines = _attention_lines(AttentionPlan("someone/attention@v1", allow_all_kernels=trusted))
    assert f"ALLOW_ALL_KERNELS = {trusted}" in "\n".join(lines)
    assert _attention_lines(None)[2] == "ALLOW_ALL_KERNELS = False"


def test_some_instances_and_a_pinned_path_are_said_and_kept(folder: Path, tmp_path: Path, hub: dict) -> None:
    from isa_paths import runnable_isas

    model, _ = load_model(folder, dtype="float32", progress=False)
    explorer = Explorer(model, include_transformers=False)
    path = runnable_isas()[-1]  # the narrowest path this CPU runs (portable), never the default
    explorer.on("RMSNorm", instances="model.layers.1.*", candidate=f"bundled@{path}")
    explorer.on("SiLU", candidate="bundled")
    expected = explorer_logits(explorer)

    module = explorer.export(tmp_path / "some.py")
    text = module.read_text()
    assert "2 of 7 instances ran a kernel" in text  # said in words, with the instances left out
    assert "model.layers.0.input_layernorm" in text.split('"""')[1]
    assert f'"{path}")' in text  # the pin
    got = run_exported(module, folder, tmp_path)
    assert torch.equal(got["logits"], expected)
    assert sorted(got["switched"]["RMSNorm"]) == [
        "model.layers.1.input_layernorm",
        "model.layers.1.post_attention_layernorm",
    ]

    shown = subprocess.run(
        [sys.executable, str(module), str(folder)], capture_output=True, text=True, timeout=600
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "RMSNorm: 2 instances on a kernel" in shown.stdout
    assert "SiLU: 3 instances on a kernel" in shown.stdout
    explorer.reset()  # the pins and the shared rotary function as they were, for the tests after


def test_pins_for_kernels_lock_and_bad_paths(tmp_path: Path, hub: dict) -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    # the bundled kernels are local builds: comments, and an old pin of the table replaced
    explorer = Explorer(tiny_llama(), include_transformers=False)
    explorer.on("RMSNorm", candidate="bundled")
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "job"\n\n[tool.kernels.dependencies]\n"old/x" = 3\n'
    )
    plan_path = explorer.export_pins(project)
    data = tomllib.loads(plan_path.read_text())
    assert data["project"]["name"] == "job"
    assert data["tool"]["kernels"]["dependencies"] == {}  # the old pin replaced; local builds are comments
    assert "RMSNorm: bundled/rmsnorm" in plan_path.read_text()

    # a Hub repository by version is a dependency `kernels lock` resolves (the Hub is out of reach
    # here, so the plan is written by hand with the coordinates a LayerRepository carries)
    from kernel_explorer.export.pins import pin_lines
    from kernel_explorer.export.plan import ExportPlan, LayerChoice, LayerPlan, Repository

    hub_choice = LayerChoice(
        "RMSNorm",
        "module",
        "org/rms@v2:RMSNorm",
        Repository("RMSNorm", "user", "org/rms", 2),
        "FALLBACK",
        "INFERENCE",
        None,
        ("a",),
    )
    plan = ExportPlan(
        "M", "cpu", "float32", (LayerPlan("RMSNorm", "module", (hub_choice,), (), 1),), (), None
    )
    assert pin_lines(plan)[:2] == ["[tool.kernels.dependencies]", '"org/rms" = 2']
    from kernel_explorer.export.script import render

    text = render(plan)  # the module names it by id and version, and asks for no trust it was not given
    assert '"org/rms",\n' in text and "version=2," in text and "trust_remote_code" not in text

    with pytest.raises(KernelExplorerError, match=r"ending in \.py"):
        explorer.export(tmp_path / "x.txt")
    with pytest.raises(KernelExplorerError, match="does not exist"):
        explorer.export(tmp_path / "missing" / "x.py")
    explorer.reset()  # the pins and the shared rotary function as they were, for the tests after


def test_the_experts_implementation_chosen_is_exported(tmp_path: Path, hub: dict) -> None:
    from hub_like_repos import tiny_qwen3_moe

    folder = tmp_path / "tiny-qwen3-moe"
    tiny_qwen3_moe(vocab_size=256).save_pretrained(folder)
    model, _ = load_model(folder, dtype="float32", progress=False)
    explorer = Explorer(model, include_transformers=False)
    before = explorer_logits(explorer)  # the implementation from_pretrained gives (grouped_mm)
    explorer.on("experts", candidate="batched_mm")
    assert not torch.equal(explorer_logits(explorer), before)  # batched_mm alone changes the bits
    explorer.on("RMSNorm", candidate="bundled")
    expected = explorer_logits(explorer)

    module = explorer.export(tmp_path / "moe.py")
    text = module.read_text()
    assert 'EXPERTS = "batched_mm"' in text and "chosen in the explorer" in text
    got = run_exported(module, folder, tmp_path)
    assert torch.equal(got["logits"], expected)
    explorer.reset()
    plain = explorer.export(tmp_path / "plain.py").read_text()
    assert 'EXPERTS = "grouped_mm"' in plain and "(its own)" in plain
    no_experts = Explorer(tiny_llama(), include_transformers=False).export(tmp_path / "dense.py")
    assert "EXPERTS = None" in no_experts.read_text()


def test_a_repository_that_names_no_revision_or_folder_is_refused_not_written_as_null() -> None:
    from kernel_explorer.export.script import _loader
    from kernel_explorer.switching.exported import Repository

    assert _loader(Repository("RMSNorm", "user", hub_id="org/repo", revision="main")) == (
        'get_kernel("org/repo", revision="main")'
    )
    for nowhere in (Repository("RMSNorm", "user", hub_id="org/repo"), Repository("RMSNorm", "user")):
        with pytest.raises(ValueError, match=r"^RMSNorm \(user\) names neither a Hub version or revision"):
            _loader(nowhere)
