"""`%load_ext kernel_explorer`: the `%kernels` line magic.

The magic only parses and dispatches to an `Explorer`; every decision lives in the core. Bad
input prints one line saying what to do (with the usage of that one command when the words were
wrong), never a traceback; the full usage only on `%kernels help`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from typing import Any

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.views.magic_words import (
    COMMANDS,
    SHORT_USAGE,
    USAGE,
    MagicUsageError,
    build_parser,
    command_usage,
)


def _a(word: str) -> str:
    return f"an {word}" if word[:1].lower() in "aeiou" else f"a {word}"


_EXPLORE_STEPS = [
    "checking the bundled kernels (built once, cached after)",
    "finding the kernel layers",
    "capturing the layers' inputs",
    "building the dashboard (the browser draws it next, a few seconds)",
]


#: the variable `%kernels explore` without a model explores (and loads the default model into)
DEFAULT_VARIABLE = "model"


def _names_a_model(word: str) -> bool:
    """A folder here, or a Hub id (org/name): not a notebook variable (those have no slash)."""
    from pathlib import Path

    return "/" in word or Path(word).expanduser().is_dir()


#: `%kernels bench`'s comparison: 6 pairs are the fewest whose interval of the median covers 95%
#: (5 cover 94%; 2 pairs read "only 50% sure"). What it costs is prefills (a warm-up, 3 A/A pairs,
#: then the pairs) and greedy tokens (the outputs' 2 x 24, then 2 per pair): on a machine shared
#: with other work (load 8 on 2 cores) one 128-token prefill of the default model took 6-12 s and a
#: token 0.6-0.8 s, and `compare_model_seconds` put the old 2-pair, 16-token bench at 104 s (it
#: took 100-114 s), this one at about 3 minutes; on 2 idle cores it is a fraction of a minute.
#: So it says its estimate before it starts, and what to do when that is long.
BENCH: dict[str, Any] = {"lengths": (128,), "pairs": 6, "decode_tokens": 8, "decode_pairs": 6}


def _duration(seconds: float) -> str:
    """`40 s`, `3 min`: an estimate as a person reads it (to the nearest 10 s under 2 minutes)."""
    if seconds < 120:
        return f"{max(10, round(seconds, -1)):.0f} s"
    return f"{seconds / 60:.0f} min"


class _Steps:
    """A progress bar in the cell while `%kernels explore` works: which step, out of how many.

    The explore cell can take seconds (a first hub build: minutes) before the dashboard appears;
    without this it would stay empty. The bar is removed when the dashboard is ready.
    """

    def __init__(self, names: list[str]) -> None:
        from IPython.display import display
        from ipywidgets import HTML, HBox, IntProgress

        self.names = names
        self.step = 0  # the step under way (1-based); 0 before the first
        self.bar = IntProgress(value=0, min=0, max=len(names), description="explore")
        self.label = HTML()
        self.box = HBox([self.bar, self.label])
        self.box.add_class("kx-explore-progress")
        self.handle = display(self.box, display_id=True)

    def next(self) -> None:
        """Start the next step: the label names it, the bar counts the steps finished (it filled as
        each step started, and sat full through the longest one, the dashboard's)."""
        self.step += 1
        index = min(self.step, len(self.names)) - 1
        self.label.value = f"{index + 1}/{len(self.names)}: {self.names[index]}…"
        self.bar.value = index

    def done(self) -> None:
        """Close the bar and empty its output, so a saved notebook keeps no dead widget there."""
        from IPython.display import HTML

        self.bar.value = self.bar.max
        self.box.close()
        if self.handle is not None:
            self.handle.update(HTML(""))


def one_line(error: BaseException) -> str:
    """The error's message on one line: a list after a colon joined with commas, other lines with
    semicolons ("No candidate 'x'. Candidates:" alone would hide the candidates it lists)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    head, rest = lines[0], lines[1:]
    if head.endswith(":") and rest:
        return f"{head} {', '.join(rest)}"
    return "; ".join(lines)


def _warn_at_the_cell(caught: list[Any]) -> None:
    """Issue the warnings a `%kernels` line raised again, located at the user's cell line.

    Raised inside the toolkit, a warning names a line of the toolkit's own code, which says nothing
    to the reader; the cell is the frame that called IPython's `run_line_magic`.
    """
    import warnings

    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "run_line_magic":
        frame = frame.f_back
    cell = frame.f_back if frame is not None else None
    for found in caught:
        if cell is None:
            warnings.warn(found.message, found.category, stacklevel=3)
            continue
        registry = cell.f_globals.setdefault("__warningregistry__", {})
        warnings.warn_explicit(
            found.message,
            found.category,
            cell.f_code.co_filename,
            cell.f_lineno,
            module=cell.f_globals.get("__name__"),
            registry=registry,
        )


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
        self.before_cell: Any = None  # the pre_run_cell hook that gives explorers their progress line
        self.parser = build_parser()

    def __call__(self, line: str) -> Any:
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = self.dispatch(line)
            except KernelExplorerError as error:
                print(f"%kernels: {one_line(error)}", file=sys.stderr)
                result = None
        _warn_at_the_cell(caught)
        return result

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
        from kernel_explorer.machine import detect_hardware

        return detect_hardware()

    def _variable(self, name: str) -> Any:
        if name not in self.shell.user_ns:
            raise MagicUsageError(f"{name!r} is not defined in this notebook")
        return self.shell.user_ns[name]

    def _model_variable(self, name: str) -> tuple[Any, Any]:
        """The notebook's model variable (or a (model, tokenizer) tuple) and the tokenizer beside it."""
        from torch import nn

        if name not in self.shell.user_ns:
            raise MagicUsageError(
                f"{name!r} is not defined in this notebook: load one ({name}, tokenizer = "
                "kx.load_default_model()) or give a folder or Hub id"
            )
        model = self.shell.user_ns[name]
        if isinstance(model, tuple) and model and isinstance(model[0], nn.Module):
            return model[0], (model[1] if len(model) > 1 else None)
        if not isinstance(model, nn.Module):
            raise MagicUsageError(
                f"{name!r} is {_a(type(model).__name__)}, not a torch.nn.Module: "
                "pass the variable that holds your model"
            )
        return model, self.shell.user_ns.get("tokenizer")

    def _default_model(self) -> tuple[Any, Any]:
        """No model named and no `model` in the notebook: load the default one, and say so."""
        from kernel_explorer.loading import load_default_model

        print(
            "%kernels explore: no `model` in this notebook, so the default model "
            "(SmolLM2-135M-Instruct) is loaded as `model` (and its tokenizer as `tokenizer`)"
        )
        model, tokenizer = load_default_model()
        self.shell.user_ns[DEFAULT_VARIABLE] = model
        self.shell.user_ns.setdefault("tokenizer", tokenizer)
        return model, tokenizer

    def _do_explore(self, args: argparse.Namespace) -> Any:
        from kernel_explorer.explorer import Explorer
        from kernel_explorer.machine import build_hub
        from kernel_explorer.views.dashboard import Dashboard
        from kernel_explorer.views.progress import cell_progress

        found = None
        if args.model is None:  # the README's first line in a fresh notebook: the default model
            if DEFAULT_VARIABLE in self.shell.user_ns:
                args.model = DEFAULT_VARIABLE
            else:
                found = self._default_model()
                args.model = DEFAULT_VARIABLE
        by_name = found is None and args.model not in self.shell.user_ns and _names_a_model(args.model)
        if found is None and not by_name:
            found = self._model_variable(args.model)  # a bad name fails before any bar
        inputs = None if args.inputs is None else self._variable(args.inputs)
        names = [s for s in _EXPLORE_STEPS if inputs is not None or "capturing" not in s]
        steps = _Steps([f"loading {args.model} (from_pretrained)"] * by_name + names)
        self.steps = steps
        try:  # whatever fails, the bar goes: no "3/4: capturing..." left above the error line
            if found is None:
                from kernel_explorer.loading import load_model

                steps.next()
                found = load_model(args.model, dtype=args.dtype, device=args.device)
            model, tokenizer = found
            steps.next()
            build_hub(progress=True)  # progress bars while the bundled kernels build (cached after)
            steps.next()
            explorer = Explorer.of(model, tokenizer=tokenizer, mode=args.mode or "inference")
            if args.mode is not None:
                explorer.mode = args.mode  # asked for explicitly: also on a reused explorer
            if explorer.tokenizer is None and tokenizer is not None:
                explorer.tokenizer = tokenizer
            self.explorer = explorer
            cell_progress(explorer.results)
            if inputs is not None:
                steps.next()
                explorer.capture(inputs)
            steps.next()
            dashboard = Dashboard(explorer)
        finally:
            steps.done()
        self.dashboards.append(dashboard)
        return dashboard

    def _do_on(self, args: argparse.Namespace) -> Any:
        running = self._need_explorer().on(args.layer, args.instances, candidate=args.candidate)
        # a kernel that cannot load leaves PyTorch running (by design): say so, or it looks switched
        stayed = [now for now in running if not now.is_kernel and now.reason]
        if stayed:
            which = args.layer
            if len(stayed) < len(running):
                which = f"{len(stayed)} of {len(running)} {args.layer}"
            reason = one_line(Exception(stayed[0].reason))
            print(f"%kernels: {which} stays on PyTorch: {reason}", file=sys.stderr)
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

    def _started(self, handle: Any, background: bool, measures: list[str] | None = None) -> None:
        self.handle = handle
        if background:
            self._announce(handle, measures)

    def _announce(self, handle: Any, measures: list[str] | None) -> None:
        """A background run's line in its cell, replaced by how it ended when it ends: the cell
        said "measures in the background" forever, and `%kernels stop` then said "nothing to stop"
        with no word that the run had finished."""
        from IPython.display import display

        from kernel_explorer.records import RunEvent
        from kernel_explorer.views.answers import answer, run_answer

        results = self.explorer.results
        going = (
            f"run {handle.run_id} measures in the background: explorer.results fills as it goes; "
            "%kernels stop cancels it"
        )
        shown = display({"text/plain": going}, raw=True, display_id=True)
        told: list[bool] = []

        def ended(record: Any) -> None:
            values = record.values
            if (
                record.run_id != handle.run_id
                or not isinstance(values, RunEvent)
                or values.event == "started"
            ):
                return
            if told:
                return
            told.append(True)
            unsubscribe()
            found = (
                run_answer(results, handle.run_id)
                if not measures
                else answer(results, handle.run_id, measures)
            )
            verdicts = [f"{what}: {rest}" for what, rest in found.rows]
            when = time.strftime("%H:%M:%S", time.localtime(record.time))
            line = f"run {handle.run_id} {values.event} at {when}" + (
                f": {'; '.join(verdicts)}" if verdicts else ""
            )
            if values.event == "failed" and values.detail:
                line += f" ({values.detail})"
            if shown is not None:
                shown.update({"text/plain": line}, raw=True)

        unsubscribe = results.subscribe(ended)
        ended_already = [r for r in results.records("run", handle.run_id) if r.values.event != "started"]
        if ended_already:  # it ended before the subscription
            ended(ended_already[-1])

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
        sampling = {"precision": args.precision, "budget_s": args.budget, "candidates": args.candidates}
        from kernel_explorer.views.progress import cell_progress

        cell_progress(explorer.results).expect(len(args.layer) * len(args.candidates or [None]), "layers")
        handle = explorer.compare(
            *args.layer,
            measure=args.measure,
            pairs=pairs,
            background=args.background,
            **{key: value for key, value in sampling.items() if value is not None},
        )
        self._started(handle, args.background, [args.measure])
        if args.background:
            return None
        from kernel_explorer.views.answers import answer

        return answer(explorer.results, handle.run_id, [args.measure])

    def _do_side(self, args: argparse.Namespace) -> Any:
        """The side-by-side table of one layer (`Explorer.side_by_side`); with --compare, every usable
        candidate measured in one run first, each switched on for its turn and put back after."""
        explorer = self._need_explorer()
        if args.compare:
            from kernel_explorer.views.progress import cell_progress

            table = explorer.side_by_side(args.layer)
            labels = [more["label"] for more in table.extra if more.get("usable")]
            if not labels:
                raise MagicUsageError(f"{args.layer} has no candidate that can run here to compare")
            print(f"%kernels side: measuring {len(labels)} candidates of {args.layer}, about 3 s each")
            cell_progress(explorer.results).expect(len(labels), "layers")
            explorer.compare(args.layer, candidates=labels, precision=0.1, budget_s=3)
        return explorer.side_by_side(args.layer)

    def _do_bench(self, args: argparse.Namespace) -> Any:
        from kernel_explorer.views.progress import cell_progress

        explorer = self._need_explorer()
        seconds = explorer.compare_model_seconds(**BENCH)  # a prefill and a short decode, timed now
        compiling = "compiling (minutes), then " if args.compiled else ""
        where = "in the background (%kernels stop cancels it)" if args.background else "in this cell"
        long = (
            "; over a minute: this machine is busy or slow (other work slows every pair), "
            "--background keeps the notebook free"
            if seconds > 60 and not args.background
            else ""
        )
        print(
            f"%kernels bench: {compiling}about {_duration(seconds * (2 if args.compiled else 1))} here, "
            f"{where}: prefill at {BENCH['lengths'][0]} tokens ({BENCH['pairs']} pairs), decode "
            f"({BENCH['decode_pairs']} pairs of {BENCH['decode_tokens']} tokens), logits and greedy tokens"
            + long
        )
        # prefill, then decode; compiled: each also against eager PyTorch
        cell_progress(explorer.results).expect(4 if args.compiled else 2, "measures")
        handle = explorer.compare_model(background=args.background, compiled=args.compiled, **BENCH)
        self._started(handle, args.background)
        if args.background:
            return None
        from kernel_explorer.views.answers import run_answer

        return run_answer(explorer.results, handle.run_id)

    def _do_stop(self, args: argparse.Namespace) -> None:
        """Cancel what %kernels started and what its dashboards run; wait until the model is restored."""
        running = [self.handle] if self.handle is not None and not self.handle.done else []
        for dashboard in self.dashboards:
            handle = dashboard.handle
            if handle is not None and not handle.done:
                dashboard.stop()
                running.append(handle)
        if not running:
            last = self.handle
            ended = f" (run {last.run_id} {last.outcome})" if last is not None and last.done else ""
            print(f"nothing to stop: no measurement started by %kernels or its dashboard is running{ended}")
            return
        for handle in running:
            handle.cancel()
        still = [h.run_id for h in running if not h.wait(timeout=30)]
        stopped = ", ".join(h.run_id for h in running if h.run_id not in still)
        if stopped:
            # the run's own switches are undone; one the user made while it went is the user's and stays
            print(f"stopped run {stopped}; each layer runs what it ran before, or what you switched since")
        if still:
            raise MagicUsageError(f"run {', '.join(still)} did not stop within 30 s; run %kernels stop again")

    def _do_report(self, args: argparse.Namespace) -> Any:
        explorer = self._need_explorer()
        from kernel_explorer.views.report import explorer_report, report_path

        path = explorer_report(explorer, report_path(args.path))
        print(f"report written to {path}")
        return None

    def _do_export(self, args: argparse.Namespace) -> Any:
        explorer = self._need_explorer()
        path = explorer.export(args.path)
        print(f"module written to {path}: apply(model), or python {path.name} MODEL_FOLDER")
        if args.pins:
            pins = explorer.export_pins(args.pins)
            print(f"kernel pins written to {pins} (then: kernels lock {args.pins})")
        return None


def load_ipython_extension(shell: Any) -> None:
    """Register `%kernels` (idempotent: a reload replaces the previous registration)."""
    from kernel_explorer.views.progress import attach_to_explorers

    previous = getattr(shell, "_kernel_explorer_magic", None)
    if previous is not None and previous.before_cell is not None:  # one progress hook, not two
        shell.events.unregister("pre_run_cell", previous.before_cell)
    magic = KernelsMagic(shell)
    shell.register_magic_function(magic, magic_kind="line", magic_name="kernels")
    shell._kernel_explorer_magic = magic
    from kernel_explorer.views import warning_line

    warning_line.install(shell)  # in a notebook, the toolkit's warnings as one styled line each
    # every Explorer of the notebook shows a progress line while a cell measures with it
    magic.before_cell = lambda *_: attach_to_explorers(shell.user_ns)
    shell.events.register("pre_run_cell", magic.before_cell)


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
    if magic is not None and magic.before_cell is not None:
        shell.events.unregister("pre_run_cell", magic.before_cell)
    shell.magics_manager.magics["line"].pop("kernels", None)
    shell._kernel_explorer_magic = None
    from kernel_explorer.views import warning_line

    warning_line.uninstall()
