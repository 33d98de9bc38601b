"""How much a headless Run grows the process: `Explorer(load_default_model()).run_live()` for N
minutes, the resident memory (RSS) sampled every 5 s, and the growth per minute after the first
minute (the capture, the kernels' loading and the first cycle's allocations fill the first one).

The goal (issue 47): under 2 MB a minute after the first minute, under 100 MB for an hour's Run.
`--tracemalloc` adds the 15 lines whose Python allocations grew most between minute 1 and the end
(numpy's arrays included), which names what still grows; its RSS figures then hold the snapshot
taken at minute 1 (hundreds of MB) and the traces, so read the growth from a run without it.

`--spill-mb 4` shows the log flat once its columns spill (in a few minutes, not the default's 11).

    python bench/run_memory.py [--minutes 5] [--tracemalloc] [--spill-mb MB]
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import statistics
import time

SAMPLE_EVERY_S = 5.0
#: what the first minute holds (capture, loading, the first cycle's buffers) is not growth
SETTLE_S = 60.0


def rss_mb(pid: int | None = None) -> float:
    """Resident memory of `pid` (this process by default), MB."""
    import psutil

    return psutil.Process(pid or os.getpid()).memory_info().rss / 2**20


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB), in MB a minute."""
    xs = [t for t, _ in points]
    ys = [m for _, m in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return 60.0 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0


def growth_report(samples: list[tuple[float, float]], what: str = "RSS") -> list[str]:
    """Lines that say how `samples` ((seconds since the start, MB), in time order) grew: the
    least-squares slope after the first minute, with the spread of the slopes over each minute's
    window (a leak is steady; a slope that only one window carries is a step), the growth from the
    first minute's end to the last sample, and the total from the first sample."""
    if len(samples) < 2:
        return [f"{what}: too few samples to say how it grew"]
    after = [(t, m) for t, m in samples if t >= SETTLE_S]
    total = samples[-1][1] - samples[0][1]
    lines = [
        f"{what}: {samples[0][1]:.0f} MB at the start, {samples[-1][1]:.0f} MB after {samples[-1][0]:.0f} s"
    ]
    if len(after) < 2:
        return [
            *lines,
            f"{what} growth: {total:+.1f} MB in all (the run was too short for a slope after minute 1)",
        ]
    windows = []
    start = after[0][0]
    while start + SETTLE_S <= after[-1][0] + 1e-9:
        window = [(t, m) for t, m in after if start <= t <= start + SETTLE_S]
        if len(window) >= 2:
            windows.append(_slope(window))
        start += SETTLE_S
    spread = (
        f"per-minute windows {min(windows):+.2f} to {max(windows):+.2f} MB/min "
        f"(median {statistics.median(windows):+.2f}, {len(windows)} windows)"
        if windows
        else "no whole minute window"
    )
    slope = _slope(after)
    lines.append(f"{what} growth after minute 1: {slope:+.2f} MB/min (least squares); {spread}")
    lines.append(
        f"{what} growth: {after[0][1] - samples[0][1]:+.1f} MB in the first minute, "
        f"{after[-1][1] - after[0][1]:+.1f} MB from minute 1 to the end, {total:+.1f} MB in all; "
        f"at this slope an hour adds {slope * 59:+.0f} MB after its first minute"
    )
    return lines


def cpu_name() -> str:
    """The CPU model, as lscpu names it (what the figures are quoted with)."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long the Run goes (default 5)")
    parser.add_argument("--tracemalloc", action="store_true", help="name the lines that grew (slower)")
    parser.add_argument(
        "--spill-mb", type=float, help="spill the log's columns past this many MB (default: SPILL_BYTES)"
    )
    args = parser.parse_args()

    import kernel_explorer
    from kernel_explorer import Explorer
    from kernel_explorer.loading import load_default_model

    if args.spill_mb is not None:
        from kernel_explorer.measure import record_columns

        record_columns.SPILL_BYTES = int(args.spill_mb * 2**20)

    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start(4)
    model, tokenizer = load_default_model(progress=False)
    explorer = Explorer(model, tokenizer=tokenizer)
    kinds: collections.Counter[str] = collections.Counter()
    explorer.results.subscribe(lambda record: kinds.update([record.kind]))
    print(f"{cpu_name()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"kernel_explorer from {os.path.dirname(kernel_explorer.__file__)}")
    began = time.monotonic()
    samples = [(0.0, rss_mb())]
    handle = explorer.run_live()
    first = None
    try:
        while (now := time.monotonic() - began) < args.minutes * 60:
            time.sleep(max(0.0, SAMPLE_EVERY_S * len(samples) - now))
            samples.append((time.monotonic() - began, rss_mb()))
            if args.tracemalloc and first is None and samples[-1][0] >= SETTLE_S:
                first = tracemalloc.take_snapshot()
            if handle.done:
                raise SystemExit(f"the Run ended early: {handle.outcome} {handle.error!r}")
    finally:
        handle.cancel()
        handle.wait(60)
    for t, mb in samples:
        print(f"  {t:6.0f} s  {mb:7.1f} MB")
    seconds = samples[-1][0]
    print(
        f"records: {sum(kinds.values())} in {seconds:.0f} s ("
        + ", ".join(f"{kind} {n} ({n / seconds * 60:.0f}/min)" for kind, n in kinds.most_common())
        + ")"
    )
    print("\n".join(growth_report(samples)))
    if args.tracemalloc:
        print("(RSS here holds tracemalloc's snapshot of minute 1 and its traces: see a run without it)")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if first is not None:
        last = tracemalloc.take_snapshot()
        print("Python allocations that grew most from minute 1 to the end:")
        for stat in last.compare_to(first, "lineno")[:15]:
            print(f"  {stat}")


if __name__ == "__main__":
    main()
