"""The `kernel-explorer` command: the same core as the notebook, from a terminal.

Errors the user can fix are printed as one line (`error: ... ; fix: ...`) with exit status 2, never
as a traceback. Progress bars are drawn only on a terminal: redirected to a file or a pipe, the
output holds text lines only, not tqdm's carriage returns.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.views.headless import DTYPES

DEMO_QUESTION = "What is the capital of France?"


def interactive() -> bool:
    """Whether both stdout and stderr are terminals: the only case where progress bars belong."""
    return sys.stdout.isatty() and sys.stderr.isatty()


def _cmd_hardware(args: argparse.Namespace) -> int:
    from kernel_explorer.machine import detect_hardware

    snapshot = detect_hardware()
    print(snapshot.to_json() if args.json else snapshot)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    """The headless main job: hardware, the default model (load timed), its kernelizable layers."""
    from kernel_explorer.loading import generate_answer, load_default_model
    from kernel_explorer.machine import detect_hardware, require_compatible

    snapshot = detect_hardware()
    print(snapshot)
    print()
    require_compatible()

    progress = interactive()
    _, _, first = load_default_model(progress=progress, with_info=True)
    how = "converted from GGUF and cached" if first.source == "gguf" else "loaded from cache"
    print(f"Default model: {first.seconds:.1f} s ({how}, {first.path})")
    model, tokenizer, again = load_default_model(progress=progress, with_info=True)
    print(f"Default model, second load from cache: {again.seconds:.2f} s")

    start = time.perf_counter()
    answer = generate_answer(model, tokenizer, DEMO_QUESTION)
    print(f"Q: {DEMO_QUESTION}\nA: {answer}   ({time.perf_counter() - start:.1f} s, greedy)")
    print()
    _demo_explorer(model, tokenizer)
    return 0


def _demo_explorer(model: Any, tokenizer: Any) -> None:
    """The inventory, every layer on the bundled CPU kernels, then a short measurement of each."""
    from kernel_explorer.explorer import Explorer
    from kernel_explorer.loading import generate_answer
    from kernel_explorer.machine import build_hub

    start = time.perf_counter()
    build_hub(progress=interactive())
    print(f"Bundled CPU kernel hub ready in {time.perf_counter() - start:.1f} s")
    explorer = Explorer.of(model, tokenizer=tokenizer)
    print(explorer.inventory())
    print()
    before = generate_answer(model, tokenizer, DEMO_QUESTION)
    start = time.perf_counter()
    with explorer.using() as running:
        switched = time.perf_counter() - start
        on = sum(now.is_kernel for now in running)
        print(f"Switched {on} of {len(running)} instances to kernels in {switched * 1e3:.1f} ms:")
        inventory = explorer.inventory()
        for name in explorer.layers:
            now = explorer.running(name)[0]
            print(f"  {name:<16} {inventory.row(name).kernel_name(now)} [{now.variant}]")
        after = generate_answer(model, tokenizer, DEMO_QUESTION)
    print(f"With the kernels: {after}")
    print(f"Same greedy answer as PyTorch: {'yes' if after == before else 'NO'}")
    print(f"After the block: {explorer!r}")
    print()
    # a short comparison (about 2 s of pairs per layer): the numbers, each with how sure it is
    print("Each kernel against PyTorch on the model's own activations (short run: kernel-explorer compare")
    print("measures longer, kernel-explorer report writes the HTML):")
    _measure(explorer, explorer.layers, pairs=None, precision=0.1, budget_s=2.0)


def _measure(
    explorer: Any,
    layers: Sequence[str],
    *,
    pairs: int | None,
    precision: float,
    budget_s: float,
    measure: str = "time",
) -> None:
    """Compare `layers` in one kind of measurement and print its summary of the run: a line per
    layer (the lines `%kernels compare` answers with), then its notes (what the intervals mean, a
    noisy machine)."""
    import warnings

    from kernel_explorer.records import NoisyMachineWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoisyMachineWarning)  # the summary's notes say it, once
        handle = explorer.compare(
            *layers, measure=measure, pairs=pairs, precision=precision, budget_s=budget_s
        )
    if handle.error is not None:
        raise handle.error
    summary = explorer.results.summary(measure).select("run_id", handle.run_id)
    print(f"  {summary.title}")
    for what, rest in summary.lines():
        print(f"  {what}: {rest}")
    for note in summary.notes:
        print(f"  {note}")


def _job(args: argparse.Namespace) -> Any:
    """The command line's compare as a `CompareJob` (what a sweep's task runs, too)."""
    from kernel_explorer.views.headless import CompareJob

    return CompareJob(
        model=args.model,
        layers=tuple(dict.fromkeys([*args.layers, *(args.layer_names or ())])),
        dtype=args.dtype,
        device=args.device,
        pairs=args.pairs,
        precision=args.precision,
        budget_s=args.budget,
        out=args.out,
        host=args.machine,
    )


def _compared_explorer(args: argparse.Namespace) -> Any:
    """The model's explorer (default model, or --model) after comparing the named layers (all by
    default), printed; with --out, its log written as JSON lines."""
    from kernel_explorer.views.headless import headless_compare

    def measure(explorer: Any, layers: Sequence[str]) -> None:
        _measure(
            explorer,
            layers,
            pairs=args.pairs,
            precision=args.precision,
            budget_s=args.budget,
            measure=args.measure,
        )

    return headless_compare(_job(args), measure=measure, progress=interactive())


def _cmd_compare(args: argparse.Namespace) -> int:
    """Every bundled kernel (or the named layers) of the default model against PyTorch, with intervals."""
    _compared_explorer(args)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    """`compare`, then every record of it in one self-contained HTML file."""
    from kernel_explorer.views.report import explorer_report, report_path

    target = report_path(args.path)  # before minutes of loading and measuring
    written = explorer_report(_compared_explorer(args), target)
    print(f"Report written to {written}")
    return 0


def _cmd_side(args: argparse.Namespace) -> int:
    """Kernels side by side for one layer: PyTorch, the bundled kernel and the peers given, each usable
    candidate measured in one run (switched on for its turn), then one row each."""
    import warnings

    from kernel_explorer.records import NoisyMachineWarning
    from kernel_explorer.views.headless import CompareJob, open_explorer

    job = CompareJob(
        model=args.model,
        layers=(args.layer,),
        dtype=args.dtype,
        device=args.device,
        precision=args.precision,
        budget_s=args.budget,
    )
    explorer, name = open_explorer(job, progress=interactive())
    layers = {args.layer: args.peer_class} if args.peer_class else None
    for path in args.peers:
        explorer.add_peer(path, layers=layers)
    labels = [more["label"] for more in explorer.side_by_side(args.layer).extra if more.get("usable")]
    if not labels:
        raise KernelExplorerError(f"{args.layer} has no candidate that can run here; nothing to compare")
    print(f"Comparing {len(labels)} kernels of {args.layer} on {name}, up to {args.budget:g} s of pairs each")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoisyMachineWarning)  # the time summary's notes say it
        handle = explorer.compare(
            args.layer, candidates=labels, precision=args.precision, budget_s=args.budget
        )
    if handle.error is not None:
        raise handle.error
    print(explorer.side_by_side(args.layer).text())
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    """The compare of each model on every node of a Ray cluster; the machines side by side."""
    from kernel_explorer.machine import sweep

    result = sweep(
        args.address,
        args.models,
        out=args.out,
        layers=args.layer_names or (),
        resources=args.resources or (),
        dtype=args.dtype,
        device=args.device,
        pairs=args.pairs,
        precision=args.precision,
        budget_s=args.budget,
        cpus_per_task=args.cpus_per_task,
    )
    table = result.log.machine_table(wide=True)
    if not table.empty:
        print(table.to_string(index=False))
    from kernel_explorer.records import revision_notes

    for note in revision_notes(result.log.records()):
        print(f"note: {note}")
    return 1 if result.failed else 0


def _cmd_build_hub(args: argparse.Namespace) -> int:
    from kernel_explorer.machine import build_hub

    for built in build_hub(force=args.force, progress=not args.quiet):
        how = "cached" if built.reused else "built"
        print(f"{built.name:<11} {how:<6} {built.variant_path}  [{', '.join(built.isas)}]")
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from kernel_explorer.machine import build_path

    built = build_path(args.path, force=args.force, progress=not args.quiet)
    for note in built.notes if built.reused or args.quiet else ():
        print(f"{built.name}: {note}")
    how = "cached" if built.reused else "built"
    sections = f"  [{', '.join(built.isas)}]" if built.isas else ""
    print(f"{built.name} {how}: {built.repo_path}  ({built.variant}, ops {built.kernel_id}){sections}")
    print(f"load it with kernels.get_local_kernel(Path({str(built.repo_path)!r}))")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from kernel_explorer.records import measured_by_compare

    measures = measured_by_compare()  # every kind of measurement compare starts: a new one is here too
    parser = argparse.ArgumentParser(
        prog="kernel-explorer", description="See, switch and measure Hugging Face Hub kernels."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    hw = sub.add_parser("hardware", help="show the hardware snapshot and accepted build variants")
    hw.add_argument("--json", action="store_true", help="print JSON instead of text")
    hw.set_defaults(func=_cmd_hardware)
    hub = sub.add_parser("build-hub", help="build the bundled CPU kernel repositories (cached)")
    hub.add_argument("--force", action="store_true", help="rebuild even when a sound cached build exists")
    hub.add_argument("--quiet", action="store_true", help="no progress bars")
    hub.set_defaults(func=_cmd_build_hub)
    build = sub.add_parser("build", help="build a kernel-builder repository's CPU backend (cached)")
    build.add_argument("path", help="the repository's folder (with build.toml)")
    build.add_argument("--force", action="store_true", help="rebuild even when a sound cached build exists")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    build.set_defaults(func=_cmd_build)
    demo = sub.add_parser("demo", help="the headless main job on the default model")
    demo.set_defaults(func=_cmd_demo)
    compare = sub.add_parser(
        "compare", help="each kernel layer of a model (default: SmolLM2) against PyTorch, with 95%% intervals"
    )
    report = sub.add_parser("report", help="run `compare` and write its HTML report to PATH")
    report.add_argument("path", help="the HTML file to write (its folder must exist)")
    for command in (compare, report):
        command.add_argument("layers", nargs="*", help="kernel layer names (default: all)")
        command.add_argument(
            "--layers", dest="layer_names", nargs="+", metavar="LAYER", help="kernel layer names, too"
        )
        command.add_argument(
            "--model", default=None, help="a model folder (save_pretrained) or a Hub id (default: SmolLM2)"
        )
        command.add_argument("--dtype", default="auto", choices=DTYPES, help="the model's dtype (auto)")
        command.add_argument("--device", default="cpu", help="where the model runs (cpu)")
        command.add_argument(
            "--out", default=None, help="write the log (records with provenance) as JSON lines"
        )
        command.add_argument(
            "--machine", default=None, help="this machine's name in the records (default: the hostname)"
        )
        command.add_argument(
            "--pairs", type=int, default=None, help="fixed rounds of pairs (default: adaptive)"
        )
        command.add_argument(
            "--precision", type=float, default=0.05, help="stop when the interval is within this share (0.05)"
        )
        command.add_argument(
            "--budget", type=float, default=10.0, help="most seconds of pairs per layer (10)"
        )
        command.add_argument(
            "--measure",
            default="time",
            choices=measures,
            help="what to measure (time: speed, with intervals)",
        )
    side = sub.add_parser(
        "side",
        help="kernels side by side for one layer: PyTorch, the bundled kernel and your --peer repositories"
        " measured in one run, one row each",
    )
    side.add_argument("layer", help="the kernel layer name (SiLU, RMSNorm, ...)")
    side.add_argument(
        "--peer", dest="peers", nargs="+", default=[], metavar="PATH", help="kernel-builder repositories"
    )
    side.add_argument("--peer-class", default=None, help="the peers' class serving LAYER (default: by name)")
    side.add_argument("--model", default=None, help="a model folder or a Hub id (default: SmolLM2)")
    side.add_argument("--dtype", default="auto", choices=DTYPES, help="the model's dtype (auto)")
    side.add_argument("--device", default="cpu", help="where the model runs (cpu)")
    side.add_argument("--precision", type=float, default=0.1, help="target interval share (0.1)")
    side.add_argument("--budget", type=float, default=3.0, help="most seconds of pairs per kernel (3)")
    side.set_defaults(func=_cmd_side)
    sweep = sub.add_parser(
        "sweep", help="compare each model on every node of a Ray cluster (pip install kernel-explorer[ray])"
    )
    sweep.add_argument("--address", required=True, help="the Ray cluster (head IP:port, or 'auto')")
    sweep.add_argument(
        "--models", nargs="+", required=True, help="model folders (same path on every node) or Hub ids"
    )
    sweep.add_argument("--layers", dest="layer_names", nargs="+", metavar="LAYER", help="kernel layer names")
    sweep.add_argument(
        "--resources", nargs="+", help="only the nodes carrying one of these resource labels (e.g. GPU kinds)"
    )
    sweep.add_argument("--out", required=True, help="the folder for one log per node and model")
    sweep.add_argument("--dtype", default="auto", choices=DTYPES, help="the model's dtype (auto)")
    sweep.add_argument("--device", default="cpu", help="cpu, or cuda: one GPU per task (cpu)")
    sweep.add_argument("--pairs", type=int, default=None, help="fixed rounds of pairs (default: adaptive)")
    sweep.add_argument("--precision", type=float, default=0.05, help="target interval share (0.05)")
    sweep.add_argument("--budget", type=float, default=10.0, help="most seconds of pairs per layer (10)")
    sweep.add_argument("--cpus-per-task", type=float, default=1, help="CPUs each task asks Ray for (1)")
    sweep.set_defaults(func=_cmd_sweep)
    compare.set_defaults(func=_cmd_compare)
    report.set_defaults(func=_cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if not interactive() and "tqdm" not in sys.modules:
        # Redirected: no bar anywhere, also from libraries that draw their own (tqdm reads this
        # variable once, on import).
        os.environ.setdefault("TQDM_DISABLE", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except KernelExplorerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
