"""Every text architecture of the installed Transformers with a kernel hook, as a tiny random model,
through the Explorer: what `tests/inspect/test_architectures.py` asserts and `bench/architectures.py` prints.

The list is read from Transformers itself (`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, and each model's
modeling source carrying `use_kernel_forward_from_hub`, `use_kernelized_func` or
`use_kernel_func_from_hub`), so an upgrade's new architectures are swept without new code. A tiny
config is derived from each architecture's default one (sizes shrunk where the config has them,
per-layer lists cut to the layers kept, sub-configs shrunk the same way); one that cannot be built
is reported with the error, not hidden.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

HOOKS = ("use_kernel_forward_from_hub", "use_kernelized_func", "use_kernel_func_from_hub")
LAYERS = 2
VOCAB = 256
TOKENS = [[3, 14, 15, 92, 65, 35, 89, 79, 23, 84, 62, 64]]

# Sizes a tiny model takes where the config has the attribute (every name seen in Transformers 5.22's
# default configs of the hooked architectures): hidden 64, 4 heads of 16, experts 4 choose 2.
SIZES: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "expert_intermediate_size": 32,
    "ffn_hidden_size": 128,
    "n_embd": 64,
    "n_inner": 128,
    "d_model": 64,
    "num_hidden_layers": LAYERS,
    "n_layer": LAYERS,
    "num_layers": LAYERS,
    "num_attention_heads": 4,
    "n_head": 4,
    "head_dim": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "qk_head_dim": 16,
    "v_head_dim": 16,
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "o_lora_rank": 16,
    "o_groups": 2,
    "index_n_heads": 2,
    "index_head_dim": 16,
    "index_topk": 4,
    "n_routed_experts": 4,
    "num_experts": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "moe_topk": 2,
    "n_group": 1,
    "topk_group": 1,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "vocab_size": VOCAB,
    "max_position_embeddings": 512,
    "num_nextn_predict_layers": 0,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "mamba_n_heads": 4,
    "mamba_d_head": 16,
    "mamba_d_state": 16,
    "mamba_head_dim": 16,
    "ssm_state_size": 16,
    "state_size": 16,
    "time_step_rank": 8,
    "n_heads": 4,
    "rope_head_dim": 8,
    "kv_channels": 16,
}
# default None, yet read as a size (head_dim derived when None is not derived everywhere)
SIZED_WHEN_NONE = (
    "head_dim",
    "num_experts_per_tok",
    "n_routed_experts",
    "num_experts",
    "moe_intermediate_size",
)
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "decoder_start_token_id")


@dataclass
class Swept:
    """One architecture through the Explorer."""

    model_type: str
    built: bool = False
    why_not: str = ""  # why it could not be built or run (one line)
    rows: dict[str, str] = field(default_factory=dict)  # layer -> what `on` left running, or why not
    states: dict[str, str] = field(default_factory=dict)  # layer -> the best candidate's state
    errors: dict[str, float] = field(default_factory=dict)  # layer -> max |logits delta| / max |logits|
    silently_wrong: list[str] = field(default_factory=list)  # rows on, wrong, and not said
    restored: bool | None = None  # everything off gives the logits bitwise
    raw_exception: str = ""  # an explorer call that raised something else than a one-line answer
    seconds: float = 0.0

    @property
    def ran(self) -> bool:
        return self.built and not self.why_not


def hooked_architectures() -> list[str]:
    """The model types of Transformers' causal-LM mapping whose modeling code has a kernel hook."""
    from transformers.models.auto.configuration_auto import model_type_to_module_name
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found = []
    for model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        module = model_type_to_module_name(model_type)
        try:
            package = importlib.import_module(f"transformers.models.{module}")
        except Exception:
            continue
        folder = package.__path__[0] if hasattr(package, "__path__") else None
        if folder is None:
            continue
        from pathlib import Path

        sources = [p.read_text() for p in Path(folder).glob("modeling_*.py")]
        if any(hook in text for text in sources for hook in HOOKS):
            found.append(model_type)
    return sorted(found)


def _shrunk(config: Any) -> dict[str, Any]:
    """The keyword overrides that make `config` (a default config) tiny."""
    values = config.to_dict()
    layers = values.get("num_hidden_layers") or values.get("n_layer") or values.get("num_layers")
    out: dict[str, Any] = {}
    for key, size in SIZES.items():
        if key not in values or isinstance(values[key], (list, dict)):
            continue
        if values[key] is None and key not in SIZED_WHEN_NONE:  # None means "not used" (q_lora_rank)
            continue
        out[key] = size
    if "qk_rope_head_dim" in out and "head_dim" in values:  # MLA: rotary runs on the rope part only
        out["head_dim"] = out["qk_rope_head_dim"]
    expand = values.get("mamba_expand", values.get("expand"))
    for heads, head_dim in (("mamba_n_heads", "mamba_d_head"), ("mamba_num_heads", "mamba_head_dim")):
        if (
            isinstance(expand, int) and heads in values and head_dim in values
        ):  # heads x dim = expand x hidden
            out[head_dim] = 16
            out[heads] = expand * out.get("hidden_size", 64) // 16
    if (
        isinstance(expand, int)
        and "num_heads" in values
        and "head_dim" in values
        and "mamba" in str(values.get("model_type"))
    ):
        out["num_heads"] = expand * out.get("hidden_size", 64) // out["head_dim"]
    if "mamba_d_ssm" in values and "mamba_n_heads" in out:  # Falcon-H1: the SSM width is heads x dim
        out["mamba_d_ssm"] = out["mamba_n_heads"] * out["mamba_d_head"]
    # hybrids: an attention layer among the two kept (Jamba every 8th from the 4th, Bamba by index)
    for key, value in (("attn_layer_period", 2), ("attn_layer_offset", 1), ("attn_layer_indices", [1])):
        if key in values:
            out[key] = value
    for key, value in (("expert_layer_period", 2), ("expert_layer_offset", 1)):
        if key in values:
            out[key] = value
    for key, value in (("linear_head_dim", 16), ("linear_num_heads", 4)):  # Kimi-Linear's linear attention
        if key in values:
            out[key] = value
    if "num_key_value_heads" in values and values["num_key_value_heads"] is not None:
        out["num_key_value_heads"] = 1 if values["num_key_value_heads"] == 1 else 2
    if isinstance(layers, int):
        for key, value in values.items():
            if isinstance(value, list) and len(value) == layers and layers > LAYERS:
                # keep each kind of layer once when there are several (sliding and full attention)
                kinds = list(dict.fromkeys(map(str, value)))
                kept = [value[[str(v) for v in value].index(kind)] for kind in kinds][:LAYERS]
                out[key] = (kept + value[: LAYERS - len(kept)])[:LAYERS]
                out["num_hidden_layers" if "num_hidden_layers" in values else "n_layer"] = len(out[key])
    for key in TOKEN_IDS:
        value = values.get(key)
        if isinstance(value, int) and value >= VOCAB:
            out[key] = VOCAB - 1
        elif isinstance(value, list):
            out[key] = [min(v, VOCAB - 1) if isinstance(v, int) else v for v in value]
    for key, value in values.items():
        if key.endswith("_config") and isinstance(value, dict) and "model_type" in value:
            sub = getattr(config, key, None)
            if sub is not None and hasattr(sub, "to_dict"):
                out[key] = {**sub.to_dict(), **_shrunk(sub)}
    if "sliding_window" in values and isinstance(values["sliding_window"], int):
        out["sliding_window"] = min(values["sliding_window"], 64)
    return out


def tiny_config(model_type: str) -> Any:
    """A tiny config of `model_type` derived from its default one; raises with why it cannot."""
    from transformers import CONFIG_MAPPING

    defaults = CONFIG_MAPPING[model_type]()
    config = CONFIG_MAPPING[model_type](**{**defaults.to_dict(), **_shrunk(defaults)})
    return config


def one_line(error: BaseException) -> str:
    text = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {text}"[:200]


def _logits(model: Any, tokens: Any) -> Any:
    import torch

    with torch.no_grad():
        out = model(input_ids=tokens)
    return out.logits if hasattr(out, "logits") else out[0]


def sweep_one(model_type: str) -> Swept:
    """Build `model_type` tiny, then through the Explorer: inventory, each row alone on (its logits
    against PyTorch's), every row on, everything off (bitwise)."""
    import torch
    from transformers import AutoModelForCausalLM

    from kernel_explorer import Explorer
    from kernel_explorer.catalog.availability import State
    from kernel_explorer.errors import KernelExplorerError

    found = Swept(model_type)
    start = time.perf_counter()
    quiet = contextlib.redirect_stdout(io.StringIO())
    try:
        torch.manual_seed(0)
        with warnings.catch_warnings(), quiet:
            warnings.simplefilter("ignore")
            config = tiny_config(model_type)
            model = AutoModelForCausalLM.from_config(config).eval()
            for name, parameter in model.named_parameters():  # sinks start at zero: make them count
                if name.endswith("sinks"):
                    with torch.no_grad():
                        parameter.normal_()
            tokens = torch.tensor(TOKENS) % min(VOCAB, getattr(model.config, "vocab_size", VOCAB) or VOCAB)
            base = _logits(model, tokens)
        found.built = True
    except Exception as error:
        found.why_not = f"cannot build: {one_line(error)}"
        found.seconds = time.perf_counter() - start
        return found
    try:
        with warnings.catch_warnings(), quiet:
            warnings.simplefilter("ignore")
            explorer = Explorer(model)
            inventory = explorer.inventory()
    except Exception as error:
        found.raw_exception = f"Explorer/inventory: {one_line(error)}"
        found.seconds = time.perf_counter() - start
        return found
    scale = base.abs().max().item() or 1.0
    for row in inventory.rows:
        name = row.group.name
        found.states[name] = row.best[1].state.value if row.best else "no mapping"
        try:
            with warnings.catch_warnings(), quiet:
                warnings.simplefilter("ignore")
                running = explorer.on(name)
                got = _logits(model, tokens)
                explorer.off(name)
        except KernelExplorerError as answer:  # a one-line answer is fine; it must be one line
            found.rows[name] = f"answer: {str(answer).splitlines()[0][:120]}"
            with contextlib.suppress(Exception):
                explorer.off(name)
            continue
        except Exception as error:
            found.raw_exception = f"on({name!r}): {one_line(error)}"
            with contextlib.suppress(Exception):
                explorer.reset()
            continue
        kernels = sum(now.is_kernel for now in running)
        reasons = {now.reason for now in running if not now.is_kernel and now.reason}
        reason = next(iter(reasons), "")
        if reason.startswith("No ") and "): " in reason:  # "No kernel for 'x' can run here (cpu, ...): why"
            reason = reason.split("): ", 1)[1]
        found.rows[name] = f"{kernels}/{len(running)} on" + (f" ({reason[:160]})" if reason else "")
        error = (got - base).abs().max().item() / scale if got.shape == base.shape else float("inf")
        found.errors[name] = error
        states = {found_.state for _, found_ in row.candidates}
        said = State.WRONG_RESULTS in states or any(
            now.note.startswith(State.WRONG_RESULTS.value) for now in running
        )
        if kernels and not error <= 1e-3 and not said:  # float32: kernels differ by rounding only
            found.silently_wrong.append(f"{name} ({error:.2g})")
    try:
        with warnings.catch_warnings(), quiet:
            warnings.simplefilter("ignore")
            for row in inventory.rows:
                with contextlib.suppress(KernelExplorerError):
                    explorer.on(row.group.name)
            _logits(model, tokens)
            explorer.reset()
            found.restored = bool(torch.equal(_logits(model, tokens), base))
    except Exception as error:
        found.raw_exception = found.raw_exception or f"all on/off: {one_line(error)}"
    found.seconds = time.perf_counter() - start
    return found


def sweep(model_types: list[str] | None = None) -> list[Swept]:
    return [sweep_one(t) for t in (model_types if model_types is not None else hooked_architectures())]


def table(results: list[Swept]) -> str:
    """architecture, rows (what on left), states, largest relative error per row, restore."""
    lines = []
    for r in results:
        if not r.built or (r.raw_exception and not r.rows):
            lines.append(f"{r.model_type:28} {r.why_not or r.raw_exception}")
            continue
        rows = "; ".join(
            f"{name}: {what}, {r.states.get(name, '?')}"
            + (f", err {r.errors[name]:.1e}" if name in r.errors else "")
            for name, what in r.rows.items()
        )
        restore = {True: "restored bitwise", False: "NOT RESTORED", None: "-"}[r.restored]
        extra = f" RAW: {r.raw_exception}" if r.raw_exception else ""
        wrong = f" SILENTLY WRONG: {', '.join(r.silently_wrong)}" if r.silently_wrong else ""
        lines.append(f"{r.model_type:28} {restore:17} {r.seconds:5.1f}s  {rows}{extra}{wrong}")
    built = sum(r.built for r in results)
    ran = sum(r.built and r.restored is not None for r in results)
    lines.append(f"{len(results)} architectures, {built} built, {ran} ran to the end")
    return "\n".join(lines)


__all__ = ["HOOKS", "Swept", "hooked_architectures", "sweep", "sweep_one", "table", "tiny_config"]
