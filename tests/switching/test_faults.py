"""Any sequence of switches, with faults injected at every door, leaves a whole model; off is bitwise.

The model's candidates include kernels that behave like the Hub's (tests/hub_like_repos.py): a layer
that repacks its weights on first use, one whose op has no CPU kernel, one whose Python needs a
missing module, an RMSNorm and an attention that pass their trial and raise on a batched forward,
and an attention that refuses float32. Hypothesis draws switch sequences over every door (layer
forwards, the rotary function, attention) with forwards in between, batched ones among them, which
is where the raising kernels fail. After every step: nothing raised, and what the explorer reports
is what the model runs. After `reset`: bitwise the untouched model, its tensors the same objects.
"""

from __future__ import annotations

from pathlib import Path

import torch
from attention_repos import FLASH_ATTN, write_attention_repo
from hub_like_repos import (
    write_missing_dependency,
    write_op_without_cpu_kernel,
    write_repacking_rmsnorm,
    write_varlen_only_attention,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_repos import RAISING_ON_BATCH_RMSNORM, write_repo
from test_hub_like import RAISING_ON_BATCH_ATTENTION, state_of
from test_switchboard import assert_untouched, kernels_run_per_instance

from kernel_explorer.explorer import Explorer
from kernel_explorer.inspect.layer_groups import ATTENTION
from kernel_explorer.loading import tiny_llama

TOKENS = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79]])
_shared: dict[str, object] = {}


def _explorer(root: Path) -> Explorer:
    """One explorer for every example (building the repositories once)."""
    if "explorer" not in _shared:
        from kernels import LocalLayerRepository

        raising = write_repo(root, "kx-raises-on-batch", layers=RAISING_ON_BATCH_RMSNORM)
        mapping = {"RMSNorm": {"cpu": LocalLayerRepository(repo_path=raising, layer_name="RMSNorm")}}
        peers = [
            write_repacking_rmsnorm(root),
            write_op_without_cpu_kernel(root),
            write_missing_dependency(root),
        ]
        attention = [
            write_attention_repo(root, "attention-raises-on-batch", source=RAISING_ON_BATCH_ATTENTION),
            write_attention_repo(root, "attention-good", source=FLASH_ATTN),
            write_varlen_only_attention(root),
        ]
        model = tiny_llama(seed=7)
        explorer = Explorer(model, mapping, peers=peers, attention=attention, include_transformers=False)
        _shared.update(
            explorer=explorer,
            attention=[None, "sdpa", "eager", *attention],
            reference=_logits(tiny_llama(seed=7), TOKENS.repeat(2, 1)),
            tensors=state_of(model),
        )
    return _shared["explorer"]  # type: ignore[return-value]


def _logits(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens).logits


_layers = st.sampled_from(["RMSNorm", "SiLU", "rotary_pos_emb", ATTENTION])
_steps = st.lists(
    st.tuples(
        st.sampled_from(["on", "off", "forward", "batched forward"]),
        _layers,
        st.sampled_from([None, "bundled", "peer", "user", 0, 1, 2, 3, 4]),  # a word or a candidate index
        st.one_of(st.none(), st.lists(st.integers(0, 4), min_size=1, max_size=2)),
    ),
    min_size=1,
    max_size=8,
)


def _candidate(explorer: Explorer, layer: str, pick: object) -> object:
    if layer == ATTENTION:
        options = _shared["attention"]
        return options[pick % len(options)] if isinstance(pick, int) else None  # type: ignore[index]
    if isinstance(pick, int):
        options = [c for c in explorer._catalog.candidates(layer) if c.device == "cpu"]
        return options[pick % len(options)]
    known = {c.source for c in explorer._catalog.candidates(layer)}
    return pick if pick in known else None


def _python_kernels_ran(explorer: Explorer) -> dict[tuple[str, str], set[str]]:
    """(layer, instance) -> ids of the pure-Python kernels that ran on it in one forward (they log
    the modules they run on in their `RAN` list; compiled kernels are seen by their ops)."""
    from kernels import get_loaded_kernels

    layers = {k.metadata.id: getattr(k.module, "layers", None) for k in get_loaded_kernels()}
    logs = {kernel_id: getattr(module, "RAN", None) for kernel_id, module in layers.items()}
    logs = {kernel_id: log for kernel_id, log in logs.items() if isinstance(log, list)}
    for log in logs.values():
        log.clear()
    _logits(explorer.model, TOKENS)
    found: dict[tuple[str, str], set[str]] = {}
    for name, group in explorer._switchboard.groups.items():
        for path in group.instances:
            module = explorer.model.get_submodule(path)
            found[(name, path)] = {kernel_id for kernel_id, log in logs.items() if id(module) in log}
    return found


def _check_reports(explorer: Explorer) -> None:
    """Every row says what runs: layer kernels by what they did (the ops a compiled one calls, the
    log a Python one keeps), attention by the model's config."""
    python = _python_kernels_ran(explorer)
    compiled = kernels_run_per_instance(explorer)
    attention_ids = {now.kernel_id for now in explorer.running(ATTENTION)}
    for now in explorer.running():
        if now.layer_name == ATTENTION:
            continue
        key = (now.layer_name, now.instance)
        ran = python.get(key, set()) | (compiled.get(key, set()) - attention_ids)
        assert ran == ({now.kernel_id} if now.is_kernel else set()), f"{now.instance}: said {now}, ran {ran}"
    runs_kernel = explorer.model.config._attn_implementation not in ("sdpa", "eager")
    assert all(now.is_kernel == runs_kernel for now in explorer.running(ATTENTION))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_any_switch_sequence_with_faults_keeps_a_whole_model_and_off_is_bitwise(
    tmp_path_factory, steps: list
) -> None:  # type: ignore[no-untyped-def]
    explorer = _explorer(tmp_path_factory.mktemp("faults"))
    try:
        for action, layer, pick, picks in steps:
            group = explorer._switchboard.groups[layer]
            instances = None if picks is None else [group.instances[i % len(group)] for i in picks]
            if action == "on":
                explorer.on(layer, instances, candidate=_candidate(explorer, layer, pick))
            elif action == "off":
                explorer.off(layer, instances)
            else:  # a forward: the faults of kernels that raise on batches fire here
                tokens = TOKENS.repeat(2, 1) if action == "batched forward" else TOKENS
                assert torch.isfinite(_logits(explorer.model, tokens)).all()
            _check_reports(explorer)
    finally:
        explorer.reset()
    assert_untouched(explorer.model)
    assert state_of(explorer.model) == _shared["tensors"]
    assert explorer.model.config._attn_implementation == "sdpa"
    assert torch.equal(_logits(explorer.model, TOKENS.repeat(2, 1)), _shared["reference"])
