"""SmolLM2 from its GGUF file against llama.cpp on the same file: prefill and greedy decode, side by side.

The default model (`kernel_explorer.load_default_model()`, SmolLM2-135M-Instruct converted from
`SmolLM2-135M-Instruct.Q4_1.gguf`) runs five ways in one process, in interleaved rounds (each
round runs every side once, the order rotating):

- eager PyTorch (float32, SDPA, Transformers' dynamic cache),
- eager + kernels: every bundled kernel on, the decoder Linears on the Q4_1 kernel and lm_head on
  Q8_0 (the GGUF's own formats, as bench/quantized_model.py switches them), attention on the
  bundled flash_attn's direct `attention_forward`,
- compiled PyTorch and compiled + kernels: `torch.compile` over the model's forward with a static
  KV cache (bench/compiled_decode.py: one graph per shape bucket, compiled before the rounds),
- compiled + GEMV/attn kernels: the same with only the quantized Linears and attention on kernels,
  RMSNorm, SiLU and rotary left to Inductor, which fuses each with its neighbours (a kernel's op is
  opaque to it); `--gemv-attn-side no` leaves it out,
- llama.cpp (llama-cpp-python) on the very GGUF file, when `llama_cpp` is importable, as it runs by
  default (ggml's extra buffer types: AMX tiles and repacked weights where the CPU has them). Where
  its batches crash on those (an AVX-512/AMX VM did), decode is measured on them with the prompt fed
  one token at a time, and llama.cpp also runs without them ("plain buffers"), the only way its
  prefill runs there; each side then gets a ratio to each.

Measured: prefill of 512 tokens (tokens/s) and greedy decode of 64 tokens after a 128-token prompt
(64 one-token steps, tokens/s), medians with their intervals over the rounds (min..max when the
rounds are too few for 95%), each side's ratio to llama.cpp per round. The decode bound: the weight
bytes a token reads (Linear weights: float32 for PyTorch, the packed blocks for the kernels and
llama.cpp) over this machine's copy bandwidth measured in the same run: the run's best copy, and
the copy measured just before each round's decodes (a share per round, with its interval). Then
agreement: greedy tokens of compiled + kernels against the same kernel model uncompiled on 3
prompts, and the last-token logits' KL and top-1 against eager PyTorch.

    python bench/decode_anchor.py [--rounds 5] [--threads 2] [--no-compile] [--no-llama] [--int8-passes 1]
                                  [--cpp-wrapper] [--gemv-attn-side no] [--model smollm2-1.7b-random]

`--cpp-wrapper` compiles every compiled side with Inductor's C++ wrapper (the graph's kernel calls
from generated C++, not Python). On the Zen 4 host it read no faster and compiled ~20x longer
(`bench/results/decode_anchor-zen4-cpp-wrapper-2026-12-06.txt`).

llama.cpp is not a dependency of the package or its tests. To build it from source (about 10
minutes on 2 cores), in the project's environment:

    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \\
        pip install llama-cpp-python typing_extensions numpy diskcache jinja2

An AVX2 host is emulated with `KERNEL_EXPLORER_ISA=avx2` (bench/isa_env.py caps eager PyTorch's
and Inductor's ISA too). llama.cpp keeps the ISA it was built for, which the header says; for
llama.cpp on AVX2 too, build its library without AVX-512 from the source llama-cpp-python ships
(`pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`, then in the unpacked
`vendor/llama.cpp`) and point `LLAMA_CPP_LIB_PATH` at it (about 4 minutes on 2 cores):

    cmake -S . -B /tmp/llama-avx2 -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
        -DGGML_AVX512=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
    cmake --build /tmp/llama-avx2 -j2 --target llama
    KERNEL_EXPLORER_ISA=avx2 LLAMA_CPP_LIB_PATH=/tmp/llama-avx2/bin python bench/decode_anchor.py
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from collections.abc import Callable
from typing import Any

import isa_env  # first: the AVX2 emulation, set before torch is imported
from quantized_model import PROMPTS, TEXT  # the same prompts and prefill text as the quantized bench
from threads import use_threads

PREFILL, PROMPT, DECODE = 512, 128, 64
KERNELS, LEAN = "compiled + kernels", "compiled + GEMV/attn kernels"
UNBATCHED = "compiled + kernels, unbatched"  # without the kernels' graph passes (sibling GEMVs batched)
MODELS = ("smollm2-135m", "smollm2-1.7b-random")


def copy_bandwidth(threads: int, copies: int = 15) -> float:
    """GB/s of a 256 MB float32 copy (bytes read + written), the best of `copies` (a bound: on a
    shared host the median reads the other jobs' load, 2.1 GB/s once at load 10 on 2 CPUs)."""
    import torch

    a = torch.ones(64 * 2**20)
    b = torch.empty_like(a)
    times = []
    for _ in range(copies + 1):
        t0 = time.perf_counter()
        b.copy_(a)
        times.append(time.perf_counter() - t0)
    return 2 * a.nbytes / min(times[1:]) / 1e9


class Side:
    """One way of running the model: prefill(ids) and decode(prompt) return seconds (prefill None:
    not measurable on this side)."""

    def __init__(self, name: str, prefill: Callable[[], float] | None, decode: Callable[[], float]) -> None:
        self.name, self.prefill, self.decode = name, prefill, decode
        self.times: dict[str, list[float]] = {"prefill": [], "decode": []}


def torch_sides(
    model,
    kmodel,
    ids512,
    ids128,
    compiled: bool,
    decoders: dict,
    *,
    eager_sides: bool = True,
    compiled_pytorch: bool = True,
    lean=None,
    cpp_wrapper: bool = False,
    unbatched: bool = False,
) -> list[Side]:
    """The four PyTorch sides (without the eager two when not `eager_sides`, without compiled
    PyTorch when not `compiled_pytorch`), compiled `lean` (the GEMV/attention kernel model) when
    given, and the kernel model compiled without its kernels' graph passes when `unbatched`; the
    compiled sides' short decoders go in `decoders`, by side name."""
    import torch
    from compiled_decode import StaticDecoder
    from transformers import DynamicCache

    def eager(m) -> tuple[Callable[[], float], Callable[[], float]]:
        def prefill() -> float:
            with torch.no_grad():
                t0 = time.perf_counter()
                cache = DynamicCache(config=m.config)
                m(input_ids=ids512, past_key_values=cache, use_cache=True, logits_to_keep=1)
                return time.perf_counter() - t0

        def decode() -> float:
            cache = DynamicCache(config=m.config)
            with torch.no_grad():
                logits = m(input_ids=ids128, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
                token = logits[:, -1].argmax(-1, keepdim=True)
                t0 = time.perf_counter()
                for _ in range(DECODE):
                    out = m(input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1)
                    token = out.logits[:, -1].argmax(-1, keepdim=True)
                return time.perf_counter() - t0

        return prefill, decode

    def static(m, name: str) -> tuple[Callable[[], float], Callable[[], float]]:
        passes = name != UNBATCHED
        long = StaticDecoder(m, PREFILL + 8, compiled=True, cpp_wrapper=cpp_wrapper, graph_passes=passes)
        short = StaticDecoder(
            m, PROMPT + DECODE + 8, compiled=True, cpp_wrapper=cpp_wrapper, graph_passes=passes
        )
        t0 = time.perf_counter()
        long.prefill(ids512)
        first = short.prefill(ids128).argmax(-1, keepdim=True)
        short.decode(first, PROMPT, 3)
        took = ", ".join(f"{k} {v:.0f} s" for d in (long, short) for k, v in d.compile_s.items())
        print(f"  {name}: compiled {took} ({time.perf_counter() - t0:.0f} s in all)", flush=True)
        for offered in short.graph_passes:
            batched = getattr(offered.graph_pass, "batched", None)
            said = (
                f": decode step, {len(batched)} groups of calls batched ({sum(batched)} calls)"
                if batched
                else ""
            )
            print(f"    graph pass {offered}{said}", flush=True)
        for refused in short.passes_left_out:
            print(f"    graph pass left out: {refused}", flush=True)

        decoders[name] = short

        def prefill() -> float:
            t0 = time.perf_counter()
            long.prefill(ids512)
            return time.perf_counter() - t0

        def decode() -> float:
            first = short.prefill(ids128).argmax(-1, keepdim=True)
            t0 = time.perf_counter()
            short.decode(first, PROMPT, DECODE + 1)  # 64 one-token steps
            return time.perf_counter() - t0

        return prefill, decode

    sides = (
        [Side("eager PyTorch", *eager(model)), Side("eager + kernels", *eager(kmodel))] if eager_sides else []
    )
    if compiled:
        print("compiling (each side: prefill 512, prefill 128, decode step) ...", flush=True)
        named = [("compiled PyTorch", model)] if compiled_pytorch else []
        named += [(KERNELS, kmodel)] + ([(UNBATCHED, kmodel)] if unbatched else [])
        named += [(LEAN, lean)] if lean is not None else []
        sides += [Side(name, *static(m, name)) for name, m in named]
    return sides


def _extra_buffer_types_run(gguf, threads: int) -> bool:
    """Whether llama.cpp evaluates a batch on its default buffer types, tried in a child process
    (a crash there would end this one)."""
    import subprocess
    import sys

    code = (
        "import sys, llama_cpp\n"
        "llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_batch=64, n_ubatch=64,\n"
        "                      n_threads=int(sys.argv[2]), verbose=False)\n"
        "llm.eval(list(range(100, 164)))\n"
    )
    try:
        argv = [sys.executable, "-c", code, str(gguf), str(threads)]
        run = subprocess.run(argv, capture_output=True, timeout=300)
    except subprocess.TimeoutExpired:
        return False
    return run.returncode == 0


def _llama(gguf, threads: int, extra_buffers: bool):  # type: ignore[no-untyped-def]
    """A llama_cpp.Llama on the file; `extra_buffers=False` without ggml's extra buffer types."""
    import llama_cpp
    import llama_cpp.llama_cpp as low_level  # what llama_cpp.Llama reads its defaults from

    default_params = low_level.llama_model_default_params

    def params():  # type: ignore[no-untyped-def]
        p = default_params()
        p.use_extra_bufts = extra_buffers
        return p

    low_level.llama_model_default_params = params
    try:
        return llama_cpp.Llama(
            model_path=str(gguf),
            n_ctx=1024,
            n_batch=PREFILL,
            n_ubatch=PREFILL,
            n_threads=threads,
            n_threads_batch=threads,
            logits_all=False,
            verbose=False,
        )
    finally:
        low_level.llama_model_default_params = default_params


def _llama_side(name: str, llm, ids512, ids128, batches: bool) -> Side:  # type: ignore[no-untyped-def]
    """`batches=False`: the prompt goes in one token at a time and prefill is not measured (its
    batches crash this process)."""
    import numpy as np

    long, short = ids512[0].tolist(), ids128[0].tolist()

    def last_token() -> int:
        # the context's own logits of the last token evaluated (llm.scores is only filled with
        # logits_all=True, which would compute lm_head for all 512 prefill tokens)
        return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))))

    def prefill() -> float:
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(long)
        return time.perf_counter() - t0

    def decode() -> float:
        llm.reset()
        if batches:
            llm.eval(short)
        else:
            for token in short:
                llm.eval([token])
        token = last_token()
        t0 = time.perf_counter()
        for _ in range(DECODE):
            llm.eval([token])
            token = last_token()
        return time.perf_counter() - t0

    if batches:
        prefill()
    decode()
    side = Side(name, prefill if batches else None, decode)
    side.llm = llm
    return side


def llama_sides(gguf, threads: int, ids512, ids128) -> list[Side]:
    """llama.cpp as it runs by default (its extra buffer types: AMX tiles, repacked weights where
    the CPU and the formats have them), and, where a batch crashes on those, also without them."""
    try:
        import llama_cpp
    except ImportError:
        print("llama.cpp: llama_cpp is not importable; build it as the module docstring says")
        return []
    info = llama_cpp.llama_print_system_info().decode()
    print(f"llama.cpp: llama-cpp-python {llama_cpp.__version__}, {info}")
    if _extra_buffer_types_run(gguf, threads):
        return [_llama_side("llama.cpp (same GGUF)", _llama(gguf, threads, True), ids512, ids128, True)]
    # Where a batch crashes the process on the extra buffer types (a segfault on an AVX-512/AMX VM,
    # 2026-12-05) single tokens still run on them, and they are what decides llama.cpp's decode
    # there (twice the speed without them): decode is measured on them with the prompt fed one
    # token at a time, prefill only without them.
    print(
        "llama.cpp: a 64-token batch crashed on its extra buffer types (AMX, repack): decode is measured on "
        "them with the prompt fed token by token, prefill only without them"
    )
    return [
        _llama_side("llama.cpp, extra buffers", _llama(gguf, threads, True), ids512, ids128, False),
        _llama_side("llama.cpp, plain buffers", _llama(gguf, threads, False), ids512, ids128, True),
    ]


def report(
    sides: list[Side], bytes_per_token: dict[str, float], bandwidth: float, round_bandwidths: list[float]
) -> None:
    """The ratios, and each side's share of the decode bound twice: against the run's best copy
    (`bandwidth`) and, per round, against the copy bandwidth measured just before that round's
    decodes (on a shared guest it moved from 29 to 52 GB/s between runs, so a share against one
    moment's bandwidth says as much about the moment as about the side)."""
    from kernel_explorer.measure.stats import median_interval, speedup_interval

    anchors = [s for s in sides if s.name.startswith("llama.cpp")]
    # the explorer's compare_model(compiled=True) ratio, to hold against it (bench/compare_large.py)
    pytorch = next((s for s in sides if s.name == "compiled PyTorch"), None)
    unbatched = next((s for s in sides if s.name == UNBATCHED), None)  # what the graph passes gain
    for measure, tokens in (("prefill", PREFILL), ("decode", DECODE)):
        what = f"{PREFILL} tokens" if measure == "prefill" else f"{DECODE} tokens after {PROMPT}"
        print(f"\n{measure} {what}: tokens/s median [interval]")
        for side in sides:
            if not side.times[measure]:
                print(f"  {side.name:30} not measured (its batches crash here)")
                continue
            rates = [tokens / t for t in side.times[measure]]
            iv = median_interval(rates)
            line = f"  {side.name:30} {iv.median:8.1f} [{iv.low:7.1f}, {iv.high:7.1f}]"
            if iv.too_few:
                line += f" ({iv.confidence:.0%})"
            for anchor in anchors:
                if side is anchor or side.name.startswith("llama.cpp") or not anchor.times[measure]:
                    continue
                pairs = zip(anchor.times[measure], side.times[measure], strict=True)
                ratio = speedup_interval([a / s for a, s in pairs])
                label = "llama.cpp" if len(anchors) == 1 else anchor.name.removeprefix("llama.cpp, ")
                line += f"   {ratio.median:5.2f}x {label} [{ratio.low:.2f}, {ratio.high:.2f}]"
            if pytorch is not None and side.name in (KERNELS, UNBATCHED, LEAN) and pytorch.times[measure]:
                pairs = zip(pytorch.times[measure], side.times[measure], strict=True)
                ratio = speedup_interval([a / s for a, s in pairs])
                line += f"   {ratio.median:5.2f}x compiled PyTorch [{ratio.low:.2f}, {ratio.high:.2f}]"
            if unbatched is not None and side.name == KERNELS and unbatched.times[measure]:
                pairs = zip(unbatched.times[measure], side.times[measure], strict=True)
                ratio = speedup_interval([a / s for a, s in pairs])
                line += f"   {ratio.median:5.2f}x unbatched [{ratio.low:.2f}, {ratio.high:.2f}]"
            if measure == "decode" and side.name in bytes_per_token:
                weights = bytes_per_token[side.name]
                limit = bandwidth * 1e9 / weights
                line += (
                    f"   bound {limit:6.0f} tok/s ({weights / 1e6:.0f} MB/token), at {iv.median / limit:.0%}"
                )
                shares = [
                    rate * weights / (gbs * 1e9) for rate, gbs in zip(rates, round_bandwidths, strict=True)
                ]
                share = median_interval(shares)
                line += f"; per round {share.median:.0%} [{share.low:.0%}, {share.high:.0%}]"
            print(line)
    if round_bandwidths:
        bw = median_interval(round_bandwidths)
        print(
            f"\ncopy bandwidth before each round's decodes (best of 3): {bw.median:.1f} GB/s "
            f"[{bw.low:.1f}, {bw.high:.1f}]; the run's best: {bandwidth:.1f} GB/s"
        )


def _llama_last_logits(llm, ids) -> Any:  # type: ignore[no-untyped-def]
    """llama.cpp's logits of the prompt's last token (float64)."""
    import numpy as np
    import torch

    llm.reset()
    llm.eval(ids[0].tolist())
    logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
    return torch.from_numpy(logits.astype(np.float64))


def agreement(model, kmodel, tokenizer, candidate, llm=None, *, text: bool = True) -> None:  # type: ignore[no-untyped-def]
    """candidate: the compiled + kernels side's decoder (its decode graph; each prompt's prefill
    runs eagerly, a one-off length), against the same kernel model uncompiled. `llm`: llama.cpp's
    last-token logits against the float model too. `text=False` (random weights): no text, and no
    eager float generation to compare it with."""
    import torch
    from compiled_decode import StaticDecoder, eager_generate

    print("\nagreement (3 prompts, 32 greedy tokens):")
    compiled = candidate.compiled
    reference = StaticDecoder(kmodel, candidate.max_cache_len, compiled=False)
    same = 0
    for prompt in PROMPTS:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )["input_ids"]
        ours = candidate.generate(ids, 32, compiled_prefill=False)
        identical = torch.equal(ours, reference.generate(ids, 32))
        same += identical
        with torch.no_grad():
            p = torch.log_softmax(model(ids, logits_to_keep=1).logits[0, -1].double(), -1)
            q = torch.log_softmax(kmodel(ids, logits_to_keep=1).logits[0, -1].double(), -1)
        kl = torch.sum(p.exp() * (p - q)).item()
        top1 = bool(p.argmax() == q.argmax())
        line = (
            f"  {prompt!r}: {'compiled' if compiled else 'eager'} kernels "
            f"{'identical to' if identical else 'DIFFERENT from'} uncompiled kernels; "
            f"last-token KL vs eager PyTorch {kl:.1e}, top-1 {'same' if top1 else 'DIFFERENT'}"
        )
        if llm is not None:
            r = torch.log_softmax(_llama_last_logits(llm, ids), -1)
            line += (
                f"; llama.cpp KL {torch.sum(p.exp() * (p - r)).item():.1e}, "
                f"top-1 {'same' if bool(p.argmax() == r.argmax()) else 'DIFFERENT'}"
            )
        if text:
            eager_same = torch.equal(eager_generate(model, ids, 32), ours)
            words = tokenizer.decode(ours[0, ids.shape[1] :])
            line += f"; {'same' if eager_same else 'different'} text as eager PyTorch: {words!r}"
        print(line)
    print(f"identical greedy generations (compiled + kernels vs uncompiled): {same} of {len(PROMPTS)}")


def breakdown(kmodel, decoders: dict, llm, ids128, steps: int, packed: int, bandwidth: float) -> None:  # type: ignore[no-untyped-def]
    """Where a decode step's time goes (bench/decode_breakdown.py), for each compiled kernel side and
    llama.cpp, and the step's quantized GEMVs replayed alone against the bandwidth bound."""
    from decode_breakdown import gemv_replay, llama_step_breakdown, torch_step_breakdown

    print(f"\nwhere a decode step's time goes (after {PROMPT} tokens; load {os.getloadavg()[0]:.1f}):")
    for name, decoder in decoders.items():
        if name == "compiled PyTorch":
            continue
        first = decoder.prefill(ids128).argmax(-1, keepdim=True)
        print("\n".join(torch_step_breakdown(decoder, first, PROMPT, steps, side=name).lines()))
    if llm is not None:
        print("\n".join(llama_step_breakdown(llm, ids128[0].tolist(), 2 * steps).lines()))
    gemv_ms, total = gemv_replay(kmodel)
    bound_ms = total / (bandwidth * 1e9) * 1e3
    print(
        f"  the step's {total / 1e6:.0f} MB of quantized GEMVs alone, in model order: {gemv_ms:.2f} ms "
        f"({total / gemv_ms / 1e6:.1f} GB/s; streaming them at the copy bandwidth: {bound_ms:.2f} ms)"
    )
    print(f"  load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--no-llama", action="store_true")
    parser.add_argument(
        "--model",
        choices=MODELS,
        default=MODELS[0],
        help="the default model (SmolLM2-135M-Instruct's GGUF), or a model of SmolLM2-1.7B's shapes with "
        "random weights (bench/large_model.py: built once into the cache, a few minutes)",
    )
    parser.add_argument(
        "--eager",
        choices=["yes", "no", "auto"],
        default="auto",
        help="the eager sides (eager PyTorch, eager + kernels); auto: on the 135M model only",
    )
    parser.add_argument(
        "--compiled-pytorch",
        choices=["yes", "no", "auto"],
        default="auto",
        help="the compiled PyTorch side (float32: 6.8 GB a token on the 1.7B); auto: on the 135M model only",
    )
    parser.add_argument(
        "--breakdown-steps",
        type=int,
        default=16,
        help="decode steps profiled for the per-token breakdown (bench/decode_breakdown.py); 0: none",
    )
    parser.add_argument(
        "--int8-passes",
        type=int,
        choices=[0, 1, 2],
        help="the kernel Linears' int8 passes (quantized_linear.layers.use_int8_gemm) for prefill and "
        "decode alike: 1 is GGML's way (decode then runs the int8 GEMV); default: the layers' own "
        "(two int8 passes for float32, decode on the GEMV layouts, Q4_1's and lm_head's Q8_0)",
    )
    parser.add_argument(
        "--gemv-attn-side",
        choices=["yes", "no"],
        default="yes",
        help="a compiled side with only the quantized Linears and attention on kernels (RMSNorm, SiLU and "
        "rotary left to Inductor's fusion)",
    )
    parser.add_argument(
        "--unbatched-side",
        choices=["yes", "no"],
        default="yes",
        help="the kernel model also compiled without its kernels' graph passes (quantized_linear's batching "
        "of a layer's q/k/v and gate/up GEMVs into one call each), to measure what they gain in the same run",
    )
    parser.add_argument(
        "--cpp-wrapper",
        action="store_true",
        help="every compiled side on Inductor's C++ wrapper (kernel calls from C++; a slower first compile)",
    )
    args = parser.parse_args()

    import platform

    import torch
    from compiled_decode import kernel_model
    from kernels import get_local_kernel
    from torch import nn

    from kernel_explorer.build.bundled import bundled_repo_path
    from kernel_explorer.loading import default_model_gguf, load_default_model

    # Inductor's C++ kernels named in the profiler (a RECORD_FUNCTION each, a few ns when it is off):
    # without it the breakdown reads their time as dispatch
    torch._inductor.config.cpp.enable_kernel_profile = args.breakdown_steps > 0
    threads = use_threads(args.threads)
    large = args.model != MODELS[0]
    if large:
        import large_model

        gguf = large_model.build(args.threads)
        _, tokenizer = load_default_model(progress=False)  # the same vocabulary (49152 tokens)
        # two instances over one mapped file: the float pages are shared, not copied
        model, kmodel = large_model.load(args.threads), large_model.load(args.threads)
    else:
        gguf = default_model_gguf()
        model, tokenizer = load_default_model(progress=False)
        model.eval()
        kmodel = copy.deepcopy(model)
    explorer = kernel_model(kmodel, tokenizer)
    lean = None
    if args.gemv_attn_side == "yes" and not args.no_compile:
        lean = large_model.load(args.threads) if large else copy.deepcopy(model)
        kernel_model(lean, tokenizer, elementwise=False)
    quantized = get_local_kernel(bundled_repo_path("quantized_linear"))
    if args.int8_passes is not None:
        for module in [*kmodel.modules(), *(lean.modules() if lean is not None else ())]:
            if isinstance(module, nn.Linear):
                quantized.layers.use_int8_gemm(module, args.int8_passes)
    with open("/proc/cpuinfo") as info:
        cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "?")
    print(f"host: {cpu}, {os.cpu_count()} CPUs, {platform.machine()}; torch {torch.__version__}")
    billions = sum(p.numel() for p in model.parameters()) / 1e9
    print(f"model: {args.model} ({gguf.name}), {billions:.2f}B parameters")
    if large:
        print(
            large_model.packed_blocks_match(kmodel, gguf, ("blk.0.ffn_down.weight", "blk.23.ffn_up.weight"))
        )
    print(threads)
    print(f"{isa_env.describe(quantized.isa())}, int8 dot {quantized.int8_dot()}")
    passes = "the layers' default" if args.int8_passes is None else args.int8_passes
    wrapper = "C++" if args.cpp_wrapper else "Python"
    print(f"kernel Linears' int8 passes: {passes}; Inductor's {wrapper} wrapper")
    running = sorted({f"{n.layer_name}: {n.kernel_id}" for n in explorer.running() if n.is_kernel})
    print("kernels:", ", ".join(running), "; attention:", kmodel.config._attn_implementation)
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    ids512 = tokenizer(TEXT * 20, return_tensors="pt").input_ids[:, :PREFILL]
    ids128 = ids512[:, :PROMPT]
    assert ids512.shape[1] == PREFILL

    fp32 = sum(m.weight.numel() * 4 for m in model.modules() if isinstance(m, nn.Linear))
    packed = sum(m._kernel_packed.nbytes for m in kmodel.modules() if hasattr(m, "_kernel_packed"))
    bytes_per_token = {
        "eager PyTorch": fp32,
        "compiled PyTorch": fp32,
        "eager + kernels": packed,
        KERNELS: packed,
        LEAN: packed,
        UNBATCHED: packed,
    }
    decoders: dict = {}
    eager_sides = args.eager == "yes" or (args.eager == "auto" and not large)
    compiled_pytorch = args.compiled_pytorch == "yes" or (args.compiled_pytorch == "auto" and not large)
    sides = torch_sides(
        model,
        kmodel,
        ids512,
        ids128,
        not args.no_compile,
        decoders,
        eager_sides=eager_sides,
        compiled_pytorch=compiled_pytorch,
        lean=lean,
        cpp_wrapper=args.cpp_wrapper,
        unbatched=args.unbatched_side == "yes",
    )
    if not args.no_llama:
        sides += llama_sides(gguf, args.threads, ids512, ids128)
        bytes_per_token.update({s.name: packed for s in sides if s.name.startswith("llama.cpp")})
    bandwidth = copy_bandwidth(args.threads)
    print(f"copy bandwidth: {bandwidth:.1f} GB/s ({args.threads} threads, 256 MB float32 copy)")
    round_bandwidths = []
    for r in range(args.rounds):
        order = sides[r % len(sides) :] + sides[: r % len(sides)]
        for side in order:
            if side.prefill is not None:
                side.times["prefill"].append(side.prefill())
        round_bandwidths.append(copy_bandwidth(args.threads, copies=3))
        for side in order[::-1]:
            side.times["decode"].append(side.decode())
        print(f"  round {r + 1}/{args.rounds} done, load {os.getloadavg()[0]:.1f}", flush=True)
    report(sides, bytes_per_token, bandwidth, round_bandwidths)
    print(f"\nload average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    llm = next((s.llm for s in sides if s.name.startswith("llama.cpp") and s.prefill is not None), None)
    if args.breakdown_steps > 0:
        breakdown(kmodel, decoders, llm, ids128, args.breakdown_steps, packed, bandwidth)
    from compiled_decode import StaticDecoder

    agreement(
        model,
        kmodel,
        tokenizer,
        decoders.get(KERNELS) or StaticDecoder(kmodel, 256, compiled=False),
        llm,
        text=not large,
    )


if __name__ == "__main__":
    main()
