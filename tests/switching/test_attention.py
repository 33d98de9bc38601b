"""Attention as a row: Transformers' own door and wrapper run a real `kernels` repository, switching
is model-wide and exact, safe during a run, measured like any layer; bad input is one line."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from attention_repos import NO_CONTRACT, write_attention_repo

from kernel_explorer.errors import KernelExplorerError, KernelSwitchError
from kernel_explorer.explorer import Explorer
from kernel_explorer.inspect.layer_groups import ATTENTION
from kernel_explorer.loading import tiny_llama
from kernel_explorer.measure.log import Record

TOKENS = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79, 23, 84]])


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(TOKENS).logits


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("attention-repos")
    return {
        "good": write_attention_repo(root),
        "bad": write_attention_repo(root, "no-contract", source=NO_CONTRACT),
    }


@pytest.fixture
def explorer(hub: dict, repos: dict[str, Path]) -> Explorer:
    found = Explorer(tiny_llama(), include_transformers=False, attention=[repos["good"], repos["bad"]])
    yield found
    found.reset()


def _calls(repo: Path) -> dict[str, int]:
    from kernels import get_local_kernel

    return dict(get_local_kernel(repo).CALLS)  # the module Transformers' wrapper calls (kernels caches it)


def test_transformers_wrapper_runs_the_repository_and_off_restores_bitwise(
    explorer: Explorer, repos: dict[str, Path]
) -> None:
    model = explorer.model
    before = logits(model)
    assert model.config._attn_implementation == "sdpa"
    running = explorer.on(ATTENTION, candidate=repos["good"])  # one trial call on captured inputs
    calls = _calls(repos["good"])
    name = model.config._attn_implementation
    assert name.startswith("kernel-explorer-local/torch-flash-attn-")  # a Hub-shaped id kernels resolves
    from transformers.integrations.flash_attention import flash_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    # registered by Transformers itself, inside the explorer's fallback guard
    assert ALL_ATTENTION_FUNCTIONS[name].__wrapped__ is flash_attention_forward
    assert len(running) == 2 and all(now.is_kernel for now in running)  # model-wide: every module
    assert {now.repository for now in running} == {"user/torch-flash-attn"}
    on = logits(model)
    after = _calls(repos["good"])
    assert after["flash_attn_func"] == calls["flash_attn_func"] + 2  # once per layer: the repo ran
    torch.testing.assert_close(on, before)
    assert not torch.equal(on, before)  # another summation order: it really is not sdpa
    explorer.off(ATTENTION)
    assert model.config._attn_implementation == "sdpa"
    assert torch.equal(logits(model), before)


def test_snapshot_holding_and_using_carry_attention(explorer: Explorer, repos: dict[str, Path]) -> None:
    board = explorer._switchboard
    before = logits(explorer.model)
    explorer.on(ATTENTION, candidate=repos["good"])
    kernel = explorer.model.config._attn_implementation
    state = board.snapshot()
    assert (ATTENTION, "*") in state
    with board.holding(board.reset):  # what compare_model's all-PyTorch side does
        assert explorer.model.config._attn_implementation == "sdpa"
        assert torch.equal(logits(explorer.model), before)
    assert explorer.model.config._attn_implementation == kernel and board.snapshot() == state
    explorer.reset()
    with explorer.using(ATTENTION):  # the first usable kernel: the user's repository
        assert explorer.model.config._attn_implementation == kernel
    assert explorer.model.config._attn_implementation == "sdpa"
    explorer.on(ATTENTION, candidate="eager")  # PyTorch's other implementation is a switch too
    assert board.snapshot()[(ATTENTION, "*")][0].label == "eager"
    explorer.reset()
    assert torch.equal(logits(explorer.model), before)


def test_switching_takes_well_under_50_ms_once_loaded(explorer: Explorer, repos: dict[str, Path]) -> None:
    explorer.on(ATTENTION, candidate=repos["good"])  # the first switch loads the repository
    explorer.off(ATTENTION)
    start = time.perf_counter()
    for _ in range(10):
        explorer.on(ATTENTION, candidate=repos["good"])
        explorer.off(ATTENTION)
    per_switch = (time.perf_counter() - start) / 20
    print(f"attention switch: {per_switch * 1e3:.2f} ms")  # figures: bench/attention_switch.py
    assert explorer.model.config._attn_implementation == "sdpa"


def test_inventory_row(explorer: Explorer, repos: dict[str, Path]) -> None:
    row = explorer.inventory().row(ATTENTION)
    assert row.group.kind == "attention" and "model-wide" in row.group.original
    assert len(row.group) == 2 and row.running_summary == "sdpa x2"
    labels = {c.label: (c.source, found.state.value) for c, found in row.candidates}
    assert labels["eager"][1] == labels["sdpa"][1] == "ready"
    assert labels["user/torch-flash-attn"] == ("user", "ready")
    assert labels["bundled/flash_attn"][0] == "bundled"  # built or not, the row lists it
    assert row.best[0].label == "user/torch-flash-attn"  # a kernel, not PyTorch's own, is picked
    explorer.on(ATTENTION, candidate=repos["good"])
    assert explorer.inventory().row(ATTENTION).running_summary == "user/torch-flash-attn x2"
    text = str(explorer.inventory())
    assert "attention" in text and "model-wide" in explorer.inventory()._repr_html_()


def test_transformers_fallbacks_are_candidates_with_reasons(hub: dict) -> None:
    row = Explorer(tiny_llama()).inventory().row(ATTENTION)
    found = {c.label: found for c, found in row.candidates if c.source == "transformers"}
    assert "kernels-community/flash-attn2" in found
    # the Hub is not reachable here: each says why it cannot run (no CPU build, offline, not asked)
    assert all(f.reason for f in found.values())


def test_repository_without_the_contract_fails_to_load_and_the_model_keeps_its_attention(
    explorer: Explorer, repos: dict[str, Path]
) -> None:
    before = logits(explorer.model)
    running = explorer.on(ATTENTION, candidate=repos["bad"])
    assert explorer.model.config._attn_implementation == "sdpa"
    assert not any(now.is_kernel for now in running)
    assert "failed to load" in running[0].reason and "flash_attn_varlen_func" in running[0].reason
    states = {c.label: f for c, f in explorer.inventory().row(ATTENTION).candidates}
    assert states["user/no-contract"].state.value == "failed to load"
    assert torch.equal(logits(explorer.model), before)
    strict = Explorer(tiny_llama(), include_transformers=False, strict=True)
    with pytest.raises(KernelSwitchError, match="failed to load"):
        strict.on(ATTENTION, candidate=repos["bad"])
    assert strict.model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("bad", ["not an implementation", "org/repo/extra", "flash"])
def test_a_string_of_no_accepted_form_is_one_line_and_switches_nothing(explorer: Explorer, bad: str) -> None:
    with pytest.raises(KernelExplorerError, match="org/repo\\[@revision\\]\\[:function\\]") as caught:
        explorer.on(ATTENTION, candidate=bad)
    assert "\n" not in str(caught.value)
    assert explorer.model.config._attn_implementation == "sdpa"
    with pytest.raises(KernelExplorerError, match="is not an attention repository"):
        explorer.attention_candidates("nope")


def test_a_model_without_an_attention_interface_has_no_row_and_still_breaks_down(hub: dict) -> None:
    class Attention(torch.nn.Module):  # named like one, but not Transformers' interface
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.proj(x) @ x.transpose(-1, -2), -1) @ x

    class Plain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = type("Config", (), {"vocab_size": 16})()
            self.embed = torch.nn.Embedding(16, 8)
            self.attn = Attention()

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.attn(self.embed(input_ids))

    explorer = Explorer(Plain())
    assert ATTENTION not in explorer.layers and explorer._switchboard.attention is None
    assert all(row.group.name != ATTENTION for row in explorer.inventory().rows)
    with pytest.raises(KernelExplorerError, match="no attention interface"):
        explorer.attention_candidates("org/repo")
    explorer.breakdown(tokens=8, repeats=1)
    shares = explorer.results.latest_shares()
    assert ATTENTION in shares and abs(sum(shares.values()) - 1.0) < 0.02


def test_compare_measures_captured_qkv_against_float64(explorer: Explorer, repos: dict[str, Path]) -> None:
    captured = explorer.capture(TOKENS)
    calls = captured.for_layer(ATTENTION)
    assert set(calls) == {"model.layers.0.self_attn", "model.layers.1.self_attn"}
    (args, _), *_ = calls["model.layers.0.self_attn"]
    query, key, value = args[:3]
    assert query.shape == (1, 4, 10, 16) and key.shape == value.shape == (1, 2, 10, 16)  # real GQA q/k/v
    assert explorer.model.config._attn_implementation == "sdpa"  # the capture's own switch is undone
    explorer.compare(ATTENTION, pairs=3, calibration_pairs=2)
    divergences = explorer.results.records("layer_divergence")
    assert len(divergences) == 2 and all(r.values.kernel_on for r in divergences)
    # kernel and PyTorch each against the float64 reference (sdpa computed in float64)
    assert all(r.values.kernel_err64 is not None and r.values.pytorch_err64 is not None for r in divergences)
    assert all(r.values.kernel_err64 < 1e-5 and r.values.pytorch_err64 < 1e-5 for r in divergences)
    (verdict,) = explorer.results.records("layer_verdict")
    assert verdict.layer == ATTENTION and verdict.values.kernel_on and verdict.values.pairs == 6
    assert explorer.model.config._attn_implementation == "sdpa"  # compare switched it on, then back
    assert explorer.inventory().row(ATTENTION).measured == verdict.values


def test_compare_model_with_attention_on(explorer: Explorer, repos: dict[str, Path]) -> None:
    explorer.on(ATTENTION, candidate=repos["good"])
    kernel = explorer.model.config._attn_implementation
    calls = _calls(repos["good"])["flash_attn_func"]
    explorer.compare_model(lengths=(8,), decode_tokens=2, pairs=1, decode_pairs=1)
    assert _calls(repos["good"])["flash_attn_func"] > calls  # the kernel side ran the repository
    assert explorer.results.records("model_verdict")
    (agreement, *_) = explorer.results.records("model_agreement")
    assert agreement.values.top1_agreement == 1.0  # same next tokens with the repository's attention
    assert explorer.model.config._attn_implementation == kernel  # its PyTorch side was put back


def test_a_switch_mid_run_lands_at_the_next_sample(explorer: Explorer, repos: dict[str, Path]) -> None:
    explorer.on(ATTENTION, candidate=repos["good"])
    switched = threading.Event()

    def switch_off_after_some(record: Record) -> None:
        if (
            record.kind == "layer_latency"
            and not switched.is_set()
            and len(explorer.results.records("layer_latency")) == 4
        ):
            threading.Thread(target=lambda: (explorer.off(ATTENTION), switched.set())).start()

    explorer.results.subscribe(switch_off_after_some)
    handle = explorer.compare(ATTENTION, pairs=400, background=True)
    assert switched.wait(30)
    time.sleep(0.05)
    handle.cancel()
    assert handle.wait(10)
    states = [r.values.kernel_on for r in explorer.results.records("layer_latency")]
    assert states[:4] == [True] * 4 and states[-1] is False
    assert explorer.model.config._attn_implementation == "sdpa"  # the user's off is kept


def test_the_breakdown_attributes_attention_to_the_row(explorer: Explorer) -> None:
    explorer.breakdown(tokens=16, repeats=1)
    shares = explorer.results.latest_shares()
    assert shares.get(ATTENTION, 0) > 0
    row = explorer.inventory().row(ATTENTION)
    assert row.share == shares[ATTENTION]
    assert all(name != ATTENTION for name, _ in explorer.inventory().uncovered)


# -- the Hub path, against the Hub stand-in (tests/hub_standin.py), in fresh processes -------------


@pytest.fixture(scope="module")
def standin(hub: dict, repos: dict[str, Path]):  # type: ignore[no-untyped-def]
    from hub_standin import HubStandIn

    server = HubStandIn().start()
    server.trusted_orgs.add("kx-trusted")
    server.publish("kx-trusted/torch-flash-attn", repos["good"])
    server.publish("kx-untrusted/torch-flash-attn", repos["good"])
    yield server
    server.stop()


HUB_CHILD = """
from kernel_explorer.inspect.layer_groups import ATTENTION
from kernel_explorer._backend.modes import parse_mode
repo = "{repo}"
e = Explorer(tiny_llama(), include_transformers=False, attention=[repo])
door = e._switchboard.attention
(candidate,) = [c for c in door.candidates() if c.label == repo]
result["state"] = door.availability(candidate, mode=parse_mode("inference"), query_hub=True).state.value
now = e.on(ATTENTION, candidate=repo)[0]
result["running"] = [now.is_kernel, now.repository, now.reason]
result["implementation"] = e.model.config._attn_implementation
import sys
found = [m for n, m in list(sys.modules.items()) if n.startswith("_torch_flash_attn")]
result["calls"] = 0
if found:
    before = found[0].CALLS["flash_attn_func"]
    import torch
    with torch.no_grad():
        e.model(torch.tensor([[1, 2, 3, 4]]))
    result["calls"] = found[0].CALLS["flash_attn_func"] - before
"""


def test_a_hub_repository_loads_through_transformers_and_kernels(standin, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from test_hub_access import run_child

    home = tmp_path / "hf"
    online, _ = run_child(
        HUB_CHILD.format(repo="kx-trusted/torch-flash-attn"), hf_home=home, endpoint=standin.url
    )
    assert online["state"] == "downloadable"
    assert online["running"][:2] == [True, "kx-trusted/torch-flash-attn"]
    assert online["implementation"] == "kx-trusted/torch-flash-attn"  # Transformers' own string
    assert online["calls"] == 2  # Transformers' flash wrapper called the downloaded repository
    offline, _ = run_child(
        HUB_CHILD.format(repo="kx-trusted/torch-flash-attn"), hf_home=home, HF_HUB_OFFLINE="1"
    )
    assert offline["state"] == "ready" and offline["running"][0] and offline["calls"] == 2
    untrusted, _ = run_child(
        HUB_CHILD.format(repo="kx-untrusted/torch-flash-attn"), hf_home=home, endpoint=standin.url
    )
    assert untrusted["state"] == "publisher not trusted"
    assert untrusted["running"][0] is False and "trust_remote_code" in untrusted["running"][2]
    assert untrusted["implementation"] == "sdpa"


def test_a_model_on_eager_comes_back_to_eager_bitwise(hub: dict, repos: dict[str, Path]) -> None:
    model = tiny_llama()
    model.set_attn_implementation("eager")
    before = logits(model)
    explorer = Explorer(model, include_transformers=False, attention=[repos["good"]])
    assert explorer.inventory().row(ATTENTION).running_summary == "eager x2"
    explorer.on(ATTENTION, candidate=repos["good"])
    _, pytorch, on = explorer._switchboard.forwards(ATTENTION, "model.layers.0.self_attn")
    assert on and pytorch.__self__.function.__name__ == "eager_attention_forward"  # PyTorch is eager here
    torch.testing.assert_close(logits(model), before)
    explorer.reset()
    assert model.config._attn_implementation == "eager" and torch.equal(logits(model), before)


def test_the_bundled_cpu_attention_runs_through_the_row_and_comes_back_bitwise(hub: dict) -> None:
    """The bundled hub/flash_attn is the row's best candidate here; switched on, Transformers' own
    flash wrapper runs its op (seen in the profile), logits stay close to sdpa's, and off is exact."""
    explorer = Explorer(tiny_llama(), include_transformers=False)
    model = explorer.model
    row = next(r for r in explorer.inventory().rows if r.group.name == ATTENTION)
    best, found = row.best
    assert best.label == "bundled/flash_attn" and found.state.usable, found
    before = logits(model)
    running = explorer.on(ATTENTION)
    assert {now.repository for now in running} == {"bundled/flash_attn"} and len(running) == 2
    with torch.profiler.profile() as profile:
        on = logits(model)
    assert any(e.name.startswith("_flash_attn_cpu_") for e in profile.events()), "the bundled op ran"
    torch.testing.assert_close(on, before, rtol=1e-4, atol=1e-5)
    explorer.off(ATTENTION)
    assert torch.equal(logits(model), before)
