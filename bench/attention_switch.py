"""Switching attention (model-wide, through Transformers' `set_attn_implementation`) on SmolLM2.

The attention repository is loaded once before timing (the first switch loads it); then each round
times the explorer switching attention to the repository and back to sdpa, and a forward check
that the switch back is bitwise exact. The repository is the bundled `flash_attn` when it is built
here, else the torch-ops test repository (tests/attention_repos.py): switching costs the same, it
is Transformers' registry lookup and config write. Medians with 95% intervals (measure/stats.py).
Target: < 50 ms per switch.

    python bench/attention_switch.py [--rounds 40] [--tiny]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

TARGET_MS = 50.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--tiny", action="store_true", help="the tiny test Llama instead of SmolLM2")
    args = parser.parse_args()

    import torch

    from kernel_explorer import Explorer
    from kernel_explorer.build.bundled import BUNDLED_ATTENTION, bundled_repo_path
    from kernel_explorer.catalog.hub_access import local_availability
    from kernel_explorer.inspect.layer_groups import ATTENTION
    from kernel_explorer.loading import load_default_model, tiny_llama
    from kernel_explorer.measure.stats import median_interval

    model = tiny_llama() if args.tiny else load_default_model(progress=False)[0]
    repo = bundled_repo_path(BUNDLED_ATTENTION)
    if not local_availability(repo).state.usable:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from attention_repos import write_attention_repo

        repo = write_attention_repo(Path(tempfile.mkdtemp()))
    explorer = Explorer(model, attention=[repo])
    ids = torch.randint(0, model.config.vocab_size, (1, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(ids).logits
    explorer.on(ATTENTION, candidate=repo)  # loads the repository once
    explorer.off(ATTENTION)
    on_ms, off_ms = [], []
    for _ in range(args.rounds):
        start = time.perf_counter()
        explorer.on(ATTENTION, candidate=repo)
        on_ms.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        explorer.off(ATTENTION)
        off_ms.append((time.perf_counter() - start) * 1e3)
    with torch.no_grad():
        exact = torch.equal(model(ids).logits, before)
    print(f"Attention switch, {type(model).__name__}, repository {repo.name}, {args.rounds} rounds:")
    for label, samples in (("to the repository", on_ms), ("back to sdpa", off_ms)):
        found = median_interval(samples)
        verdict = "ok" if found.median < TARGET_MS else f"SHORT (target < {TARGET_MS:g} ms)"
        print(
            f"  {label:<20} median {found.median:7.3f} ms  95% [{found.low:.3f}, {found.high:.3f}]"
            f"  max {max(samples):.3f} ms  {verdict}"
        )
    print(f"  logits after switching back bitwise equal to before: {exact}")


if __name__ == "__main__":
    main()
