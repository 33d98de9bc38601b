"""Layers the model does not mark: extend, switch, restore exactly, release, refuse bad input.

The kernels are tiny pure-Python repositories written here (noarch `torch-cpu` builds) and loaded
through `kernels`' own loader and `kernelize`'s per-layer step, like any other.
"""

from __future__ import annotations

import gc
import pickle
import weakref
from pathlib import Path

import pytest
import torch
from kernel_repos import write_repo
from kernels import LocalLayerRepository
from torch import nn

from kernel_explorer.build import bundled
from kernel_explorer.errors import KernelExplorerError, KernelSwitchError
from kernel_explorer.explorer import Explorer
from kernel_explorer.inspect.layer_groups import find_kernel_layers
from kernel_explorer.loading import tiny_llama

TOKENS = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79]])

LINEAR_LAYERS = """
import torch
import torch.nn.functional as F
from torch import nn


class Linear64(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.to(torch.float64)
        return F.linear(input.to(torch.float64), self.weight.to(torch.float64), bias).to(input.dtype)


class PackingLinear(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        packed = self.__dict__.get("_kernel_packed")
        if packed is None:
            if self.in_features % 2:
                raise ValueError(f"in_features={self.in_features} is not a multiple of 2")
            packed = self.weight.detach().to(torch.float64).t().contiguous()
            self._kernel_packed = packed  # a plain attribute: what the explorer must release
        out = input.to(torch.float64) @ packed
        if self.bias is not None:
            out = out + self.bias.to(torch.float64)
        return out.to(input.dtype)


class WrongLinear(nn.Module):
    def forward(self, input: torch.Tensor, scale: float) -> torch.Tensor:
        return input * scale
"""

MLP_LAYERS = """
import torch
from torch import nn


class MLP64(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def lin(layer, v):
            return v @ layer.weight.to(torch.float64).t()

        v = x.to(torch.float64)
        gate = lin(self.gate_proj, v)
        return lin(self.down_proj, gate * torch.sigmoid(gate) * lin(self.up_proj, v)).to(x.dtype)
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repo(tmp_path_factory.mktemp("repos"), "tiny-linear", layers=LINEAR_LAYERS)


def layer(repo: Path, name: str) -> LocalLayerRepository:
    return LocalLayerRepository(repo_path=repo, layer_name=name)


def state_of(model: nn.Module) -> dict[str, tuple[type, tuple[str, ...]]]:
    """Every module's class and instance attribute names: what an exact restore must give back."""
    return {path: (type(m), tuple(m.__dict__)) for path, m in model.named_modules()}


def logits(model: nn.Module) -> torch.Tensor:
    with torch.inference_mode():
        return model(TOKENS).logits


@pytest.fixture
def explorer(hub: dict) -> Explorer:
    found = Explorer(tiny_llama(), include_transformers=False)
    yield found
    found.reset()


def test_only_the_chosen_instances_become_a_row(explorer: Explorer, repo: Path) -> None:
    model = explorer.model
    eager = logits(model)
    group = explorer.extend(
        "Linear", nn.Linear, instances="model.layers.*.mlp.*", candidates={"cpu": layer(repo, "Linear64")}
    )
    assert group.added and group.original == "torch.nn.modules.linear.Linear"
    assert group.instances == tuple(
        f"model.layers.{i}.mlp.{p}" for i in (0, 1) for p in ("gate_proj", "up_proj", "down_proj")
    )
    assert "Linear" in explorer.layers
    # the class, the other instances and other models stay as they were
    assert not hasattr(nn.Linear, "kernel_layer_name")
    assert type(model.model.layers[0].self_attn.q_proj) is nn.Linear and type(model.lm_head) is nn.Linear
    assert all(g.name != "Linear" for g in find_kernel_layers(tiny_llama()))
    assert isinstance(model.model.layers[0].mlp.up_proj, nn.Linear)
    running = explorer.on("Linear")
    assert [now.is_kernel for now in running] == [True] * 6, running
    assert "tiny-linear" in str(running[0].repository)
    assert "forward" not in model.model.layers[0].self_attn.q_proj.__dict__
    torch.testing.assert_close(logits(model), eager, rtol=1e-5, atol=1e-5)
    assert not torch.equal(logits(model), eager)  # float64 sums: the kernel really runs


def test_exact_restore_after_extend_on_off_sequences(explorer: Explorer, repo: Path) -> None:
    model = explorer.model
    before, eager = state_of(model), logits(model)
    explorer.on("RMSNorm")
    explorer.on("SiLU")
    with_others = logits(model)
    others_state = state_of(model)
    explorer.extend("Linear", nn.Linear, "model.layers.*", candidates={"cpu": layer(repo, "PackingLinear")})
    explorer.on("Linear")
    logits(model)
    explorer.off("Linear", "model.layers.0.*")
    explorer.on("Linear", "model.layers.0.mlp.*")
    explorer.on("rotary_pos_emb")
    logits(model)
    explorer.off("rotary_pos_emb")
    explorer.off("Linear")
    assert torch.equal(logits(model), with_others)  # the other layers still switched: bitwise
    explorer.on("Linear")
    logits(model)
    explorer.retract("Linear")
    assert state_of(model) == others_state
    assert torch.equal(logits(model), with_others)
    explorer.reset()
    assert state_of(model) == before
    assert torch.equal(logits(model), eager)
    assert "Linear" not in explorer.layers


def test_off_releases_what_the_kernel_cached(explorer: Explorer, repo: Path) -> None:
    module = explorer.model.model.layers[1].mlp.down_proj
    keys = tuple(module.__dict__)
    explorer.extend(
        "Linear", "Linear", "model.layers.1.mlp.down_proj", candidates={"cpu": layer(repo, "PackingLinear")}
    )
    explorer.on("Linear")
    packed = module.__dict__["_kernel_packed"]  # packed when switched on (the trial call), not later
    assert packed.dtype == torch.float64
    gone = weakref.ref(packed)
    del packed
    explorer.off("Linear")
    gc.collect()
    assert tuple(module.__dict__) == keys and gone() is None
    explorer.on("Linear")
    assert "_kernel_packed" in module.__dict__
    explorer.reset()  # every way back to PyTorch releases it
    assert tuple(module.__dict__) == keys


def test_an_instance_the_kernel_declines_stays_on_pytorch_with_the_reason(hub: dict, repo: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 4))
    x = torch.randn(3, 8)
    eager = model(x)
    explorer = Explorer(model, include_transformers=False)
    explorer.extend("Linear", nn.Linear, candidates={"cpu": layer(repo, "PackingLinear")})
    running = {now.instance: now for now in explorer.on("Linear")}
    assert running["0"].is_kernel and running["2"].is_kernel
    assert not running["4"].is_kernel
    assert "declined this instance: in_features=5 is not a multiple of 2" in running["4"].reason
    assert "_kernel_packed" not in model[4].__dict__ and "forward" not in model[4].__dict__
    assert "declined" in explorer.inventory().row("Linear").running_summary
    chosen = explorer._catalog.candidates("Linear")[0]
    assert explorer._catalog.availability(chosen, device="cpu", mode=explorer.mode).state.usable
    torch.testing.assert_close(model(x), eager)
    explorer.reset()
    assert torch.equal(model(x), eager)


def test_strict_mode_raises_for_a_declined_instance(hub: dict, repo: Path) -> None:
    model = nn.Sequential(nn.Linear(4, 5), nn.Linear(5, 3))
    explorer = Explorer(model, include_transformers=False, strict=True)
    explorer.extend("Linear", nn.Linear, candidates={"cpu": layer(repo, "PackingLinear")})
    with pytest.raises(KernelSwitchError, match="declined this instance: in_features=5"):
        explorer.on("Linear")
    assert [now.is_kernel for now in explorer.running("Linear")] == [True, False]
    explorer.reset()


def test_bad_input_is_one_line_and_changes_nothing(explorer: Explorer, repo: Path) -> None:
    model = explorer.model
    before, layers = state_of(model), explorer.layers
    count = len(explorer._catalog.candidates())
    cases = [
        (("Linear", int), "<class 'int'> is not an nn.Module subclass"),
        (("Linear", nn.Linear, "model.layer.*.mlp.*"), "matches no Linear instance. Nearest: model.layers."),
        (("Linear", nn.Linear, "model.layers.*.mlp"), "(it matches LlamaMLP x2)"),
        (("Linear", "Linearr"), "no module class 'Linearr'. Nearest: Linear"),
        (("RMSNorm", nn.Linear), "The model marks 'RMSNorm' itself"),
        (("Norm", "LlamaRMSNorm"), "the model marks it as 'RMSNorm'"),
    ]
    for args, message in cases:
        with pytest.raises(KernelExplorerError) as raised:
            explorer.extend(*args)
        assert message in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(KernelExplorerError) as raised:
        explorer.extend("Linear", nn.Linear, candidates={"cpu": layer(repo, "WrongLinear")})
    text = str(raised.value)
    assert text.startswith("tiny-linear:WrongLinear does not fit Linear.forward: Forward signature")
    assert "\n" not in text
    with pytest.raises(KernelExplorerError, match=r"candidates\['cpu'\] is str, not a kernel repository"):
        explorer.extend("Linear", nn.Linear, candidates={"cpu": "tiny-linear"})
    with pytest.raises(KernelExplorerError, match="candidates must be a dict"):
        explorer.extend("Linear", nn.Linear, candidates=[layer(repo, "Linear64")])
    assert state_of(model) == before and explorer.layers == layers
    assert len(explorer._catalog.candidates()) == count
    explorer.extend("Linear", nn.Linear, "model.layers.0.mlp.*", candidates={"cpu": layer(repo, "Linear64")})
    with pytest.raises(KernelExplorerError, match="you named it 'Linear'"):
        explorer.extend("Dense", nn.Linear, "model.layers.0.mlp.up_proj")
    with pytest.raises(KernelExplorerError, match="only layers added with extend"):
        explorer.retract("RMSNorm")


@pytest.mark.filterwarnings("ignore::kernel_explorer.measure.stats.NoisyMachineWarning")
def test_compare_measures_an_extended_layer_on_real_activations(explorer: Explorer, repo: Path) -> None:
    explorer.capture(TOKENS)  # before extend: the new row is captured again from the same inputs
    explorer.extend(
        "Linear", nn.Linear, "model.layers.*.mlp.down_proj", candidates={"cpu": layer(repo, "Linear64")}
    )
    handle = explorer.compare("Linear", pairs=1, calibration_pairs=1)
    assert handle.outcome == "finished"
    divergence = [r for r in explorer.results.records("layer_divergence") if r.layer == "Linear"]
    assert sorted(r.instance for r in divergence) == [
        "model.layers.0.mlp.down_proj",
        "model.layers.1.mlp.down_proj",
    ]
    assert all(r.values.kernel_on and r.values.allclose for r in divergence)
    captured = explorer.captured_inputs().calls[("Linear", "model.layers.0.mlp.down_proj")]
    assert captured[0][0][0].shape == (1, TOKENS.shape[1], 128)  # the MLP's real hidden activations
    assert not any(now.is_kernel for now in explorer.running("Linear"))


def test_the_inventory_lists_the_row_as_added_by_you(explorer: Explorer, repo: Path) -> None:
    before = str(explorer.inventory())
    assert "Linear x15" in before
    explorer.extend("Linear", nn.Linear, "model.layers.*.mlp.*", candidates={"cpu": layer(repo, "Linear64")})
    explorer.on("Linear", "model.layers.0.mlp.*")
    inventory = explorer.inventory()
    row = inventory.row("Linear")
    assert row.kind == "module, added by you" and len(row.group) == 6
    assert row.best is not None and row.best[0].source == "user" and row.best[1].state.usable
    assert "PyTorch x3" in row.running_summary and "user/tiny-linear Linear64 x3" in row.running_summary
    text = str(inventory)
    assert "module, added by you" in text and "Linear x9" in text  # 6 of 15 are a row now
    assert "added by you" in inventory._repr_html_()
    frame = inventory.to_pandas()
    assert (
        set(frame[frame.layer == "Linear"].added) == {True}
        and not frame[frame.layer == "RMSNorm"].added.any()
    )


def test_bundled_candidates_join_under_the_users_name(
    explorer: Explorer, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        bundled.BUNDLED_EXTENSIONS, "torch.nn.modules.linear.Linear", (("tiny-linear", "Linear64"),)
    )
    monkeypatch.setattr(bundled, "BUNDLED_REPOS", (*bundled.BUNDLED_REPOS, "tiny-linear"))
    monkeypatch.setattr(bundled, "bundled_repo_path", lambda name: repo.parent / name)
    explorer.extend("Dense", nn.Linear, "model.layers.0.mlp.*")
    [candidate] = explorer._catalog.candidates("Dense")
    assert candidate.source == "bundled" and candidate.repository.layer_name == "Linear64"
    assert all(now.is_kernel for now in explorer.on("Dense"))


def test_any_undecorated_class_given_a_repository(explorer: Explorer, tmp_path: Path) -> None:
    mlp_repo = write_repo(tmp_path, "tiny-mlp", layers=MLP_LAYERS)
    model = explorer.model
    eager, before = logits(model), state_of(model)
    explorer.extend("MLP", "LlamaMLP", candidates={"MLP": {"cpu": layer(mlp_repo, "MLP64")}})
    assert explorer._switchboard.group("MLP").original.endswith("modeling_llama.LlamaMLP")
    assert all(now.is_kernel for now in explorer.on("MLP"))
    torch.testing.assert_close(logits(model), eager, rtol=1e-5, atol=1e-5)
    explorer.retract("MLP")
    assert state_of(model) == before and torch.equal(logits(model), eager)


def test_an_extended_instance_still_pickles_and_reads_the_same(explorer: Explorer, repo: Path) -> None:
    module = explorer.model.model.layers[0].mlp.up_proj
    text = repr(explorer.model)
    explorer.extend("Linear", nn.Linear, "model.layers.0.mlp.up_proj")
    copy = pickle.loads(pickle.dumps(module))
    assert type(copy) is type(module) and torch.equal(copy.weight, module.weight)
    assert repr(explorer.model) == text
    assert list(explorer.model.state_dict()) == list(tiny_llama().state_dict())


def test_a_second_explorer_of_the_model_offers_the_row_and_its_candidates(
    explorer: Explorer, repo: Path
) -> None:
    explorer.extend("Linear", nn.Linear, "model.layers.0.mlp.*", candidates={"cpu": layer(repo, "Linear64")})
    second = Explorer(explorer.model, include_transformers=False)
    assert second._switchboard.group("Linear").added
    names = [c.repository.layer_name for c in second._catalog.candidates("Linear")]
    assert names == ["Linear64", "Q8_0Linear", "Q4_1Linear"]  # the user's first, then the bundled
    assert all(now.is_kernel for now in second.on("Linear"))
    second.reset()


def test_a_retract_inside_a_held_state_does_not_break_the_restore(explorer: Explorer, repo: Path) -> None:
    explorer.extend("Linear", nn.Linear, "model.layers.0.mlp.*", candidates={"cpu": layer(repo, "Linear64")})
    with explorer.using("Linear", "RMSNorm"):
        explorer.retract("Linear")
    assert "Linear" not in explorer.layers and not any(now.is_kernel for now in explorer.running())


def test_a_mapping_given_to_the_explorer_serves_the_row(hub: dict, repo: Path) -> None:
    wrong = Explorer(
        tiny_llama(), {"Linear": {"cpu": layer(repo, "WrongLinear")}}, include_transformers=False
    )
    with pytest.raises(KernelExplorerError, match=r"WrongLinear does not fit Linear\.forward"):
        wrong.extend("Linear")
    assert "Linear" not in wrong.layers
    right = Explorer(tiny_llama(), {"Linear": {"cpu": layer(repo, "Linear64")}}, include_transformers=False)
    assert len(right.extend("Linear")) == 15  # every Linear, the class found by the layer's name
    assert all(now.is_kernel for now in right.on("Linear"))
    right.reset()
