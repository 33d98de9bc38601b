"""What the Ray sweep adds over running the compare directly: seconds of dispatch and transfer per task.

Runs the same `kernel-explorer compare --model FOLDER --layers RMSNorm --pairs N --out ...` twice
ways on this machine: directly (a subprocess, as a job would) and as a sweep task on a one-node
Ray cluster here (`sweep.local_cluster`: `ray start --head`, one CPU), several times each,
interleaved. A sweep task's own
compare time is measured inside the task; what it adds is the task's time at the driver (submit to
log written and merged) minus that. Needs the [ray] extra.

    python bench/sweep.py [--model FOLDER] [--repeats 3] [--pairs 5]

The default model is a tiny random Llama saved to a temporary folder (the sweep's overhead does
not depend on the model; the compare's time does).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def direct(arguments: list[str], out: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "kernel_explorer.views.cli", "compare", *arguments, "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr.strip().splitlines()[-1])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a model folder (default: a tiny random Llama)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()

    from kernel_explorer.build.builder import build_hub
    from kernel_explorer.sweep.local_cluster import local_cluster
    from kernel_explorer.sweep.ray_sweep import compare_arguments, run_sweep

    build_hub(progress=False)
    with tempfile.TemporaryDirectory(prefix="kx-bench-sweep-") as tmp:
        root = Path(tmp)
        model = args.model
        if model is None:
            from kernel_explorer.loading import tiny_llama

            model = str(root / "tiny-llama")
            tiny_llama().save_pretrained(model)
        arguments = compare_arguments(model, layers=["RMSNorm"], pairs=args.pairs)
        start = time.perf_counter()
        rows = []
        with local_cluster(root / "ray", labels=()) as (address, _):
            print(f"one-node Ray cluster started in {time.perf_counter() - start:.1f} s (paid once)")
            for i in range(args.repeats):
                plain = direct(arguments, root / f"direct-{i}.jsonl")
                found = run_sweep(
                    address,
                    [model],
                    out=root / f"sweep-{i}",
                    layers=["RMSNorm"],
                    pairs=args.pairs,
                    say=lambda line: None,
                )
                (outcome,) = found.outcomes
                if outcome.state != "done":
                    raise SystemExit(outcome.line())
                size = outcome.path.stat().st_size if outcome.path is not None else 0
                rows.append((plain, outcome.compare_s, outcome.task_s, outcome.overhead_s, size))
                print(
                    f"repeat {i + 1}: direct compare {plain:.2f} s | "
                    f"sweep task: compare {outcome.compare_s:.2f} s, "
                    f"at the driver {outcome.task_s:.2f} s, added {outcome.overhead_s:.2f} s "
                    f"(log {size / 1e3:.0f} kB)"
                )
    added = [r[3] for r in rows]
    plain = [r[0] for r in rows]
    print(
        f"median over {len(rows)}: the sweep adds {statistics.median(added):.2f} s per task "
        f"(min {min(added):.2f}, max {max(added):.2f}) beside a direct compare of "
        f"{statistics.median(plain):.2f} s ({statistics.median(added) / statistics.median(plain):.1%})"
    )


if __name__ == "__main__":
    main()
