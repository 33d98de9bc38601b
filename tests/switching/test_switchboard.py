"""Switchboard: switching through kernelize, exact restore, per-instance functions, faults, threads.

What runs is checked by counting the kernel ops that actually execute inside each instance's
forward (a TorchDispatchMode sees every dispatcher call), never by reading the switchboard's own
records.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_repos import NO_BACKWARD_RMSNORM, RAISING_ON_BATCH_RMSNORM, RAISING_RMSNORM, write_repo
from torch.utils._python_dispatch import TorchDispatchMode

from kernel_explorer._backend.function_layers import owns_function
from kernel_explorer.errors import KernelExplorerError, KernelSwitchError
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama

TOKENS = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79]])


class KernelOpCounter(TorchDispatchMode):
    """Counts dispatcher calls per op namespace (a kernel's ops live under its metadata id)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.calls[func.namespace] += 1
        return func(*args, **(kwargs or {}))


def kernels_run_per_instance(explorer: Explorer) -> dict[tuple[str, str], set[str]]:
    """Run the model once; for each (layer, instance), the kernel namespaces its forward called."""
    counter = KernelOpCounter()
    seen: dict[tuple[str, str], set[str]] = {}
    handles = []
    modules = dict(explorer.model.named_modules())
    for name, group in explorer._switchboard.groups.items():
        for path in group.instances if group.kind != "attention" else ():  # tests/switching/test_attention.py
            start: dict[str, Counter[str]] = {}

            def pre(module, args, key=(name, path), start=start):  # type: ignore[no-untyped-def]
                start[key] = counter.calls.copy()

            def post(module, args, output, key=(name, path), start=start):  # type: ignore[no-untyped-def]
                diff = counter.calls - start.pop(key)
                seen[key] = {ns for ns in diff if ns.startswith("_")}  # kernel ids start with "_"

            handles += [
                modules[path].register_forward_pre_hook(pre),
                modules[path].register_forward_hook(post),
            ]
    try:
        with torch.no_grad(), counter:
            explorer.model(TOKENS)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def assert_reports_match_counts(explorer: Explorer) -> None:
    ran = kernels_run_per_instance(explorer)
    # attention is model-wide (its own checks in tests/switching/test_attention.py); its kernel runs
    # inside the same attention modules that hold the rotary function, so it is left out of their counts
    attention = {now.kernel_id for now in explorer.running() if now.layer_name == "attention"}
    for now in explorer.running():
        if now.layer_name == "attention":
            continue
        used = ran[(now.layer_name, now.instance)] - attention
        if now.is_kernel:
            assert used == {now.kernel_id}, f"{now.instance} reported {now.kernel_id}, ran {used}"
        else:
            assert used == set(), f"{now.instance} reported PyTorch, ran kernels {used}"


def assert_untouched(model: torch.nn.Module) -> None:
    """No trace of switching: no instance forward, shared functions and hooks as built."""
    import transformers.models.llama.modeling_llama as llama

    assert "forward" not in llama.apply_rotary_pos_emb.__dict__
    for path, module in model.named_modules():
        assert "forward" not in module.__dict__, path
        assert not module._forward_hooks and not module._forward_pre_hooks, path
        for key, func in getattr(module, "_kernel_funcs", {}).items():
            if owns_function(module, key):  # kernels 0.18+: the holder's own instance, as built
                assert type(func) is type(llama.apply_rotary_pos_emb), path
                assert not {"forward", "_kernel_repo"} & vars(func).keys(), path
            else:
                assert func is llama.apply_rotary_pos_emb, path


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(TOKENS).logits


@pytest.fixture
def explorer(hub: dict) -> Explorer:
    found = Explorer(tiny_llama(), include_transformers=False)
    yield found
    found.reset()


def test_switching_on_runs_kernels_and_off_restores_exactly(explorer: Explorer) -> None:
    before = logits(explorer.model)
    for name in explorer.layers:  # attention too: the bundled flash_attn, model-wide
        explorer.on(name)
    assert all(now.is_kernel for now in explorer.running())
    assert_reports_match_counts(explorer)
    on = logits(explorer.model)
    torch.testing.assert_close(on, before)
    assert not torch.equal(on, before)  # the kernels really ran (RMSNorm sums in another order)
    explorer.reset()
    assert_untouched(explorer.model)
    assert torch.equal(logits(explorer.model), before)


def test_one_attention_module_switches_rotary_alone(explorer: Explorer) -> None:
    other = tiny_llama(seed=1)  # a second model in the same process shares the rotary function
    explorer.on("rotary_pos_emb", ["model.layers.1.self_attn"])
    states = {now.instance: now.is_kernel for now in explorer.running("rotary_pos_emb")}
    assert states == {"model.layers.0.self_attn": False, "model.layers.1.self_attn": True}
    assert_reports_match_counts(explorer)
    counter = KernelOpCounter()
    with torch.no_grad(), counter:
        other(TOKENS)
    assert not [ns for ns in counter.calls if ns.startswith("_")], "the other model must stay on PyTorch"
    explorer.off("rotary_pos_emb")
    assert_untouched(explorer.model)


def test_a_model_dropped_with_its_function_switched_leaves_the_shared_function_as_built(hub: dict) -> None:
    """A notebook cell run again drops its model with rotary still on: nothing of it stays on the
    process's function (the router goes at its next call), and other models run PyTorch's."""
    import gc

    import transformers.models.llama.modeling_llama as llama

    dropped = Explorer(tiny_llama(), include_transformers=False)
    routed = not owns_function(dropped.model.model.layers[1].self_attn, "rotary_pos_emb")  # as built
    dropped.on("rotary_pos_emb", ["model.layers.1.self_attn"])
    # the router while a copy is on (kernels 0.17); 0.18+ switches the holder's own instance only
    assert ("forward" in vars(llama.apply_rotary_pos_emb)) is routed
    del dropped
    gc.collect()
    other = tiny_llama(seed=1)
    counter = KernelOpCounter()
    with torch.no_grad(), counter:
        other(TOKENS)
    assert not [ns for ns in counter.calls if ns.startswith("_")]
    assert_untouched(other)


def test_glob_patterns_choose_instances(explorer: Explorer) -> None:
    running = explorer.on("RMSNorm", "model.layers.0.*")
    assert [now.instance for now in running] == [
        "model.layers.0.input_layernorm",
        "model.layers.0.post_attention_layernorm",
    ]
    assert sum(now.is_kernel for now in explorer.running("RMSNorm")) == 2


def test_training_mode_switches_the_bundled_kernels(explorer: Explorer) -> None:
    """The bundled layers declare has_backward, so training mode runs them."""
    running = explorer.on("SiLU", mode="training")
    assert running and all(now.is_kernel for now in running)
    assert_reports_match_counts(explorer)


def test_training_mode_keeps_pytorch_for_a_kernel_without_backward_and_says_why(tmp_path: Path) -> None:
    explorer = _with_fault(tmp_path, layers=NO_BACKWARD_RMSNORM)
    running = explorer.on("RMSNorm", mode="training")
    assert running and not any(now.is_kernel for now in running)
    assert all("does not support training" in now.reason for now in running)
    assert_reports_match_counts(explorer)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda e: e.on("LayerNorm"), "has no kernel layer 'LayerNorm'"),
        (lambda e: e.on("RMSNorm", ["model.layers.9.input_layernorm"]), "matches no instance"),
        (lambda e: e.on("RMSNorm", mode="fast"), "Unknown mode 'fast'"),
        (lambda e: e.on("RMSNorm", candidate="someone/else@v1"), "No candidate 'someone/else@v1'"),
        (lambda e: e.off("Nope"), r"'Nope'\. Its kernel layers: rotary_pos_emb, SiLU, RMSNorm"),
        (
            lambda e: e.on("rmsnorm"),
            r"no kernel layer 'rmsnorm'\. Did you mean 'RMSNorm'\? Its kernel layers",
        ),
        (lambda e: e.off("silu_"), "Did you mean 'SiLU'"),
        (lambda e: e.on("rotary"), "Did you mean 'rotary_pos_emb'"),
    ],
)
def test_bad_input_gets_a_clear_error_and_changes_nothing(explorer: Explorer, call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KernelExplorerError, match=message):
        call(explorer)
    assert not any(now.is_kernel for now in explorer.running())


def test_agrees_with_transformers_set_use_kernels(explorer: Explorer) -> None:
    """The production path (mapping registered, `set_use_kernels(True)`) runs the same forwards."""
    import transformers.models.llama.modeling_llama as llama
    from kernels import register_kernel_mapping, use_kernel_mapping

    from kernel_explorer.build.bundled import bundled_mapping

    production = tiny_llama()
    with use_kernel_mapping({}):  # restores kernels' global mapping after the block
        register_kernel_mapping(bundled_mapping())
        production.set_use_kernels(True)
    try:
        explorer.on("RMSNorm")
        explorer.on("SiLU")
        modules = dict(production.named_modules())
        for now in explorer.running():
            if now.layer_name in ("rotary_pos_emb", "attention"):
                continue
            produced = modules[now.instance].forward
            assert now.is_kernel and produced.__func__.__module__.startswith(now.kernel_id)
        explorer.on("rotary_pos_emb", "model.layers.0.self_attn")
        rotary_id = explorer.running("rotary_pos_emb")[0].kernel_id
        # production switched the process-wide rotary function; our per-instance routing keeps it
        counter = KernelOpCounter()
        with torch.no_grad(), counter:
            production(TOKENS)
        assert counter.calls[rotary_id] == 2
        explorer.on("rotary_pos_emb")
        assert torch.equal(logits(explorer.model), logits(production))
    finally:
        explorer.reset()
        llama.apply_rotary_pos_emb.__dict__.pop("forward", None)


def test_switching_while_another_thread_runs_forward(explorer: Explorer) -> None:
    before = logits(explorer.model)
    errors: list[BaseException] = []
    stop = threading.Event()

    def measure() -> None:
        try:
            while not stop.is_set():
                with explorer._switchboard.lock:
                    out = logits(explorer.model)
                torch.testing.assert_close(out, before)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    worker = threading.Thread(target=measure)
    worker.start()
    try:
        for i in range(40):
            name = explorer.layers[i % 3]
            explorer.on(name) if i % 2 == 0 else explorer.off(name)
    finally:
        stop.set()
        worker.join()
    assert not errors, errors
    explorer.reset()
    assert torch.equal(logits(explorer.model), before)


# -- faults, one at a time: that layer stays on PyTorch with the reason, the others are unaffected --


def _with_fault(tmp_path: Path, **repo: str) -> Explorer:
    from kernels import LocalLayerRepository

    path = write_repo(tmp_path, "kx-fault", **repo)
    mapping = {"RMSNorm": {"cpu": LocalLayerRepository(repo_path=path, layer_name="RMSNorm")}}
    return Explorer(tiny_llama(), mapping, include_transformers=False)


@pytest.mark.parametrize(
    ("repo", "reason"),
    [
        ({"init": "raise ImportError('injected fault: missing dependency')\n"}, "missing dependency"),
        ({"variant": "torch213-cxx11-cu126-x86_64-linux"}, "no build"),
    ],
    ids=["import-error", "missing-variant"],
)
def test_a_kernel_that_cannot_load_leaves_pytorch_with_the_reason(
    tmp_path: Path, hub: dict, repo: dict, reason: str
) -> None:
    explorer = _with_fault(tmp_path, **repo)
    try:
        explorer.on("SiLU")
        running = explorer.on("RMSNorm", candidate="user/kx-fault:RMSNorm (cpu, any mode)")
        assert not any(now.is_kernel for now in running)
        assert all(reason in now.reason for now in running), running[0].reason
        assert all(now.is_kernel for now in explorer.running("SiLU"))
        assert_reports_match_counts(explorer)
        row = explorer.inventory().row("RMSNorm")
        assert reason in str(row.candidates[0][1])
    finally:
        explorer.reset()


def test_default_choice_skips_a_broken_candidate(tmp_path: Path, hub: dict) -> None:
    explorer = _with_fault(tmp_path, variant="torch213-cxx11-cu126-x86_64-linux")
    try:
        running = explorer.on("RMSNorm")  # the user's repository has no build here: bundled is next
        assert all(now.is_kernel and "rmsnorm" in now.repository for now in running)
    finally:
        explorer.reset()


def test_a_kernel_that_raises_on_its_trial_is_passed_over_with_the_reason(tmp_path: Path, hub: dict) -> None:
    explorer = _with_fault(tmp_path, layers=RAISING_RMSNORM)
    try:
        running = explorer.on("RMSNorm")  # the user's kernel raises on its trial call: bundled is next
        assert all(now.is_kernel and "rmsnorm" in now.repository for now in running)
        row = explorer.inventory().row("RMSNorm")
        found = dict((c.source, a) for c, a in row.candidates)
        assert found["user"].state.value == "cannot run here"
        assert "injected fault" in found["user"].reason
        named = explorer.on("RMSNorm", candidate="user")  # named: it stays off, and says why
        assert not any(now.is_kernel for now in named)
        assert all("cannot run here" in now.reason and "injected fault" in now.reason for now in named)
        assert_reports_match_counts(explorer)
    finally:
        explorer.reset()


def test_a_kernel_that_raises_when_run_falls_back_for_that_call_and_after(tmp_path: Path, hub: dict) -> None:
    explorer = _with_fault(tmp_path, layers=RAISING_ON_BATCH_RMSNORM)
    batch = TOKENS.repeat(2, 1)
    try:
        with torch.no_grad():
            before = explorer.model(batch).logits
        explorer.on("SiLU")
        running = explorer.on("RMSNorm")
        assert all(now.is_kernel and "kx-fault" in now.repository for now in running)  # passed its trial
        with torch.no_grad():
            out = explorer.model(batch).logits  # the first RMSNorm raises: PyTorch answers that call
        torch.testing.assert_close(out, before)
        rms = explorer.running("RMSNorm")
        assert not any(now.is_kernel for now in rms)
        assert all("raised when run" in now.reason for now in rms)
        assert all(now.is_kernel for now in explorer.running("SiLU"))
        assert "failed to load" in str(explorer.inventory().row("RMSNorm").candidates[0][1])
        assert_reports_match_counts(explorer)
    finally:
        explorer.reset()


def test_strict_mode_raises_instead(tmp_path: Path, hub: dict) -> None:
    from kernels import LocalLayerRepository

    path = write_repo(tmp_path, "kx-strict", init="raise ImportError('injected fault')\n")
    mapping = {"RMSNorm": {"cpu": LocalLayerRepository(repo_path=path, layer_name="RMSNorm")}}
    explorer = Explorer(tiny_llama(), mapping, strict=True, include_transformers=False)
    with pytest.raises(KernelSwitchError, match="injected fault"):
        explorer.on("RMSNorm")
    assert not any(now.is_kernel for now in explorer.running())
    raising = write_repo(tmp_path, "kx-strict-run", layers=RAISING_RMSNORM)
    mapping = {"RMSNorm": {"cpu": LocalLayerRepository(repo_path=raising, layer_name="RMSNorm")}}
    explorer = Explorer(tiny_llama(), mapping, strict=True, include_transformers=False)
    with pytest.raises(KernelSwitchError, match="cannot run here: RuntimeError: injected fault"):
        explorer.on("RMSNorm", candidate="user")
    assert not any(now.is_kernel for now in explorer.running())
    later = write_repo(tmp_path, "kx-strict-later", layers=RAISING_ON_BATCH_RMSNORM)
    mapping = {"RMSNorm": {"cpu": LocalLayerRepository(repo_path=later, layer_name="RMSNorm")}}
    explorer = Explorer(tiny_llama(), mapping, strict=True, include_transformers=False)
    explorer.on("RMSNorm")
    with pytest.raises(KernelSwitchError, match="raises on batches"), torch.no_grad():
        explorer.model(TOKENS.repeat(2, 1))
    assert not any(now.is_kernel for now in explorer.running())


# -- any sequence of switches, then all off: bitwise the untouched model --------------------------

_shared: dict[str, object] = {}


def _hypothesis_explorer() -> Explorer:
    if "explorer" not in _shared:
        model = tiny_llama(seed=7)
        _shared["explorer"] = Explorer(model, include_transformers=False)
        _shared["reference"] = logits(tiny_llama(seed=7))
    return _shared["explorer"]  # type: ignore[return-value]


_steps = st.lists(
    st.tuples(
        st.booleans(),
        st.sampled_from(["RMSNorm", "SiLU", "rotary_pos_emb"]),
        st.one_of(st.none(), st.lists(st.integers(0, 4), min_size=1, max_size=3)),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_any_switch_sequence_then_all_off_is_bitwise_the_untouched_model(hub: dict, steps: list) -> None:
    explorer = _hypothesis_explorer()
    try:
        for switch_on, name, picks in steps:
            group = explorer._switchboard.groups[name]
            instances = None if picks is None else [group.instances[i % len(group)] for i in picks]
            explorer.on(name, instances) if switch_on else explorer.off(name, instances)
            assert_reports_match_counts(explorer)
    finally:
        explorer.reset()
    assert_untouched(explorer.model)
    assert torch.equal(logits(explorer.model), _shared["reference"])


def test_holding_puts_back_the_state_before_and_can_leave_others_switches(explorer: Explorer) -> None:
    board = explorer._switchboard
    explorer.on("RMSNorm", "model.norm")
    before = board.snapshot()
    with board.holding(board.reset):
        assert not any(now.is_kernel for now in board.running())
        explorer.on("SiLU")
    assert board.snapshot() == before  # the block's own switch is undone too
    with board.holding(lambda: board.on("SiLU"), keep_others=True) as made:
        assert all(now.is_kernel for now in board.running("SiLU")) and len(made) > len(before)
        explorer.on("RMSNorm")  # a user's switch while a measurement holds its own
        explorer.off("SiLU", "model.layers.0.mlp.act_fn")
    running = {(n.layer_name, n.instance): n.is_kernel for n in board.running()}
    assert all(on for (layer, _), on in running.items() if layer == "RMSNorm")  # the user's stays
    assert not any(on for (layer, _), on in running.items() if layer == "SiLU")  # the change's undone
    explorer.reset()


def test_every_view_of_a_model_hears_of_each_change_once(explorer: Explorer) -> None:
    heard: list[int] = []
    unsubscribe = explorer._switchboard.subscribe(lambda: heard.append(1))
    other = Explorer(explorer.model, include_transformers=False)  # a second explorer on the same model
    explorer.on("RMSNorm")
    other.off("RMSNorm", "model.norm")
    before = explorer._switchboard.snapshot()
    explorer.reset()
    explorer._switchboard.restore(before)  # switches many instances: one notification
    assert len(heard) == 4
    unsubscribe()
    explorer.reset()
    assert len(heard) == 4


def test_explorer_of_reuses_the_latest_explorer_of_a_model(hub: dict) -> None:
    model = tiny_llama()
    first = Explorer.of(model, include_transformers=False)
    assert Explorer.of(model) is first
    second = Explorer(model, include_transformers=False)
    assert Explorer.of(model) is second and Explorer.of(tiny_llama()) is not second


DECLINING_CACHING_RMSNORM = """
import torch
from torch import nn


class RMSNorm(nn.Module):
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.weight[0] < 0:
            raise ValueError("a negative first weight: not for this kernel")
        self._kernel_scratch = torch.empty(1 << 16)  # a plain attribute the kernel leaves behind
        x = hidden_states.to(torch.float64)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (self.weight.to(torch.float64) * x).to(hidden_states.dtype)
"""


def test_a_value_error_declines_that_instance_only_and_off_releases_what_the_kernel_left(
    tmp_path: Path, hub: dict
) -> None:
    explorer = _with_fault(tmp_path, layers=DECLINING_CACHING_RMSNORM)
    try:
        keys = {path: tuple(m.__dict__) for path, m in explorer.model.named_modules()}
        explorer.on("RMSNorm")
        first = explorer.model.model.layers[0].input_layernorm
        logits(explorer.model)
        assert "_kernel_scratch" in first.__dict__
        explorer.off("RMSNorm", "model.layers.0.input_layernorm")
        assert tuple(first.__dict__) == keys["model.layers.0.input_layernorm"]
        with torch.no_grad():
            explorer.model.model.norm.weight[0] = -1.0
        explorer.on("RMSNorm")
        before = logits(explorer.model)
        rms = {now.instance: now for now in explorer.running("RMSNorm")}
        assert not rms["model.norm"].is_kernel
        assert "declined this instance: a negative first weight" in rms["model.norm"].reason
        assert sum(now.is_kernel for now in rms.values()) == 4  # the others keep the kernel
        candidate = explorer._catalog.candidates("RMSNorm")[0]
        assert explorer._catalog.availability(candidate, device="cpu", mode=explorer.mode).state.usable
        torch.testing.assert_close(before, logits(explorer.model))
        explorer.reset()
        assert {path: tuple(m.__dict__) for path, m in explorer.model.named_modules()} == keys
    finally:
        explorer.reset()


def test_torch_compile_mode_keeps_kernelizes_bound_forward(explorer: Explorer) -> None:
    """In torch.compile mode an instance runs kernelize's own bound forward, not the fallback
    wrapper: dynamo guards a callable object by identity, so a wrapper per instance recompiled every
    decoder layer (past the recompile limit, eagerly). Inference mode keeps the fallback."""
    import types

    explorer.on("RMSNorm", mode="torch.compile")
    forwards = [m.__dict__["forward"] for p, m in explorer.model.named_modules() if p.endswith("norm")]
    assert forwards and all(isinstance(f, types.MethodType) for f in forwards)
    assert all(now.is_kernel for now in explorer.running("RMSNorm"))
    explorer.on("RMSNorm")  # inference: the wrapper that falls back to PyTorch on an error
    forwards = [m.__dict__["forward"] for p, m in explorer.model.named_modules() if p.endswith("norm")]
    assert not any(isinstance(f, types.MethodType) for f in forwards)
    explorer.reset()
