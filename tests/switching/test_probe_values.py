"""Trust the values, not only the shape: a kernel that returns PyTorch's shape and other values is
caught by the probe at every door (module, function, attention, a class the user extended), for one
dtype or past one sequence length; it is never the default choice, switches with a warning when
named, and `strict` refuses it. A kernel that only rounds differently stays "runs here".

The faulty kernels are real repositories (tests/kernel_repos.py's layout) loaded by `kernels`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from attention_repos import FLASH_ATTN, write_attention_repo
from hub_like_repos import tiny_gpt_oss, write_missing_dependency
from kernel_repos import SCALED_RMSNORM, write_repo
from kernels import LocalLayerRepository
from torch import nn

from kernel_explorer.catalog.availability import State
from kernel_explorer.errors import KernelSwitchError
from kernel_explorer.explorer import Explorer
from kernel_explorer.inspect.layer_groups import ATTENTION
from kernel_explorer.loading import tiny_llama
from kernel_explorer.numerics.divergence import wrong_bound

PAST = 8  # the faulty kernels are right up to this many tokens (the captured prompt is longer)

WRONG_LAYERS = f"""
import torch
import torch.nn.functional as F
from torch import nn


def _rms(module, hidden_states):
    x = hidden_states.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)
    return module.weight * x.to(hidden_states.dtype)


class RMSNormWrongInBfloat16(nn.Module):
    '''Right in float32; in bfloat16 it divides by the mean absolute value, not the root mean square.'''

    def forward(self, hidden_states):
        if hidden_states.dtype != torch.bfloat16:
            return _rms(self, hidden_states)
        x = hidden_states.to(torch.float32)
        x = x / (x.abs().mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(hidden_states.dtype)


class RMSNormWrongPastLength(nn.Module):
    '''Right for the first {PAST} tokens; past them it leaves the tokens unnormalized.'''

    def forward(self, hidden_states):
        out = _rms(self, hidden_states)
        if hidden_states.shape[-2] > {PAST}:
            out = out.clone()
            out[..., {PAST}:, :] = self.weight * hidden_states[..., {PAST}:, :]
        return out


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryWrongPastLength(nn.Module):
    '''apply_rotary_pos_emb, rotating the wrong way past {PAST} positions.'''

    def forward(self, q, k, cos, sin, unsqueeze_dim=1):
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        if q.shape[-2] > {PAST}:
            sin = sin.clone()
            sin[..., {PAST}:, :] = -sin[..., {PAST}:, :]
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


class LinearWrongPastLength(nn.Module):
    '''nn.Linear, with rows past {PAST} tokens scaled by 1.25.'''

    def forward(self, input):
        out = F.linear(input, self.weight, self.bias)
        if input.dim() > 1 and input.shape[-2] > {PAST}:
            out = out.clone()
            out[..., {PAST}:, :] *= 1.25
        return out
"""

# flash-attn's contract (attention_repos.FLASH_ATTN), forgetting the causal mask past PAST keys
WRONG_ATTENTION = FLASH_ATTN.replace("    if causal:\n", f"    if causal and k.shape[0] <= {PAST}:\n")
assert WRONG_ATTENTION != FLASH_ATTN


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repo(tmp_path_factory.mktemp("wrong"), "kx-wrong-values", layers=WRONG_LAYERS)


def layer(repo: Path, name: str) -> LocalLayerRepository:
    return LocalLayerRepository(repo_path=repo, layer_name=name)


def logits(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79, 23, 84, 62, 64]])).logits


def state(explorer: Explorer, name: str, label: str) -> tuple[State, str]:
    for candidate, found in explorer.inventory().row(name).candidates:
        if label in candidate.label:
            return found.state, found.reason
    raise AssertionError(f"no candidate {label} in {name}")


def test_a_kernel_wrong_in_one_dtype_is_caught_at_the_module_door(hub: dict, repo: Path) -> None:
    mapping = {"RMSNorm": {"cpu": layer(repo, "RMSNormWrongInBfloat16")}}
    right = Explorer(tiny_llama(), mapping, include_transformers=False)  # float32: it is right
    assert state(right, "RMSNorm", "RMSNormWrongInBfloat16")[0] is State.READY

    model = tiny_llama().to(torch.bfloat16)
    before = logits(model)
    explorer = Explorer(model, mapping, include_transformers=False)
    found, reason = state(explorer, "RMSNorm", "RMSNormWrongInBfloat16")
    assert found is State.WRONG_RESULTS
    assert "against float64" in reason and "where PyTorch is off by" in reason
    assert "model.norm" in reason or "model.layers." in reason
    assert "bfloat16" in reason and "\n" not in reason

    running = explorer.on("RMSNorm")  # the default choice passes over it: the bundled kernel runs
    assert all(now.is_kernel and "bundled/rmsnorm" in now.candidate for now in running)
    explorer.off("RMSNorm")

    with pytest.warns(UserWarning, match="wrong results here"):  # named: on, and said
        running = explorer.on("RMSNorm", candidate="user/kx-wrong-values")
    assert all(now.is_kernel and "RMSNormWrongInBfloat16" in now.candidate for now in running)
    assert explorer.inventory().row("RMSNorm").warning.startswith("wrong results here")
    assert "wrong results here" in str(explorer.inventory())
    assert "wrong results here" in explorer.inventory()._repr_html_()
    from kernel_explorer.views.layer_table import table_rows

    row = next(r for r in table_rows(explorer) if r["name"] == "RMSNorm")
    assert row["warning"].startswith("wrong results here") and row["warning_key"] == "wrong_results"
    frame = explorer.inventory().to_pandas("candidates")
    assert "wrong results here" in set(frame[frame.layer == "RMSNorm"].state)
    explorer.reset()
    assert torch.equal(logits(model), before)


def test_strict_refuses_a_named_kernel_with_wrong_results(hub: dict, repo: Path) -> None:
    model = tiny_llama().to(torch.bfloat16)
    mapping = {"RMSNorm": {"cpu": layer(repo, "RMSNormWrongInBfloat16")}}
    explorer = Explorer(model, mapping, include_transformers=False, strict=True)
    with pytest.raises(KernelSwitchError, match="wrong results here"):
        explorer.on("RMSNorm", candidate="user/kx-wrong-values")
    assert not any(now.is_kernel for now in explorer.running("RMSNorm"))  # nothing half-switched


def test_a_kernel_wrong_past_a_length_is_caught_at_the_module_door(hub: dict, repo: Path) -> None:
    mapping = {"RMSNorm": {"cpu": layer(repo, "RMSNormWrongPastLength")}}
    explorer = Explorer(tiny_llama(), mapping, include_bundled=False, include_transformers=False)
    found, reason = state(explorer, "RMSNorm", "RMSNormWrongPastLength")
    assert found is State.WRONG_RESULTS, reason
    running = explorer.on("RMSNorm")  # no other candidate: PyTorch, with the one line
    assert not any(now.is_kernel for now in running)
    assert all("wrong results here" in now.reason and "\n" not in now.reason for now in running)


def test_a_kernel_wrong_past_a_length_is_caught_at_the_function_door(hub: dict, repo: Path) -> None:
    mapping = {"rotary_pos_emb": {"cpu": layer(repo, "RotaryWrongPastLength")}}
    explorer = Explorer(tiny_llama(), mapping, include_transformers=False)
    assert state(explorer, "rotary_pos_emb", "RotaryWrongPastLength")[0] is State.WRONG_RESULTS
    running = explorer.on("rotary_pos_emb")
    assert all("bundled/rotary" in now.candidate for now in running)  # the default passed over it
    with pytest.warns(UserWarning, match="wrong results here"):
        explorer.on("rotary_pos_emb", candidate="user/kx-wrong-values")
    assert explorer.inventory().row("rotary_pos_emb").warning
    explorer.reset()  # the rotary function object is shared by every Llama of the process


def test_a_kernel_wrong_past_a_length_is_caught_at_the_attention_door(hub: dict, tmp_path: Path) -> None:
    wrong = write_attention_repo(tmp_path, "attention-wrong-past-length", source=WRONG_ATTENTION)
    model = tiny_llama()
    before = logits(model)
    explorer = Explorer(model, attention=[wrong], include_transformers=False)
    running = explorer.on(ATTENTION)  # the default tries the user's first, finds it wrong, takes the next
    assert running[0].candidate == "bundled/flash_attn"
    assert state(explorer, ATTENTION, "attention-wrong-past-length")[0] is State.WRONG_RESULTS
    with pytest.warns(UserWarning, match="wrong results here"):
        running = explorer.on(ATTENTION, candidate=wrong)
    assert "attention-wrong-past-length" in running[0].candidate
    assert explorer.inventory().row(ATTENTION).warning.startswith("wrong results here")
    explorer.reset()
    assert torch.equal(logits(model), before)
    strict = Explorer(model, attention=[wrong], include_transformers=False, strict=True)
    with pytest.raises(KernelSwitchError, match="wrong results here"):
        strict.on(ATTENTION, candidate=wrong)
    assert torch.equal(logits(model), before)


def test_a_kernel_wrong_past_a_length_is_caught_at_an_extended_class(hub: dict, repo: Path) -> None:
    explorer = Explorer(tiny_llama(), include_transformers=False)
    explorer.extend(
        "Linear", nn.Linear, "model.layers.*.mlp.*", candidates={"cpu": layer(repo, "LinearWrongPastLength")}
    )
    found, reason = state(explorer, "Linear", "LinearWrongPastLength")
    assert found is State.WRONG_RESULTS and "mlp" in reason
    running = explorer.on("Linear")  # the default passes over it (a bundled quantized Linear runs)
    assert not any("LinearWrongPastLength" in now.candidate for now in running)
    with pytest.warns(UserWarning, match="wrong results here"):
        running = explorer.on("Linear", candidate="user/kx-wrong-values")
    assert all("LinearWrongPastLength" in now.candidate for now in running)
    explorer.reset()


def test_a_kernel_that_only_rounds_differently_runs_here(hub: dict, tmp_path: Path) -> None:
    float64 = write_repo(tmp_path, "kx-float64-rmsnorm", layers=SCALED_RMSNORM)
    mapping = {"RMSNorm": {"cpu": layer(float64, "RMSNorm")}}
    for model in (tiny_llama(), tiny_llama().to(torch.bfloat16)):
        explorer = Explorer(model, mapping, include_transformers=False)
        assert state(explorer, "RMSNorm", "kx-float64-rmsnorm")[0] is State.READY
        assert all(now.is_kernel for now in explorer.on("RMSNorm", candidate="user"))
        explorer.reset()


def test_the_bound_scales_with_pytorchs_error_and_the_resolution() -> None:
    eps_bf16 = torch.finfo(torch.bfloat16).eps
    assert wrong_bound(0.0, 2.0, torch.float32) == pytest.approx(8 * eps_bf16 * 2.0)  # resolution floor
    assert wrong_bound(1.0, 2.0, torch.bfloat16) == pytest.approx(8.0)  # PyTorch's own error


def tiny_deepseek_v4(*, compressed: bool = False) -> nn.Module:
    """Transformers' DeepSeek-V4, 2 layers, hidden 64, random sinks (they start at zero)."""
    from transformers import AutoModelForCausalLM
    from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config

    torch.manual_seed(0)
    config = DeepseekV4Config(
        vocab_size=128,
        hidden_size=64,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=32,
        q_lora_rank=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        o_groups=2,
        o_lora_rank=16,
        index_n_heads=2,
        index_head_dim=16,
        index_topk=4,
        layer_types=[
            "sliding_attention",
            "compressed_sparse_attention" if compressed else "sliding_attention",
        ],
        num_nextn_predict_layers=0,
    )
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("sinks"):
                parameter.normal_()
    return model


def refuses_flash_on_deepseek_v4() -> bool:
    """Transformers 5.25 runs flash kernels only on models declaring flash support; DeepSeek-V4
    declares none (5.22 ran them)."""
    from kernel_explorer._backend.attention_features import flash_unsupported

    return bool(flash_unsupported(tiny_deepseek_v4(), "kernels-community/flash-attn2"))


def test_deepseek_v4_without_flash_support_is_said_before_a_switch(hub: dict) -> None:
    if not refuses_flash_on_deepseek_v4():
        pytest.skip("this Transformers runs flash kernels on DeepSeek-V4")
    model = tiny_deepseek_v4()
    before = logits(model)
    explorer = Explorer(model, include_transformers=False)
    found, reason = state(explorer, ATTENTION, "bundled/flash_attn")
    assert found is State.CANNOT_RUN
    assert reason == (
        "DeepseekV4ForCausalLM does not declare flash-attention support, and this Transformers "
        "runs flash-attention kernels only on models that do"
    )
    running = explorer.on(ATTENTION)
    assert not any(now.is_kernel for now in running) and "does not declare" in running[0].reason
    assert torch.equal(logits(model), before)


def test_deepseek_v4_sinks_are_said_before_a_switch_and_the_bundled_kernel_takes_them(
    hub: dict, tmp_path: Path
) -> None:
    if refuses_flash_on_deepseek_v4():
        pytest.skip("this Transformers runs no flash kernel on DeepSeek-V4 (the test above)")
    without = write_attention_repo(tmp_path, "no-sinks", source=FLASH_ATTN)  # takes **kwargs only
    model = tiny_deepseek_v4()
    before = logits(model)
    explorer = Explorer(model, attention=[without], include_transformers=False)
    found, reason = state(explorer, ATTENTION, "no-sinks")
    assert found is State.WRONG_RESULTS
    assert reason.startswith(
        "this model's attention uses sinks (s_aux); user/no-sinks takes no sinks: "
        "Transformers would drop them"
    )
    assert "sliding window (sliding_window); user/no-sinks takes no sliding window" in reason
    # the bundled kernel takes s_aux: right, at PyTorch's level against float64
    assert state(explorer, ATTENTION, "bundled/flash_attn")[0] is State.READY
    running = explorer.on(ATTENTION)
    assert running[0].candidate == "bundled/flash_attn"
    after = logits(model)
    assert (after - before).abs().max() <= 1e-5 * before.abs().max()
    door = explorer._switchboard.doors[ATTENTION]
    from kernel_explorer.numerics.divergence import divergence, float64_reference

    for path in door.group.instances:
        args, kwargs = door.host.sample(ATTENTION, path)
        kernel, pytorch, on = door.forwards(path)
        assert on
        with torch.no_grad():
            found64 = divergence(
                kernel(*args, **kwargs),
                pytorch(*args, **kwargs),
                float64_reference(pytorch.__self__, args, kwargs),
            )
        assert found64["kernel_err64"] <= 4 * max(
            found64["pytorch_err64"], torch.finfo(torch.float32).eps * found64["reference_max_abs"]
        )
    explorer.reset()
    assert torch.equal(logits(model), before)


def test_deepseek_v4_compressed_attention_is_wrong_results_here_not_silent(hub: dict) -> None:
    if refuses_flash_on_deepseek_v4():
        pytest.skip("this Transformers runs no flash kernel on DeepSeek-V4")
    model = tiny_deepseek_v4(compressed=True)
    before = logits(model)
    explorer = Explorer(model, include_transformers=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        running = explorer.on(ATTENTION)
    assert not any(now.is_kernel for now in running)
    assert "wrong results here" in running[0].reason and "model.layers.1" in running[0].reason
    assert torch.equal(logits(model), before)


def test_gpt_oss_says_transformers_redirects_its_flash_attention(hub: dict) -> None:
    explorer = Explorer(tiny_gpt_oss(), include_transformers=False)
    found, reason = state(explorer, ATTENTION, "bundled/flash_attn")
    assert found is State.CANNOT_RUN
    assert reason.startswith(
        "Transformers redirects this model's flash attention to kernels-community/vllm-flash-attn3"
    )
    running = explorer.on(ATTENTION)
    assert "Transformers redirects" in running[0].reason and "trust" not in running[0].reason
    explorer.reset()


def test_an_explicit_peer_that_cannot_load_reads_as_such_in_the_inventory(hub: dict, tmp_path: Path) -> None:
    peer = write_missing_dependency(tmp_path)
    explorer = Explorer(tiny_llama(), peers=[peer], include_transformers=False)
    text = str(explorer.inventory())
    line = next(line for line in text.splitlines() if "[peer]" in line)
    assert line.strip().startswith("RMSNorm:") and "needs-dependency" in line
    assert State.FAILED.value in line or State.CANNOT_RUN.value in line
    assert "needs `" in line  # the reason, not only in to_pandas('candidates')
    from kernel_explorer.views.layer_table import table_rows

    row = next(r for r in table_rows(explorer) if r["name"] == "RMSNorm")
    assert any("needs `" in given["reason"] for given in row["given"])


def test_a_tensor_the_flash_glue_never_reads_is_a_dropped_feature() -> None:
    from kernel_explorer._backend.attention_features import feature_gaps, unread_tensors

    bias = torch.zeros(1, 4, 3, 3)  # Inkling passes relative-position logits as `position_bias`
    captured = {"position_bias": bias, "s_aux": torch.zeros(4), "scaling": 0.25, "sliding_window": None}
    assert unread_tensors(captured) == ["position_bias"]
    dropped, refused = feature_gaps({}, {"s_aux"}, "bundled/flash_attn", ["position_bias"])
    assert dropped == (
        "this model's attention passes `position_bias`; Transformers' flash glue gives it to no kernel: "
        "bundled/flash_attn would run without it"
    )
    assert refused == ""
