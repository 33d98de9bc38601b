"""The measurement engine checked against itself and against torch.utils.benchmark, then SmolLM2.

1. Timing: the engine's clock (calibrated blocks, median) against `torch.utils.benchmark`'s
   `blocked_autorange` on the same call, for PyTorch's and the kernel's RMSNorm at 512 x 4096.
2. Uncertainty where the truth is known: 40 A/A comparisons (PyTorch against itself) must say
   "no difference" at least 95% of the time; five separate runs of the bundled RMSNorm at
   512 x 4096 (fp32 and bf16) must each say "faster", with intervals that contain the median of
   the five runs' medians at least 4 times out of 5. `bench/noise_floor.py` measures how much the
   machine alone moves a timing.
3. SmolLM2 with every bundled kernel on, against all-PyTorch: prefill at 128 and 512 tokens,
   decode tokens/s, logits KL, top-1 and greedy agreement.

    python bench/engine_check.py [--skip-model]
"""

from __future__ import annotations

import argparse
import statistics

TIMING_TOLERANCE = 0.10
REPEAT_TOLERANCE = 0.05


def _rmsnorm_case(dtype: object) -> tuple[object, object, object]:
    """A SmolLM2-sized-hidden RMSNorm at 512 x 4096 with the bundled kernel switched on."""
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from kernel_explorer.catalog.candidates import Catalog
    from kernel_explorer.switching.board import Switchboard

    norm = LlamaRMSNorm(4096, eps=LlamaConfig().rms_norm_eps).to(dtype)
    model = torch.nn.Sequential(norm)
    board = Switchboard(model, Catalog(include_transformers=False))
    board.on("RMSNorm")
    x = torch.randn(512, 4096, generator=torch.Generator().manual_seed(0)).to(dtype)
    return board, norm, x


def timing_agreement() -> None:
    import torch
    from torch.utils import benchmark

    from kernel_explorer.measure.timing import Clock

    board, _, x = _rmsnorm_case(torch.float32)
    current, pytorch, _ = board.forwards("RMSNorm", "0")
    clock = Clock("cpu")
    print("1. Engine clock vs torch.utils.benchmark (median per call, RMSNorm fp32 512x4096)")
    for label, fn in (("PyTorch", pytorch), ("kernel", current)):
        timer = benchmark.Timer(
            "with torch.no_grad():\n    fn(x)",
            globals={"fn": fn, "x": x, "torch": torch},
            num_threads=torch.get_num_threads(),  # Timer defaults to 1 thread; the engine uses torch's
        )
        repeat = clock.calibrate(lambda fn=fn: fn(x), min_seconds=5e-3)
        ours, theirs = [], []
        # Short turns (about 55 ms each), alternated and swapped in order, so that both clocks
        # see the same machine state: eager's time here drifts between modes over seconds.
        for i in range(16):
            for side in ("ours", "theirs") if i % 2 == 0 else ("theirs", "ours"):
                if side == "ours":
                    blocks = (clock.per_call(lambda fn=fn: fn(x), repeat) for _ in range(11))
                    ours.append(statistics.median(blocks))
                else:
                    theirs.append(timer.blocked_autorange(min_run_time=0.055).median)
        ratio = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
        verdict = "ok" if abs(ratio - 1) <= TIMING_TOLERANCE else f"SHORT (outside +-{TIMING_TOLERANCE:.0%})"
        engine_us, benchmark_us = statistics.median(ours) * 1e6, statistics.median(theirs) * 1e6
        times = f"engine {engine_us:8.1f} us   benchmark {benchmark_us:8.1f} us"
        print(f"   {label:<8} {times}   median ratio {ratio:.3f}  {verdict}")


def uncertainty() -> None:
    """The verdicts checked where the truth is known: A/A (no difference) and the bundled RMSNorm."""
    import torch

    from kernel_explorer.measure.capture import CapturedInputs
    from kernel_explorer.measure.layer_comparison import compare_layer
    from kernel_explorer.measure.stats import NO_DIFFERENCE

    print("2a. A/A: PyTorch's RMSNorm against itself at 512x4096 fp32, 40 comparisons of 7 pairs each")
    board, _, x = _rmsnorm_case(torch.float32)
    board.off("RMSNorm")
    captured = CapturedInputs(calls={("RMSNorm", "0"): [((x,), {})]})
    verdicts = [
        list(compare_layer(board, captured, "RMSNorm", run_id=f"aa{i}", pairs=7, switch_on=False))[-1].values
        for i in range(40)
    ]
    wrong = sum(v.verdict != NO_DIFFERENCE for v in verdicts)
    floors = sorted(v.noise_floor for v in verdicts)
    verdict = "ok" if wrong <= 2 else "SHORT (more than 5% wrong)"
    print(f"    wrong verdicts {wrong}/40 ({wrong / 40:.0%})  {verdict}")
    print(
        f"    noise floor: median {statistics.median(floors):.1%}, range {floors[0]:.1%} to {floors[-1]:.1%}"
    )
    print(
        "2b. Bundled RMSNorm at 512x4096, five separate adaptive runs (to +-5% or 10 s): does each run's\n"
        "    interval across runs (its own, widened by its A/A floor) contain the median of the medians?"
    )
    for dtype in (torch.float32, torch.bfloat16):
        board, _, x = _rmsnorm_case(dtype)
        captured = CapturedInputs(calls={("RMSNorm", "0"): [((x,), {})]})
        runs = [
            list(compare_layer(board, captured, "RMSNorm", run_id=f"r{i}", reference=False))[-1].values
            for i in range(5)
        ]
        center = statistics.median(v.speedup for v in runs)
        inside = sum(v.speedup_low <= center <= v.speedup_high for v in runs)
        # the interval across runs (the run's, widened by its A/A floor), which every view reports
        # beside the run's own and on which the verdict is decided: the one the target is about
        across = sum(v.across_runs[0] <= center <= v.across_runs[1] for v in runs)
        faster = sum(v.verdict == "faster" for v in runs)
        name = str(dtype).removeprefix("torch.")[:4]
        verdict = "ok" if across >= 4 and faster == 5 else "SHORT (4/5 needed)"
        summary = (
            f"median of medians {center:.2f}x: inside the interval across runs {across}/5"
            f" (the run's own {inside}/5), 'faster' {faster}/5"
        )
        print(f"    {name:<5} {summary}  {verdict}")
        for v in runs:
            print(
                f"      {v.speedup:5.2f}x [{v.speedup_low:.2f}, {v.speedup_high:.2f}]"
                f" across runs [{v.across_runs[0]:.2f}, {v.across_runs[1]:.2f}]"
                f"  +-{(v.speedup_high - v.speedup_low) / 2 / v.speedup:.1%}  {v.pairs:>3} pairs"
                f" ({v.stopped_by})  floor {v.noise_floor:.1%}  {v.verdict}"
                f"  (PyTorch {v.pytorch_s * 1e6:.0f} us, kernel {v.kernel_s * 1e6:.0f} us)"
            )


def relative_spread(values: list[float]) -> float:
    """Largest relative deviation from the median."""
    center = statistics.median(values)
    return max(abs(v - center) / center for v in values)


def _runs(values: list[float], unit: str) -> str:
    return ", ".join(f"{v:.2f}{unit}" if unit == "x" else f"{v:.0f}{unit}" for v in values)


def smollm2() -> None:
    from kernel_explorer.explorer import Explorer
    from kernel_explorer.loading import load_default_model

    model, tokenizer = load_default_model(progress=False)
    explorer = Explorer(model, tokenizer=tokenizer)
    print("3. SmolLM2-135M, every bundled kernel on (121 instances) vs all-PyTorch, interleaved, fp32")
    with explorer.using():
        handle = explorer.compare_model(lengths=(128, 512), decode_tokens=32, pairs=7, decode_pairs=3)
    if handle.error is not None:
        raise handle.error
    log = explorer.results
    verdicts = {(r.values.measure, r.values.tokens): r.values for r in log.records("model_verdict")}
    for length in (128, 512):
        rows = [r.values for r in log.records("model_prefill") if r.values.tokens == length]
        pytorch_ms = statistics.median(v.pytorch_s for v in rows) * 1e3
        kernel_ms = statistics.median(v.kernel_s for v in rows) * 1e3
        times = f"PyTorch {pytorch_ms:7.1f} ms  kernels {kernel_ms:7.1f} ms"
        verdict = verdicts[("prefill", length)]
        print(f"   prefill {length:>3} tokens: {times}  {verdict.summary} (floor {verdict.noise_floor:.1%})")
    decode = [r.values for r in log.records("model_decode")]
    print(
        f"   decode 32 tokens: PyTorch {statistics.median(v.pytorch_tok_s for v in decode):.1f} tok/s  "
        f"kernels {statistics.median(v.kernel_tok_s for v in decode):.1f} tok/s  "
        f"{verdicts[('decode', 32)].summary}"
    )
    (agreement,) = [r.values for r in log.records("model_agreement")]
    first = agreement.first_divergence
    print(
        f"   logits max |diff| {agreement.logits_max_abs:.3g}  KL {agreement.kl:.3g}  "
        f"top-1 agreement {agreement.top1_agreement:.1%}  greedy {agreement.greedy_tokens} tokens: "
        + ("identical" if first is None else f"first differs at token {first}")
    )


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-model", action="store_true", help="only the timing and repeatability checks")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    timing_agreement()
    uncertainty()
    if not args.skip_model:
        smollm2()


if __name__ == "__main__":
    main()
