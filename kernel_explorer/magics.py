"""`%load_ext kernel_explorer`: the `%kernels` line magic.

The magic only parses and dispatches to an `Explorer`; every decision lives in the core. Bad
input prints one line with the usage, never a traceback.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from kernel_explorer.errors import KernelExplorerError

USAGE = """\
%kernels hardware
%kernels explore MODEL [--inputs VAR] [--mode inference|training|torch.compile]
%kernels on LAYER [--instances PATH ...]
%kernels off LAYER [--instances PATH ...]
%kernels reset
%kernels compare LAYER [--pairs N]
%kernels bench
%kernels report PATH
%kernels --help"""


SHORT_USAGE = (
    "Usage: %kernels hardware | explore MODEL | on LAYER | off LAYER | reset | compare LAYER | bench "
    "| report PATH (%kernels --help for options)"
)


class MagicUsageError(KernelExplorerError):
    """Bad input to `%kernels`: shown as one line plus the usage."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would print and sys.exit
        raise MagicUsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="%kernels", add_help=False, usage=USAGE.replace("%", "%%"))
    parser.add_argument("--help", "-h", action="store_true")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    sub.add_parser("hardware", add_help=False)
    explore = sub.add_parser("explore", add_help=False)
    explore.add_argument("model")
    explore.add_argument("--inputs")
    explore.add_argument("--mode", default="inference", choices=["inference", "training", "torch.compile"])
    for name in ("on", "off"):
        switch = sub.add_parser(name, add_help=False)
        switch.add_argument("layer")
        switch.add_argument("--instances", nargs="+")
    sub.add_parser("reset", add_help=False)
    compare = sub.add_parser("compare", add_help=False)
    compare.add_argument("layer")
    compare.add_argument("--pairs", type=int, default=7)
    sub.add_parser("bench", add_help=False)
    report = sub.add_parser("report", add_help=False)
    report.add_argument("path")
    return parser


class KernelsMagic:
    """State of the extension in one IPython shell: the explorer `%kernels explore` made."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.explorer: Any = None
        self.parser = build_parser()

    def __call__(self, line: str) -> Any:
        try:
            return self.dispatch(line)
        except KernelExplorerError as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            print(f"%kernels: {first.rstrip('.')}. {SHORT_USAGE}", file=sys.stderr)
            return None

    def dispatch(self, line: str) -> Any:
        try:
            words = shlex.split(line)
        except ValueError as error:
            raise MagicUsageError(f"cannot parse {line!r}: {error}") from None
        args = self.parser.parse_args(words)
        if args.help or not args.command:
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

        from kernel_explorer.builder import build_hub
        from kernel_explorer.explorer import Explorer
        from kernel_explorer.ui.dashboard import Dashboard

        model = self._variable(args.model)
        if isinstance(model, tuple) and model and isinstance(model[0], nn.Module):
            model, tokenizer = model[0], (model[1] if len(model) > 1 else None)
        else:
            tokenizer = self.shell.user_ns.get("tokenizer")
        if not isinstance(model, nn.Module):
            raise MagicUsageError(f"{args.model!r} is a {type(model).__name__}, not a torch.nn.Module")
        build_hub(progress=True)  # progress bars in the cell while the bundled kernels build (cached after)
        self.explorer = Explorer(model, tokenizer=tokenizer, mode=args.mode)
        if args.inputs is not None:
            self.explorer.capture(self._variable(args.inputs))
        return Dashboard(self.explorer)

    def _do_on(self, args: argparse.Namespace) -> Any:
        self._need_explorer().on(args.layer, args.instances)
        return self.explorer.inventory()

    def _do_off(self, args: argparse.Namespace) -> Any:
        self._need_explorer().off(args.layer, args.instances)
        return self.explorer.inventory()

    def _do_reset(self, args: argparse.Namespace) -> Any:
        self._need_explorer().reset()
        return self.explorer.inventory()

    def _do_compare(self, args: argparse.Namespace) -> Any:
        explorer = self._need_explorer()
        if args.pairs < 1:
            raise MagicUsageError("--pairs must be at least 1")
        explorer.compare(args.layer, pairs=args.pairs)
        summary = explorer.results.layer_summary()
        return summary[summary.layer == args.layer]

    def _do_bench(self, args: argparse.Namespace) -> Any:
        explorer = self._need_explorer()
        explorer.compare_model(lengths=(128,), decode_tokens=16, pairs=2, decode_pairs=2)
        return explorer.results.to_pandas("model_prefill").tail(2)

    def _do_report(self, args: argparse.Namespace) -> Any:
        path = self._need_explorer().report(args.path)
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
    if magic is not None and magic.explorer is not None:
        magic.explorer.reset()
    shell.magics_manager.magics["line"].pop("kernels", None)
    shell._kernel_explorer_magic = None
