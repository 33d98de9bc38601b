"""Training mode: forward+backward pairs, gradients against float64, refusals, the training step.

What runs is checked by counting the kernel ops the dispatcher sees, and the gradient checks are
shown able to fail on a kernel whose backward is wrong by 1%.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import torch
from kernel_repos import NO_BACKWARD_RMSNORM, write_repo
from torch.utils._python_dispatch import TorchDispatchMode

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama
from kernel_explorer.measure.capture import capture_inputs
from kernel_explorer.measure.layer_training import _prepare, forward_backward, kernels_in_mode

# a few pairs on a shared 2-core machine: the noise warning is expected, not a finding
pytestmark = pytest.mark.filterwarnings("ignore::kernel_explorer.measure.stats.NoisyMachineWarning")

TOKENS = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(3))
BUNDLED_OP = re.compile(r"_(rmsnorm|activation|rotary)_cpu_[0-9a-f]+::")


def _training(explorer: Explorer, kind: str) -> list:  # type: ignore[type-arg]
    """The run's records of `kind` measured in training mode."""
    return [r for r in explorer.results.records(kind) if r.values.mode == "training"]


# A pure-Python RMSNorm whose forward matches PyTorch's and whose input gradient is 1% too large.
WRONG_BACKWARD_RMSNORM = """
import torch
from torch import nn


class _Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 1.01


class RMSNorm(nn.Module):
    has_backward = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x = _Scaled.apply(hidden_states).to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(hidden_states.dtype)
"""


@pytest.fixture
def explorer(hub: dict) -> Explorer:
    found = Explorer(tiny_llama(), include_transformers=False)
    found.capture(TOKENS)
    yield found
    found.reset()


def _mapping(tmp_path: Path, layers: str) -> dict:
    from kernels import LocalLayerRepository

    path = write_repo(tmp_path, "kx-train", layers=layers)
    return {"RMSNorm": {"cpu": LocalLayerRepository(repo_path=path, layer_name="RMSNorm")}}


def _with_repo(tmp_path: Path, layers: str) -> Explorer:
    explorer = Explorer(tiny_llama(), _mapping(tmp_path, layers), include_transformers=False)
    explorer.capture(TOKENS)
    return explorer


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops[f"{func.namespace}::{func._opname}"] += 1
        return func(*args, **(kwargs or {}))


def test_training_compare_streams_gradients_pairs_and_a_verdict(explorer: Explorer) -> None:
    explorer.compare("RMSNorm", pairs=3, calibration_pairs=4, mode="training")
    gradients = explorer.results.records("gradient_divergence")
    assert len(gradients) == 5 * 2  # input and weight of each of the 5 instances
    assert Counter(r.values.gradient for r in gradients) == {"input 0": 5, "weight": 5}
    for record in gradients:
        values = record.values
        assert values.kernel_on and values.dtype == "float32" and values.allclose
        # both sides against float64: the fused backward is as accurate as autograd's, give or take
        assert values.kernel_err64 <= 4 * values.pytorch_err64 + 1e-6
    assert len(_training(explorer, "layer_calibration")) == 4
    latency = _training(explorer, "layer_latency")
    assert len(latency) == 5 * 3 and all(r.values.kernel_on and r.values.kernel_s > 0 for r in latency)
    (verdict,) = [r.values for r in _training(explorer, "layer_verdict")]
    assert verdict.kernel_on and verdict.pairs == 15 and verdict.speedup_low <= verdict.speedup_high
    assert verdict.accuracy.startswith(("bitwise equal", "rounds differently"))
    # one record class per kind of value: the mode tells training's records from inference's
    assert {r.values.mode for r in explorer.results.records("layer_verdict")} == {"training"}
    assert "RMSNorm" not in explorer.results.latest_verdicts()  # the inventory shows inference's
    assert not any(now.is_kernel for now in explorer.running())  # switched on for the run only
    assert all(p.grad is None for p in explorer.model.parameters())  # no gradient left on the model


def test_the_kernels_own_backward_runs_in_the_pairs(explorer: Explorer) -> None:
    """The pairs time the kernel's forward and its fused backward op, not autograd's fallback."""
    board = explorer._switchboard
    captured = capture_inputs(board, {"input_ids": TOKENS}, grad=True)
    (path, args, kwargs) = ("model.norm", *captured.for_layer("RMSNorm")["model.norm"][0])
    with kernels_in_mode(board, "training", [("RMSNorm", path)]):
        step = _prepare(board, "RMSNorm", (path, args, kwargs), seed=0)
        current, pytorch, on = board.forwards("RMSNorm", path)
        assert on
        with OpCounter() as counter:
            forward_backward(current, step)()
        kernel_ops = {op.split("::")[1] for op in counter.ops if op.startswith("_rmsnorm")}
        assert {"rms_norm", "rms_norm_backward"} <= kernel_ops
        with OpCounter() as counter:
            forward_backward(pytorch, step)()
        assert not any(op.startswith("_rmsnorm") for op in counter.ops)


def test_rotary_gradients_cover_q_and_k_against_float64(explorer: Explorer) -> None:
    explorer.compare("rotary_pos_emb", "SiLU", pairs=1, calibration_pairs=1, mode="training")
    rotary = [
        r.values for r in explorer.results.records("gradient_divergence") if r.layer == "rotary_pos_emb"
    ]
    assert sorted(v.gradient for v in rotary) == ["input 0", "input 0", "input 1", "input 1"]  # q, k
    assert all(v.kernel_err64 is not None and v.kernel_err64 < 1e-5 for v in rotary)
    assert {r.layer for r in _training(explorer, "layer_verdict")} == {"rotary_pos_emb", "SiLU"}


def test_a_wrong_backward_is_less_accurate_and_the_step_names_where(tmp_path: Path, hub: dict) -> None:
    """The checks can fail: a backward 1% off is 'less accurate' at layer level and visible in the step."""
    explorer = _with_repo(tmp_path, WRONG_BACKWARD_RMSNORM)
    explorer.compare("RMSNorm", instances="model.norm", pairs=1, calibration_pairs=1, mode="training")
    (verdict,) = [r.values for r in _training(explorer, "layer_verdict")]
    assert verdict.kernel_on and verdict.accuracy.startswith("less accurate")
    by = {r.values.gradient: r.values for r in explorer.results.records("gradient_divergence")}
    assert by["input 0"].kernel_err64 > 100 * by["input 0"].pytorch_err64
    assert by["weight"].kernel_err64 <= 4 * by["weight"].pytorch_err64 + 1e-6  # only the input's is off
    explorer.on("RMSNorm")
    explorer.compare_model(mode="training", lengths=(16,), pairs=1)
    (agreement,) = [r.values for r in explorer.results.records("training_agreement")]
    assert agreement.worst_rel_err > 1e-3 and agreement.instances_on == 5
    assert agreement.loss_abs_diff < 1e-5  # the forward is right: only gradients differ


def test_a_kernel_without_backward_is_refused_with_the_reason(tmp_path: Path, hub: dict) -> None:
    explorer = _with_repo(tmp_path, NO_BACKWARD_RMSNORM)
    refused = explorer.on("RMSNorm", mode="training")
    assert refused and not any(now.is_kernel for now in refused)
    assert all("does not support training" in now.reason for now in refused)
    rows = explorer.inventory().to_pandas()
    assert rows[rows.layer == "RMSNorm"].reason.str.contains("does not support training").all()
    mapping = _mapping(tmp_path, NO_BACKWARD_RMSNORM)
    training = Explorer(tiny_llama(), mapping, mode="training", include_transformers=False)
    assert not any(now.is_kernel for now in training.on("RMSNorm"))
    # switched on for inference, compared in training: refused for the run, the reason in the verdict
    explorer.on("RMSNorm")
    assert all(now.is_kernel for now in explorer.running("RMSNorm"))
    explorer.compare("RMSNorm", pairs=2, calibration_pairs=2, mode="training")
    (verdict,) = [r.values for r in _training(explorer, "layer_verdict")]
    assert not verdict.kernel_on and any("does not support training" in note for note in verdict.notes)
    assert verdict.summary.startswith("kernel off")
    assert not any(r.values.kernel_on for r in _training(explorer, "layer_latency"))
    assert all(now.is_kernel for now in explorer.running("RMSNorm"))  # the inference switch is back


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda e: e.compare("RMSNorm", mode="fast"), "Unknown mode 'fast'"),
        (
            lambda e: e.compare("RMSNorm", mode="torch.compile"),
            "compare takes mode 'inference' or 'training'",
        ),
        (lambda e: e.compare_model(mode="backwards"), "Unknown mode 'backwards'"),
        (lambda e: e.compare_model(mode="training+torch.compile"), "compare_model takes mode"),
    ],
)
def test_a_mode_a_comparison_does_not_take_is_one_line(explorer: Explorer, call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KernelExplorerError, match=message) as raised:
        call(explorer)
    assert "\n" not in str(raised.value)
    assert len(explorer.results) == 0


def test_training_step_agrees_with_pytorch_and_leaves_the_model_as_it_was(explorer: Explorer) -> None:
    for name in explorer.layers:
        explorer.on(name)  # inference mode: the step switches them to training mode for the run
    before = explorer._switchboard.snapshot()
    explorer.compare_model(mode="training", lengths=(16, 32), pairs=2)
    agreements = [r.values for r in explorer.results.records("training_agreement")]
    assert [a.tokens for a in agreements] == [16, 32]
    for agreement in agreements:
        assert agreement.instances_on == 9 and agreement.parameters == len(list(explorer.model.parameters()))
        assert agreement.loss_abs_diff < 1e-5 and agreement.min_cosine > 0.9999
        assert agreement.worst_parameter and agreement.worst_rel_err < 1e-3
    pairs = explorer.results.records("model_pair")
    assert len(pairs) == 4 and all(r.values.measure == "training step" for r in pairs)
    verdicts = explorer.results.model_summary()
    assert list(verdicts.measure) == ["training step", "training step"] and list(verdicts.tokens) == [16, 32]
    assert explorer._switchboard.snapshot() == before
    assert all(p.grad is None for p in explorer.model.parameters())


def test_training_summary_names_the_worst_gradient_and_why_a_kernel_did_not_run(
    tmp_path: Path, hub: dict
) -> None:
    explorer = _with_repo(tmp_path, WRONG_BACKWARD_RMSNORM)
    explorer.compare("RMSNorm", instances="model.norm", pairs=1, calibration_pairs=1, mode="training")
    refusing = _with_repo(tmp_path / "other", NO_BACKWARD_RMSNORM)
    refusing.compare("RMSNorm", instances="model.norm", pairs=1, calibration_pairs=1, mode="training")
    (row,) = explorer.results.training_summary().to_dict("records")
    assert row["layer"] == "RMSNorm" and row["worst_gradient"] == "input 0" and row["kernel_on"]
    assert row["accuracy"].startswith("less accurate") and row["kernel_err64"] > row["pytorch_err64"]
    (row,) = refusing.results.training_summary().to_dict("records")
    assert not row["kernel_on"] and "does not support training" in row["notes"]
    assert explorer.results.layer_summary().empty  # training runs stay out of the inference summary


@pytest.mark.slow
def test_compiled_with_kernels_against_compiled_pytorch(explorer: Explorer) -> None:
    """Each side compiled once; the kernel side's compiled graph really calls the kernels' ops."""
    from kernel_explorer.measure.model_modes import compiled_sides

    for name in explorer.layers:
        explorer.on(name, mode="torch.compile")
    before = explorer._switchboard.snapshot()
    explorer.compare_model(mode="torch.compile", lengths=(16,), pairs=2)
    assert [r.values.measure for r in explorer.results.records("model_pair")] == ["compiled prefill"] * 2
    (verdict,) = explorer.results.model_summary().to_dict("records")
    assert verdict["measure"] == "compiled prefill" and verdict["pairs"] == 2
    assert explorer._switchboard.snapshot() == before
    compiled_kernel, compiled_pytorch = compiled_sides(explorer._switchboard)
    with torch.no_grad(), torch.profiler.profile() as kernel_run:  # as compare_model runs them
        kernel_logits = compiled_kernel(input_ids=TOKENS).logits
    with torch.no_grad(), torch.profiler.profile() as pytorch_run:
        pytorch_logits = compiled_pytorch(input_ids=TOKENS).logits
    assert any("_rmsnorm_cpu_" in event.name for event in kernel_run.events())
    # a bundled op's namespace is `_<repo>_cpu_<hash>` (ATen has `..._for_cpu_backward` names too)
    leaked = sorted({event.name for event in pytorch_run.events() if BUNDLED_OP.search(event.name)})
    assert not leaked, f"the compiled all-PyTorch side ran kernel ops: {leaked}"
    torch.testing.assert_close(kernel_logits, pytorch_logits, rtol=1e-4, atol=1e-4)


def test_a_kernel_that_refused_training_reads_so_in_the_training_inventory(tmp_path: Path, hub: dict) -> None:
    """After kernelize kept PyTorch for a kernel without backward, the training-mode inventory says
    why instead of "ready"; inference still offers it."""
    from kernel_explorer._backend.modes import parse_mode
    from kernel_explorer.catalog.availability import State

    mapping = _mapping(tmp_path, NO_BACKWARD_RMSNORM)
    explorer = Explorer(tiny_llama(), mapping, include_transformers=False, mode="training")
    (candidate,) = [c for c in explorer._catalog.candidates("RMSNorm") if c.source == "user"]
    row = next(r for r in explorer.inventory().rows if r.group.name == "RMSNorm")
    assert dict(row.candidates)[candidate].state is State.READY  # not known before trying
    explorer.on("RMSNorm", "model.norm")
    assert not any(now.is_kernel for now in explorer.running("RMSNorm"))
    row = next(r for r in explorer.inventory().rows if r.group.name == "RMSNorm")
    found = dict(row.candidates)[candidate]
    assert found.state is State.NO_MAPPING and "does not support training" in found.reason
    inference = explorer._catalog.availability(candidate, device="cpu", mode=parse_mode("inference"))
    assert inference.state is State.READY
    explorer.reset()
