"""A model of SmolLM2-1.7B's shapes with seeded random weights, as a Q4_1 GGUF and as the float model
PyTorch runs from that very file: where the kernels decide a token (1.7B parameters, ~1.1 GB of
packed weights a token), not Python around them.

No download: the weights are drawn here (seeded, std 0.02 like a trained model's initializer,
RMSNorm weights near 1, so activations stay sane), written as an F16 GGUF tensor by tensor with the
`gguf` package (the default model's tokenizer metadata copied in: llama.cpp needs a vocabulary,
and SmolLM2's sizes share one of 49152 tokens), quantized to Q4_1 by llama.cpp's own quantizer
(`llama_cpp.llama_model_quantize`; the tied embedding / lm_head as Q8_0, as in the default model's
file), then dequantized tensor by tensor into one float32 file that PyTorch maps (copy-on-write):
the float weights are file pages the kernel model packs once and then leaves to the page cache,
so a second instance of the model (compiled PyTorch's side) shares them, and the process's own
memory holds little more than the packed blocks (~2.1 GB: GGML blocks and the GEMV layout).
Everything is cached under ~/.cache/kernel-explorer/models/smollm2-1.7b-random/; the F16 source
is deleted once quantized.

    from large_model import CONFIG, build, load
    gguf_path = build()                 # the Q4_1 GGUF (built once: a few minutes, < 2 GB of memory)
    model = load()                      # LlamaForCausalLM, float32, weights mapped from the cache

Real SmolLM2-1.7B (HuggingFaceTB/SmolLM2-1.7B config.json): hidden 2048, 24 layers, 32 heads, 32
KV heads (no GQA), head_dim 64, intermediate 8192, vocab 49152, tied embeddings, rope_theta 130000,
rms_norm_eps 1e-5.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

NAME = "smollm2-1.7b-random"
SEED = 1729
STD = 0.02  # trained Llama-family weights' initializer_range
CONFIG: dict[str, Any] = {
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "head_dim": 64,
    "intermediate_size": 8192,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 130000.0,
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}
_FORMAT = 3  # bump when what is cached changes (3: q/k rows un-permuted the right way)


def cache_dir() -> Path:
    from kernel_explorer.build.cache import writable_cache_dir

    return writable_cache_dir("models") / NAME


def _gguf_tensors() -> list[tuple[str, tuple[int, ...]]]:
    """(GGUF name, numpy shape) in file order; 2-D shapes are PyTorch's (out_features, in_features)."""
    h, f, v = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["vocab_size"]
    kv = CONFIG["num_key_value_heads"] * CONFIG["head_dim"]
    out: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (v, h))]
    for i in range(CONFIG["num_hidden_layers"]):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", (h,)),
            (b + "attn_q.weight", (h, h)),
            (b + "attn_k.weight", (kv, h)),
            (b + "attn_v.weight", (kv, h)),
            (b + "attn_output.weight", (h, h)),
            (b + "ffn_norm.weight", (h,)),
            (b + "ffn_gate.weight", (f, h)),
            (b + "ffn_up.weight", (f, h)),
            (b + "ffn_down.weight", (h, f)),
        ]
    out.append(("output_norm.weight", (h,)))
    return out


def _draw(index: int, shape: tuple[int, ...]) -> np.ndarray:
    """Tensor `index`'s seeded weights: N(0, 0.02) for a matrix, 1 + N(0, 0.02) for a norm."""
    rng = np.random.default_rng([SEED, index])
    if len(shape) == 1:
        return (1.0 + STD * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    return (STD * rng.standard_normal(shape, dtype=np.float32)).astype(np.float16)


def _write_f16(path: Path, tokenizer_gguf: Path) -> None:
    """The F16 source GGUF, one tensor drawn and written at a time."""
    import gguf

    c = CONFIG
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("SmolLM2-1.7B shapes, random weights")
    writer.add_block_count(c["num_hidden_layers"])
    writer.add_context_length(c["max_position_embeddings"])
    writer.add_embedding_length(c["hidden_size"])
    writer.add_feed_forward_length(c["intermediate_size"])
    writer.add_head_count(c["num_attention_heads"])
    writer.add_head_count_kv(c["num_key_value_heads"])
    writer.add_rope_freq_base(c["rope_theta"])
    writer.add_layer_norm_rms_eps(c["rms_norm_eps"])
    writer.add_rope_dimension_count(c["head_dim"])
    writer.add_vocab_size(c["vocab_size"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    reader = gguf.GGUFReader(tokenizer_gguf)
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(field.name, field.contents(), kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(field.name, field.contents(), kind)
    tensors = _gguf_tensors()
    for name, shape in tensors:
        dtype = np.float32 if len(shape) == 1 else np.float16
        writer.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for index, (_, shape) in enumerate(tensors):
        writer.write_tensor_data(_draw(index, shape))
    writer.close()


def _quantize(source: Path, target: Path, threads: int) -> None:
    """llama.cpp's own quantizer: Q4_1 for the decoder's matrices, Q8_0 for the tied embedding
    (the default model's file has the same two formats)."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_1
    params.nthread = threads
    params.output_tensor_type = llama_cpp.GGML_TYPE_Q8_0
    params.token_embedding_type = llama_cpp.GGML_TYPE_Q8_0
    code = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    if code != 0:
        raise RuntimeError(f"llama_model_quantize failed ({code}) on {source}")


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """A q/k weight from llama.cpp's row order (convert_hf_to_gguf's `permute`: rotary pairs
    interleaved) back to Transformers' (halves). Whole rows move: Q4_1 blocks stay intact."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _hf_name(gguf_name: str) -> str:
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    _, layer, part, _ = gguf_name.split(".")
    names = {
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    return f"model.layers.{layer}.{names[part]}.weight"


def _write_float(gguf_path: Path, weights: Path, index: Path) -> None:
    """Every tensor of the quantized file dequantized (gguf's reference dequantizer) into one
    float32 file, tensor by tensor; the index says where each lies."""
    import gguf

    reader = gguf.GGUFReader(gguf_path)
    layout: dict[str, list[Any]] = {}
    offset = 0
    for t in reader.tensors:
        shape = [int(n) for n in reversed(t.shape.tolist())]
        layout[_hf_name(t.name)] = [offset, shape, t.tensor_type.name]
        offset += int(np.prod(shape)) * 4
    mapped = np.memmap(weights, dtype=np.float32, mode="w+", shape=(offset // 4,))
    heads = {"attn_q": CONFIG["num_attention_heads"], "attn_k": CONFIG["num_key_value_heads"]}
    for t in reader.tensors:
        start, shape, _ = layout[_hf_name(t.name)]
        w = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32, copy=False)
        part = t.name.split(".")[2] if t.name.startswith("blk.") else ""
        if part in heads:
            w = _unpermute(w, heads[part])
        mapped[start // 4 : start // 4 + w.size] = w.reshape(-1)
    mapped.flush()
    del mapped
    index.write_text(json.dumps({"format": _FORMAT, "tensors": layout}))


def build(threads: int = 2, *, verbose: bool = True) -> Path:
    """The Q4_1 GGUF (and the float file beside it), built once into the cache."""
    from kernel_explorer.loading import default_model_gguf

    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    q4, weights, index = folder / "model.Q4_1.gguf", folder / "weights.f32", folder / "index.json"
    if index.is_file() and json.loads(index.read_text()).get("format") == _FORMAT and q4.is_file():
        return q4
    t0 = time.perf_counter()
    source = folder / "model.F16.gguf"
    if not q4.is_file():
        _write_f16(source, default_model_gguf())
        if verbose:
            print(f"  {NAME}: F16 GGUF written ({source.stat().st_size / 1e9:.1f} GB)", flush=True)
        _quantize(source, q4.with_suffix(".partial"), threads)
        os.replace(q4.with_suffix(".partial"), q4)
        source.unlink()
        if verbose:
            print(f"  {NAME}: quantized to Q4_1 ({q4.stat().st_size / 1e9:.2f} GB)", flush=True)
    _write_float(q4, weights, index)
    if verbose:
        print(f"  {NAME}: built in {time.perf_counter() - t0:.0f} s under {folder}", flush=True)
    return q4


def load(threads: int = 2) -> Any:
    """The float32 LlamaForCausalLM of the cached file's weights (mapped copy-on-write, not read
    into the process's memory), SDPA attention, eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    build(threads)
    folder = cache_dir()
    layout = json.loads((folder / "index.json").read_text())["tensors"]
    mapped = np.memmap(folder / "weights.f32", dtype=np.float32, mode="c")
    state = {}
    for name, (offset, shape, _) in layout.items():
        n = int(np.prod(shape))
        state[name] = torch.from_numpy(mapped[offset // 4 : offset // 4 + n].reshape(shape))
    config = LlamaConfig(**CONFIG, torch_dtype="float32")
    config._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model.load_state_dict(state, strict=False, assign=True)
    model.lm_head.weight = model.model.embed_tokens.weight
    # the rotary tables were made on the meta device: make them again on the CPU
    rotary = type(model.model.rotary_emb)(config=config)
    model.model.rotary_emb = rotary
    left = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if left:
        raise RuntimeError(f"{NAME}: tensors left on the meta device: {left[:5]}")
    return model.eval()


def packed_blocks_match(
    model: Any, gguf_path: Path, names: tuple[str, ...] = ("blk.0.ffn_down.weight",)
) -> str:
    """Whether the kernel's own packing of the float weights gives back llama.cpp's Q4_1 blocks
    byte for byte (the two sides run the same weights), for `names` (not attn_q / attn_k, whose
    rows llama.cpp's file keeps in another order)."""
    import gguf
    import torch
    from kernels import get_local_kernel

    from kernel_explorer.build.bundled import bundled_repo_path

    ql = get_local_kernel(bundled_repo_path("quantized_linear"))
    reader = gguf.GGUFReader(gguf_path)
    tensors = {t.name: t for t in reader.tensors}
    params = dict(model.named_parameters())
    same = 0
    for name in names:
        packed = ql.quantize(params[_hf_name(name)].detach(), "q4_1")
        raw = torch.from_numpy(np.array(tensors[name].data).view(np.uint8).reshape(-1))
        same += bool(torch.equal(packed.reshape(-1), raw))
    return f"{same} of {len(names)} checked Q4_1 tensors packed byte for byte as llama.cpp's file"
