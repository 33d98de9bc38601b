"""Where SmolLM2's time goes, what the kernel layers (attention included) predict, and what they realize.

One run: the time breakdown of a 512-token prefill and a decode step (how long it takes is a
target: < 5 s), each kernel layer's speedup on captured activations (`compare`), Amdahl's
predicted model speedup from the two, then `compare_model` with every bundled kernel on (attention
included) against all-PyTorch: the realized prefill speedup with its interval next to the
predicted one, and the outputs' agreement (KL, top-1, greedy generation).

Targets (issue 18): prefill >= 1.05x with top-1 >= 0.999 and identical greedy generation; the
predicted speedup within 3 percentage points of the realized one; breakdown < 5 s.

    python bench/time_breakdown.py [--tokens 512] [--pairs 7]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--pairs", type=int, default=7)
    args = parser.parse_args()

    import torch

    from kernel_explorer import Explorer
    from kernel_explorer.loading import load_default_model
    from kernel_explorer.views.breakdown_chart import covered_line

    model, tokenizer = load_default_model(progress=False)
    explorer = Explorer(model, tokenizer=tokenizer)
    print(f"ATen CPU capability {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads")
    start = time.perf_counter()
    explorer.breakdown(tokens=args.tokens)
    print(
        f"breakdown of a {args.tokens}-token prefill and a decode step: {time.perf_counter() - start:.1f} s"
    )
    ids = torch.randint(
        0, model.config.vocab_size, (1, args.tokens), generator=torch.Generator().manual_seed(0)
    )
    explorer.capture(ids)  # the layers' speedups at the breakdown's length: Amdahl needs both from one shape
    explorer.compare(*explorer.layers, pairs=args.pairs)
    log = explorer.results
    summary = log.breakdown_summary("prefill")
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print(covered_line(log))
    predicted = summary[summary.category == "every measured kernel on"].model_speedup_predicted.iloc[0]
    ids = torch.randint(
        0, model.config.vocab_size, (1, args.tokens), generator=torch.Generator().manual_seed(0)
    )
    with explorer.using():
        handle = explorer.compare_model(
            inputs={"input_ids": ids}, lengths=(args.tokens,), decode_tokens=32, pairs=args.pairs
        )
    handle.wait()
    models = log.model_summary()
    row = models[(models.measure == "prefill") & (models.tokens == args.tokens)].iloc[-1]
    print(
        f"prefill {args.tokens}: realized {row.speedup:.3f}x [{row.speedup_low:.3f}, {row.speedup_high:.3f}] "
        f"({row.verdict}); predicted from the layers {predicted:.3f}x; "
        f"difference {100 * (predicted - row.speedup):+.1f} percentage points"
    )
    decode = models[models.measure == "decode"]
    if not decode.empty:
        d = decode.iloc[-1]
        print(f"decode: {d.speedup:.3f}x [{d.speedup_low:.3f}, {d.speedup_high:.3f}] ({d.verdict})")
    agreement = log.records("model_agreement")[-1].values
    greedy = "identical" if agreement.first_divergence is None else f"differs at {agreement.first_divergence}"
    print(
        f"KL {agreement.kl:.2e}, top-1 {agreement.top1_agreement:.4f}, "
        f"greedy {agreement.greedy_tokens} tokens: {greedy}"
    )


if __name__ == "__main__":
    main()
