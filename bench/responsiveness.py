"""How soon a measurement shows something: the first record of a background `compare` on SmolLM2.

A user clicks Run (or calls `compare(..., background=True)`) and waits for the first point; the
target is under a second, a fresh capture of the layers' inputs included. Each round captures
afresh and starts a background compare of RMSNorm, timing the first record after the start; the
median of the rounds is quoted with its 95% interval (measure/stats.py). A timing, so it lives
here and not in the tests.

    python bench/responsiveness.py [--rounds 7] [--tiny]
"""

from __future__ import annotations

import argparse
import time

TARGET_S = 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tiny", action="store_true", help="the tiny test Llama instead of SmolLM2")
    args = parser.parse_args()

    from kernel_explorer import Explorer
    from kernel_explorer.loading import load_default_model, tiny_llama
    from kernel_explorer.measure.records import Record
    from kernel_explorer.measure.stats import median_interval

    if args.tiny:
        explorer = Explorer(tiny_llama(), include_transformers=False)
    else:
        model, tokenizer = load_default_model(progress=False)
        explorer = Explorer(model, tokenizer=tokenizer)
    explorer.compare("RMSNorm", pairs=1)  # loads the kernels once, like a user's first run
    firsts: list[float] = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        seen: list[float] = []

        def note(record: Record, seen: list[float] = seen, start: float = start) -> None:
            if record.kind != "run" and not seen:
                seen.append(time.perf_counter() - start)

        unsubscribe = explorer.results.subscribe(note)
        explorer.capture()  # a fresh capture is part of the timed start
        handle = explorer.compare("RMSNorm", pairs=2, background=True)
        handle.wait(120)
        unsubscribe()
        firsts.append(seen[0])
    found = median_interval(firsts)
    median, low, high = found.median, found.low, found.high
    model_name = "tiny Llama" if args.tiny else "SmolLM2-135M"
    print(f"first record of a background compare ({model_name}, fresh capture in), {args.rounds} rounds:")
    interval = f"[{low * 1e3:.0f}, {high * 1e3:.0f}] ms ({found.confidence:.0%} interval)"
    print(f"  median {median * 1e3:.0f} ms  {interval}")
    verdict = "met" if high < TARGET_S else "not shown" if median < TARGET_S else "missed"
    print(f"  target < {TARGET_S * 1e3:.0f} ms: {verdict}")


if __name__ == "__main__":
    main()
