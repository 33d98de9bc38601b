"""The bundled attention kernel's code paths compared as candidates, on SmolLM2's own inputs.

A kernel built for several instruction sets runs the path its dispatch timed fastest here; the
explorer can put every path side by side as candidates of the model's attention row
(`bundled@<path>`), each pinned for its turn, on the attention inputs captured from a prompt of
`--tokens` tokens: interleaved pairs against PyTorch's sdpa, medians with their 95% intervals.

    python bench/attention_paths.py [--tokens 512] [--budget 12]
"""

from __future__ import annotations

import argparse
import os

TEXT = (
    "The history of computing is a story of abstraction: each generation of engineers built tools "
    "that hid the details of the machine below. "
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--budget", type=float, default=12.0, help="seconds of pairs per candidate at most")
    args = parser.parse_args()

    import torch

    import kernel_explorer as kx

    model, tokenizer = kx.load_default_model(progress=False)
    explorer = kx.Explorer(model, tokenizer=tokenizer)
    ids = tokenizer(TEXT * (args.tokens // 20 + 1), return_tensors="pt").input_ids[:, : args.tokens]
    explorer.capture(ids)
    attention = next(p for p in explorer.hardware.kernel_paths if p.repo == "flash_attn")
    words = ["bundled"] + [f"bundled@{path}" for path in attention.paths if path != "portable"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.1f}")
    print(f"prompt {ids.shape[1]} tokens; {attention.line()}")
    handle = explorer.compare("attention", precision=0.03, budget_s=args.budget, candidates=words)
    summary = explorer.results.layer_summary()
    rows = summary[summary.run_id == handle.run_id]
    columns = ["kernel", "speedup", "speedup_low", "speedup_high", "verdict", "noise_floor", "pairs"]
    print(rows[columns].to_string(index=False))
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
