"""SmolLM2 with every bundled kernel on, its Linear layers on the quantized kernels, against all-PyTorch fp32.

The default model's decoder Linear weights are Q4_1 in its GGUF checkpoint and its tied
embedding/lm_head Q8_0, so `extend` gives the decoder Linears the Q4_1 kernel and lm_head the Q8_0
one: the same weights PyTorch runs, read as 4.5 and 8.5 bits instead of 32. One run, interleaved
pairs (`compare_model`): prefill at 512 tokens and greedy decode of 64 new tokens after a
128-token prompt, tokens/s speedup medians with their intervals; then logits agreement (KL, top-1)
and greedy generations of 32 tokens on three prompts, identical or not. Weight bytes read per
decoded token are printed for each side.

Targets (issue 19): decode >= 2.5x all-PyTorch fp32; prefill >= 1.0x; identical 32-token greedy
generations on 3 prompts; top-1 agreement >= 0.999.

    python bench/quantized_model.py [--pairs 5] [--decode-pairs 3]

An AVX2 host is emulated with `KERNEL_EXPLORER_ISA=avx2` (bench/isa_env.py caps eager PyTorch's
ISA too), one without AVX-VNNI with `KERNEL_EXPLORER_NO_VNNI=1` as well.
"""

from __future__ import annotations

import argparse

import isa_env  # first: the AVX2 emulation, set before torch is imported

PROMPTS = (
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain why the sky is blue in one sentence.",
)
TEXT = (
    "The history of computing is a story of abstraction: each generation of engineers built tools "
    "that hid the details of the machine below, so that the next could think in larger pieces. "
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--decode-pairs", type=int, default=3)
    args = parser.parse_args()

    import torch
    from torch import nn

    from kernel_explorer import Explorer
    from kernel_explorer.loading import load_default_model

    model, tokenizer = load_default_model(progress=False)
    explorer = Explorer(model, tokenizer=tokenizer)
    explorer.extend("Linear", nn.Linear, "model.layers.*")
    explorer.extend("LMHead", nn.Linear, "lm_head")
    layers = [name for name in explorer.layers if name not in ("Linear", "LMHead")]
    ids = tokenizer(TEXT * 8, return_tensors="pt").input_ids[:, :128]
    from kernels import get_local_kernel

    from kernel_explorer.build.bundled import bundled_repo_path

    quantized = get_local_kernel(bundled_repo_path("quantized_linear"))
    print(
        f"{isa_env.describe(quantized.isa())}, int8 dot {quantized.int8_dot()}; "
        f"{torch.get_num_threads()} threads; prompt {ids.shape[1]} tokens"
    )

    def all_on() -> None:
        for name in layers:
            explorer.on(name)
        explorer.on("Linear", candidate="bundled/quantized_linear:Q4_1Linear")
        explorer.on("LMHead", candidate="bundled/quantized_linear:Q8_0Linear")

    all_on()
    print("running:", ", ".join(sorted({f"{n.layer_name}: {n.repository}" for n in explorer.running()})))
    fp32_bytes = sum(m.weight.numel() * 4 for m in model.modules() if isinstance(m, nn.Linear))
    packed = sum(m._kernel_packed.nbytes for m in model.modules() if hasattr(m, "_kernel_packed"))
    handle = explorer.compare_model(
        inputs={"input_ids": ids},
        lengths=(512,),
        decode_tokens=64,
        pairs=args.pairs,
        decode_pairs=args.decode_pairs,
    )
    handle.wait()
    summary = explorer.results.model_summary()
    columns = ["measure", "tokens", "pairs", "speedup", "speedup_low", "speedup_high", "verdict"]
    print(summary[[c for c in columns if c in summary.columns]].to_string(index=False))
    agreement = explorer.results.to_pandas("model_agreement")
    if not agreement.empty:
        print(agreement[["kl", "top1_agreement", "greedy_tokens", "first_divergence"]].to_string(index=False))
    if packed:
        print(
            f"Linear weight bytes read per decoded token: PyTorch fp32 {fp32_bytes / 1e6:.0f} MB, "
            f"kernels {packed / 1e6:.0f} MB ({fp32_bytes / packed:.1f}x fewer)"
        )
    same = 0
    for prompt in PROMPTS:
        chat = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            kernel = model.generate(chat, max_new_tokens=32, do_sample=False)
            explorer.reset()
            pytorch = model.generate(chat, max_new_tokens=32, do_sample=False)
            all_on()
        same += torch.equal(kernel, pytorch)
        print(
            f"  greedy 32 tokens, {prompt!r}: {'identical' if torch.equal(kernel, pytorch) else 'DIFFERENT'}"
        )
    print(f"identical greedy generations: {same} of {len(PROMPTS)}")
    explorer.reset()


if __name__ == "__main__":
    main()
