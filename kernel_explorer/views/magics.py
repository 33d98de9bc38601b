"""`%load_ext kernel_explorer`: the `%kernels` line magic.

The magic only parses and dispatches to an `Explorer`; every decision lives in the core. Bad
input prints one line saying what to do (with the usage of that one command when the words were
wrong), never a traceback; the full usage only on `%kernels help`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from kernel_explorer.errors import KernelExplorerError

# command -> (its arguments, what it does): the one table the usage lines are made from
COMMANDS: dict[str, tuple[str, str]] = {
    "hardware": ("", "the machine and the build variants it accepts"),
    "explore": (
        "MODEL [--inputs VAR] [--mode MODE]",
        "the dashboard of MODEL (its explorer, if it has one); MODE: inference, training, torch.compile",
    ),
    "on": (
        "LAYER [--instances PATH ...] [--candidate NAME]",
        "switch LAYER (or chosen instances) to its kernel; attention: model-wide, NAME e.g. org/repo",
    ),
    "off": ("LAYER [--instances PATH ...]", "switch LAYER back to PyTorch"),
    "reset": ("", "every layer back to PyTorch"),
    "extend": (
        "LAYER [CLASS] [--instances PATH ...] [--candidates VAR]",
        "name CLASS's instances (default: the class named LAYER) kernel layer LAYER; VAR: {'cpu': repo}",
    ),
    "retract": ("LAYER [--instances PATH ...]", "undo extend: PyTorch and the instances' own class again"),
    "compare": (
        "LAYER [LAYER ...] [--pairs N | --precision P] [--budget S] [--background]",
        "kernel against PyTorch, with intervals (7 pairs; --precision/--budget: until +-P or S seconds)",
    ),
    "bench": ("[--background]", "the whole model: prefill and decode, kernels against PyTorch"),
    "stop": ("", "cancel the measurement %kernels or its dashboard started"),
    "report": ("PATH", "write every result so far to one HTML file"),
    "help": ("", "this help"),
}

_WIDTH = max(len(f"%kernels {name} {arguments}") for name, (arguments, _) in COMMANDS.items())
USAGE = "\n".join(
    f"%kernels {name} {arguments}".ljust(_WIDTH) + f"  {what}" for name, (arguments, what) in COMMANDS.items()
)

SHORT_USAGE = f"Usage: %kernels {' | '.join(COMMANDS)} (%kernels help: options)"


def command_usage(name: str) -> str:
    """`%kernels compare LAYER [LAYER ...] [--pairs N] [--background]`: one command's usage."""
    return f"%kernels {name} {COMMANDS[name][0]}".rstrip()


class MagicUsageError(KernelExplorerError):
    """Bad input to `%kernels`: shown as one line, with the usage of the command it was for."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would print and sys.exit
        name = self.prog.split()[-1]
        if "(choose from" in message or name not in COMMANDS:  # the choices are the answer already
            raise MagicUsageError(message)
        raise MagicUsageError(f"{message} (usage: {command_usage(name)})")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="%kernels", add_help=False)
    parser.add_argument("--help", "-h", action="store_true")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    commands = {name: sub.add_parser(name, add_help=False) for name in COMMANDS}
    explore = commands["explore"]
    explore.add_argument("model")
    explore.add_argument("--inputs")
    explore.add_argument("--mode", choices=["inference", "training", "torch.compile"])
    for name in ("on", "off"):
        commands[name].add_argument("layer")
        commands[name].add_argument("--instances", nargs="+")
    commands["extend"].add_argument("layer")
    commands["extend"].add_argument("cls", nargs="?")
    commands["extend"].add_argument("--instances", nargs="+")
    commands["extend"].add_argument("--candidates")
    commands["retract"].add_argument("layer")
    commands["retract"].add_argument("--instances", nargs="+")
    commands["on"].add_argument("--candidate")
    commands["compare"].add_argument("layer", nargs="+")
    commands["compare"].add_argument("--pairs", type=int)
    commands["compare"].add_argument("--precision", type=float)
    commands["compare"].add_argument("--budget", type=float)
    for name in ("compare", "bench"):
        commands[name].add_argument("--background", action="store_true")
    commands["report"].add_argument("path")
    return parser


def _a(word: str) -> str:
    return f"an {word}" if word[:1].lower() in "aeiou" else f"a {word}"


_EXPLORE_STEPS = [
    "checking the bundled kernels (built once, cached after)",
    "finding the kernel layers",
    "capturing the layers' inputs",
    "reading the hardware and drawing the dashboard",
]


class _Steps:
    """A progress bar in the cell while `%kernels explore` works: which step, out of how many.

    The explore cell can take seconds (a first hub build: minutes) before the dashboard appears;
    without this it would stay empty. The bar is removed when the dashboard is ready.
    """

    def __init__(self, names: list[str]) -> None:
        from IPython.display import display
        from ipywidgets import HTML, HBox, IntProgress

        self.names = names
        self.bar = IntProgress(value=0, min=0, max=len(names), description="explore")
        self.label = HTML()
        self.box = HBox([self.bar, self.label])
        self.box.add_class("kx-explore-progress")
        self.handle = display(self.box, display_id=True)

    def next(self) -> None:
        step = self.bar.value
        self.label.value = f"{step + 1}/{len(self.names)}: {self.names[min(step, len(self.names) - 1)]}…"
        self.bar.value = min(step + 1, len(self.names))

    def done(self) -> None:
        """Close the bar and empty its output, so a saved notebook keeps no dead widget there."""
        from IPython.display import HTML

        self.box.close()
        if self.handle is not None:
            self.handle.update(HTML(""))


class KernelsMagic:
    """State of the extension in one IPython shell: the explorer in use, the runs it started.

    The explorer is the model's own (`Explorer.of`): `%kernels explore model` twice, or after
    `explorer = Explorer(model)` in a cell, drives that one explorer, so switches and results
    never split between two copies.
    """

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.explorer: Any = None
        self.handle: Any = None  # the last RunHandle a %kernels command started
        self.dashboards: list[Any] = []  # dashboards %kernels explore showed: %kernels stop stops theirs
        self.parser = build_parser()

    def __call__(self, line: str) -> Any:
        try:
            return self.dispatch(line)
        except KernelExplorerError as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            print(f"%kernels: {first}", file=sys.stderr)
            return None

    def dispatch(self, line: str) -> Any:
        try:
            words = shlex.split(line)
        except ValueError as error:
            raise MagicUsageError(f"cannot parse {line!r}: {error}") from None
        if not words:
            print(SHORT_USAGE)
            return None
        if words[0] in COMMANDS or words[0] in ("--help", "-h"):
            args = self.parser.parse_args(words)
        else:
            raise MagicUsageError(f"unknown command {words[0]!r}: one of {', '.join(COMMANDS)}")
        if args.help or args.command == "help":
            print(USAGE)
            return None
        handler = getattr(self, f"_do_{args.command}")
        return handler(args)

    # -- subcommands ---------------------------------------------------------------------------

    def _need_explorer(self) -> Any:
        if self.explorer is None:
            raise MagicUsageError("no model explored yet: run %kernels explore MODEL first")
        return self.explorer

    def _do_hardware(self, args: argparse.Namespace) -> Any:
        from kernel_explorer.hardware import detect_hardware

        return detect_hardware()

    def _variable(self, name: str) -> Any:
        if name not in self.shell.user_ns:
            raise MagicUsageError(f"{name!r} is not defined in this notebook")
        return self.shell.user_ns[name]

    def _do_explore(self, args: argparse.Namespace) -> Any:
        from torch import nn

        from kernel_explorer._backend.modes import parse_mode
        from kernel_explorer.builder import build_hub
        from kernel_explorer.explorer import Explorer
        from kernel_explorer.views.dashboard import Dashboard

        model = self._variable(args.model)
        if isinstance(model, tuple) and model and isinstance(model[0], nn.Module):
            model, tokenizer = model[0], (model[1] if len(model) > 1 else None)
        else:
            tokenizer = self.shell.user_ns.get("tokenizer")
        if not isinstance(model, nn.Module):
            raise MagicUsageError(
                f"{args.model!r} is {_a(type(model).__name__)}, not a torch.nn.Module: "
                "pass the variable that holds your model"
            )
        steps = _Steps([s for s in _EXPLORE_STEPS if args.inputs is not None or "capturing" not in s])
        self.steps = steps
        steps.next()
        build_hub(progress=True)  # progress bars in the cell while the bundled kernels build (cached after)
        steps.next()
        explorer = Explorer.of(model, tokenizer=tokenizer, mode=args.mode or "inference")
        if args.mode is not None:
            explorer.mode = parse_mode(args.mode)  # asked for explicitly: also on a reused explorer
        if explorer.tokenizer is None and tokenizer is not None:
            explorer.tokenizer = tokenizer
        self.explorer = explorer
        if args.inputs is not None:
            steps.next()
            explorer.capture(self._variable(args.inputs))
        steps.next()
        dashboard = Dashboard(explorer)
        steps.done()
        self.dashboards.append(dashboard)
        return dashboard

    def _do_on(self, args: argparse.Namespace) -> Any:
        self._need_explorer().on(args.layer, args.instances, candidate=args.candidate)
        return self.explorer.inventory()

    def _do_off(self, args: argparse.Namespace) -> Any:
        self._need_explorer().off(args.layer, args.instances)
        return self.explorer.inventory()

    def _do_reset(self, args: argparse.Namespace) -> Any:
        self._need_explorer().reset()
        return self.explorer.inventory()

    def _do_extend(self, args: argparse.Namespace) -> Any:
        explorer = self._need_explorer()
        candidates = None if args.candidates is None else self._variable(args.candidates)
        explorer.extend(args.layer, self._class(args.cls), args.instances, candidates=candidates)
        return explorer.inventory()

    def _class(self, word: str | None) -> Any:
        """`nn.Linear` as the notebook's own object when the words name one; else the word itself."""
        if word is None:
            return None
        head, *rest = word.split(".")
        found = self.shell.user_ns.get(head)
        for part in rest:
            found = getattr(found, part, None)
        return found if isinstance(found, type) else word

    def _do_retract(self, args: argparse.Namespace) -> Any:
        self._need_explorer().retract(args.layer, args.instances)
        return self.explorer.inventory()

    def _started(self, handle: Any, background: bool) -> None:
        self.handle = handle
        if background:
            print(
                f"run {handle.run_id} measures in the background: explorer.results fills as it goes; "
                "%kernels stop cancels it"
            )

    def _do_compare(self, args: argparse.Namespace) -> Any:
        explorer = self._need_explorer()
        if args.pairs is not None and args.pairs < 1:
            raise MagicUsageError(
                f"--pairs must be at least 1, not {args.pairs} ({command_usage('compare')})"
            )
        if args.pairs is not None and args.precision is not None:
            raise MagicUsageError(
                f"--pairs and --precision both say when to stop: give one ({command_usage('compare')})"
            )
        # a fixed 7 pairs by default (quick); --precision or --budget make the run adaptive
        adaptive = args.precision is not None or args.budget is not None
        pairs = args.pairs if args.pairs is not None else (None if adaptive else 7)
        sampling = {"precision": args.precision, "budget_s": args.budget}
        handle = explorer.compare(
            *args.layer,
            pairs=pairs,
            background=args.background,
            **{key: value for key, value in sampling.items() if value is not None},
        )
        self._started(handle, args.background)
        if args.background:
            return None
        summary = explorer.results.layer_summary()
        return summary[(summary.run_id == handle.run_id) & summary.layer.isin(args.layer)]

    def _do_bench(self, args: argparse.Namespace) -> Any:
        explorer = self._need_explorer()
        handle = explorer.compare_model(
            lengths=(128,), decode_tokens=16, pairs=2, decode_pairs=2, background=args.background
        )
        self._started(handle, args.background)
        if args.background:
            return None
        summary = explorer.results.model_summary()
        return summary[summary.run_id == handle.run_id]

    def _do_stop(self, args: argparse.Namespace) -> None:
        """Cancel what %kernels started and what its dashboards run; wait until the model is restored."""
        running = [self.handle] if self.handle is not None and not self.handle.done else []
        for dashboard in self.dashboards:
            handle = dashboard.handle
            if handle is not None and not handle.done:
                dashboard.stop()
                running.append(handle)
        if not running:
            print("nothing to stop: no measurement started by %kernels or its dashboard is running")
            return
        for handle in running:
            handle.cancel()
        still = [h.run_id for h in running if not h.wait(timeout=30)]
        stopped = ", ".join(h.run_id for h in running if h.run_id not in still)
        if stopped:
            print(f"stopped run {stopped}; every layer is back as it was before the run")
        if still:
            raise MagicUsageError(f"run {', '.join(still)} did not stop within 30 s; run %kernels stop again")

    def _do_report(self, args: argparse.Namespace) -> Any:
        explorer = self._need_explorer()
        from kernel_explorer.views.report import report_path

        path = explorer.report(str(report_path(args.path)))
        print(f"report written to {path}")
        return None


def load_ipython_extension(shell: Any) -> None:
    """Register `%kernels` (idempotent: a reload replaces the previous registration)."""
    magic = KernelsMagic(shell)
    shell.register_magic_function(magic, magic_kind="line", magic_name="kernels")
    shell._kernel_explorer_magic = magic


def unload_ipython_extension(shell: Any) -> None:
    """Remove `%kernels`, putting the explored model back on PyTorch."""
    magic = getattr(shell, "_kernel_explorer_magic", None)
    if magic is not None:
        for dashboard in magic.dashboards:
            dashboard.stop()
        if magic.handle is not None:
            magic.handle.cancel()
            magic.handle.wait(timeout=30)
    if magic is not None and magic.explorer is not None:
        magic.explorer.reset()
    shell.magics_manager.magics["line"].pop("kernels", None)
    shell._kernel_explorer_magic = None
