"""The words `%kernels` takes: one table of commands, the parser built from it, the usage lines.

Kept apart from the magic's actions so the table a reader edits to add a command is one screen.
A bad word raises `MagicUsageError` (one line, with that command's usage), never argparse's exit.
"""

from __future__ import annotations

import argparse

from kernel_explorer.errors import MagicUsageError
from kernel_explorer.records import measured_by_compare

#: what `compare --measure` takes: every kind of measurement `Explorer.compare` starts
MEASURES = measured_by_compare()

# command -> (its arguments, what it does): the one table the usage lines are made from
COMMANDS: dict[str, tuple[str, str]] = {
    "hardware": ("", "the machine and the build variants it accepts"),
    "explore": (
        "[MODEL] [--inputs VAR] [--mode MODE] [--dtype D] [--device DEV]",
        "the dashboard of MODEL: a notebook variable, a folder or a Hub id (loaded with from_pretrained"
        " in dtype D: auto, float32, bfloat16, float16); no MODEL: the notebook's `model`, or the"
        " default model (SmolLM2-135M), loaded as `model`; MODE: inference, training, torch.compile",
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
        "LAYER... [--measure M] [--pairs N|--precision P] [--candidates W...] [--background]",
        "kernel against PyTorch, with intervals (7 pairs; --precision P, --budget S: until +-P or S seconds);"
        " W: a row per kernel a word names (bundled, peer, a label; bundled@avx2: its AVX2 code path);"
        f" M: what to measure, one of {', '.join(MEASURES)} (default time)",
    ),
    "side": (
        "LAYER [--compare]",
        "kernels side by side for LAYER: PyTorch and each candidate here, one row each (speedup with its"
        " interval, accuracy against float64, memory once measured, state), the one running now marked;"
        " --compare: first measure every usable candidate in one run (a few seconds each)",
    ),
    "bench": (
        "[--compiled] [--background]",
        "the whole model: prefill and decode, kernels against PyTorch, with 95% intervals; under a minute"
        " on 2 idle cores with the default model, minutes on a busy machine (it says its estimate before it"
        " starts); --compiled:"
        " both under torch.compile on a static cache, against eager PyTorch too (compiling takes minutes)",
    ),
    "stop": ("", "cancel the measurement %kernels or its dashboard started"),
    "report": ("PATH", "write every result so far to one HTML file"),
    "export": (
        "PATH [--pins PROJECT]",
        "write a Python module that applies what is switched on now to a freshly loaded model, with only"
        " Transformers and kernels; PROJECT: also its Hub kernels as [tool.kernels.dependencies]",
    ),
    "help": ("", "this help"),
}

#: the longest help line: a notebook output wider than this wraps or scrolls sideways
HELP_WIDTH = 100


def _usage() -> str:
    """Each command on its line, what it does indented under it (both within `HELP_WIDTH`)."""
    import textwrap

    lines = []
    for name, (arguments, what) in COMMANDS.items():
        lines.append(f"%kernels {name} {arguments}".rstrip())
        lines += textwrap.wrap(what, HELP_WIDTH, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines)


USAGE = _usage()

SHORT_USAGE = f"Usage: %kernels {' | '.join(COMMANDS)} (%kernels help: options)"


def command_usage(name: str) -> str:
    """`%kernels compare LAYER [LAYER ...] [--pairs N] [--background]`: one command's usage."""
    return f"%kernels {name} {COMMANDS[name][0]}".rstrip()


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
    explore.add_argument("model", nargs="?")
    explore.add_argument("--inputs")
    explore.add_argument("--mode", choices=["inference", "training", "torch.compile"])
    explore.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    explore.add_argument("--device", default="cpu")
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
    commands["compare"].add_argument("--candidates", nargs="+")
    commands["compare"].add_argument("--measure", default="time", choices=MEASURES)
    for name in ("compare", "bench"):
        commands[name].add_argument("--background", action="store_true")
    commands["bench"].add_argument("--compiled", action="store_true")
    commands["side"].add_argument("layer")
    commands["side"].add_argument("--compare", action="store_true")
    commands["report"].add_argument("path")
    commands["export"].add_argument("path")
    commands["export"].add_argument("--pins")
    return parser
