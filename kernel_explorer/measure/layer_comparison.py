"""Layer comparison on captured activations: latency, divergence and determinism, one record per sample,
and for each compared layer a verdict with its interval, noise floor and plausibility notes.

Each sample reads what the instance runs *now* (under the switchboard lock, which is held only
around the forward calls), so a switch made while a run is going shows up in the next sample. A
pair is named in the same hold of the lock as it is timed: the model's change count is read before
and after its calls, and its provenance is the one cached at that count (read there, once per
instance after each change, when the cache is older), so a switch that lands right after a pair
never names it. A pair a change landed in (a kernel that raised and fell back to PyTorch mid-pair)
is dropped, neither recorded nor counted.
Instances that were on PyTorch when the comparison started are switched on for it and switched
back after, also when the run is cancelled, interrupted or fails; switches the user made in the
meantime are left as the user made them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.measure.capture import CapturedInputs, first_tensor
from kernel_explorer.measure.comparison import Comparison
from kernel_explorer.measure.kinds.time.records import LayerCalibration, LayerLatency, LayerVerdict
from kernel_explorer.measure.kinds.values.records import GradientDivergence, LayerDeterminism, LayerDivergence
from kernel_explorer.measure.plausibility import copy_seconds, ignores_its_input, tensor_bytes
from kernel_explorer.measure.provenance import provenance
from kernel_explorer.measure.records import INFERENCE, Provenance, Record
from kernel_explorer.measure.stats import (
    DEFAULT_BUDGET_S,
    DEFAULT_PRECISION,
    StallWatch,
    StopRule,
    check_sampling,
)
from kernel_explorer.measure.timing import Clock, interleaved_pair
from kernel_explorer.numerics.divergence import divergence, float64_reference

CALIBRATION_PAIRS = 9  # A/A pairs per layer at the start of a comparison: the noise floor, cheaply
Call = tuple[str, tuple, dict]  # (instance path, args, kwargs) of one captured call

if TYPE_CHECKING:
    import torch

    from kernel_explorer.measure.switches import Instances, Switches


@contextlib.contextmanager
def kernels_on_for(board: Switches, name: str, paths: list[str]) -> Iterator[None]:
    """Switch `paths` of `name` on for the block where they are off; switch back only those after."""
    off = [now.instance for now in board.running(name, paths) if not now.is_kernel]
    with board.holding((lambda: board.on(name, off)) if off else None, keep_others=True):
        yield


def calls_for(captured: CapturedInputs, name: str, paths: list[str]) -> list[Call]:
    by_path = captured.for_layer(name)
    calls = [(path, args, kwargs) for path in paths for args, kwargs in by_path.get(path, [])[:1]]
    if not calls:
        raise KernelExplorerError(
            f"No captured inputs for {name!r}: the capture run did not call it"
            + (
                f" ({captured.dropped} calls dropped by the {captured.memory_cap} byte memory cap)."
                if captured.dropped
                else "."
            )
        )
    return calls


def _pair(
    clock: Clock,
    board: Switches,
    name: str,
    call: Call,
    repeats: dict[str, int],
    index: int,
    *,
    aa: bool,
    named: Callable[[str], Provenance],
) -> tuple[float, float, bool, int, Provenance, float] | None:
    """One interleaved pair for `call`: (PyTorch s, other side s, kernel on, repeat, provenance,
    time.time() at its end), under the lock; None when what the instance runs changed inside it.

    The other side is what the instance runs now, or PyTorch again for an A/A pair. Both sides use
    the same repeat, sized once per instance on the slower-to-resolve of the two. `named(path)`
    gives the pair's provenance before the lock is let go (`_origins`), so no switch lands between
    the pair and its name; its time is read there too, so a pair timed before a switch is never
    later than the switch (the live plots place each switch's change by the pairs' times: a
    record stamped after the lock was let go could come after a switch its pair did not see).
    """
    path, args, kwargs = call
    with board.lock:
        before = board.changes
        current, pytorch, on = board.forwards(name, path)

        def run_pytorch() -> Any:
            return pytorch(*args, **kwargs)

        def run_other() -> Any:
            return (pytorch if aa else current)(*args, **kwargs)

        if path not in repeats:
            repeats[path] = max(clock.calibrate(run_pytorch), clock.calibrate(run_other))
        t_pytorch, t_other = interleaved_pair(
            clock, run_pytorch, run_other, repeats[path], b_first=index % 2 == 1
        )
        if board.changes != before:  # a kernel that raised fell back mid-pair: its halves differ
            return None
        found = named(path)
        ended = time.time()
    return t_pytorch, t_other, on and not aa, repeats[path], found, ended


def compare_layer(
    board: Switches,
    captured: CapturedInputs,
    name: str,
    *,
    run_id: str,
    instances: Instances = None,
    pairs: int | None = None,
    precision: float = DEFAULT_PRECISION,
    budget_s: float = DEFAULT_BUDGET_S,
    calibration_pairs: int = CALIBRATION_PAIRS,
    reference: bool = True,
    switch_on: bool = True,
    conclude: bool = True,
) -> Iterator[Record]:
    """Divergence per instance, an A/A calibration, latency pairs round-robin, then a verdict.

    Latency pairs run `pairs` rounds over the instances when given; otherwise until the 95%
    interval of the median speedup is within `precision` of it (after at least `MIN_PAIRS` pairs
    and `MIN_SECONDS`), and in either case no longer than `budget_s` seconds. The A/A pairs
    (PyTorch against PyTorch, the same way, on the same inputs) give the noise floor the verdict
    must clear. The last record is a
    `LayerVerdict` (unless `conclude=False`). With `switch_on=False` nothing is switched: instances
    on PyTorch are measured as they are (their records say `kernel_on=False`); this is what a live
    dashboard run does.
    """
    check_sampling(pairs, precision, budget_s)
    paths = board.select(name, instances)
    calls = calls_for(captured, name, paths)
    clock = Clock(board.device)
    paths_called = [path for path, _, _ in calls]
    with (
        kernels_on_for(board, name, paths_called) if switch_on else contextlib.nullcontext(),
        _origins(board, name, calls) as origin,
    ):
        divergences, ignores_input = yield from output_divergences(
            board,
            name,
            calls,
            lambda path, values: Record(run_id, values, name, path, provenance=origin(path)),
            reference=reference,
        )
        repeats: dict[str, int] = {}
        ran: dict[int, tuple[str, Provenance]] = {}  # each pair's instance and what ran it
        named: dict[str, tuple[Provenance, float]] = {}  # the pair just timed: read in its lock hold

        def pair(call: Call, index: int, aa: bool) -> tuple[float, float, bool, int] | None:
            timed = _pair(clock, board, name, call, repeats, index, aa=aa, named=origin)
            if timed is None:
                return None
            t_pytorch, t_other, on, repeat, found, ended = timed
            named[call[0]] = (found, ended)
            return t_pytorch, t_other, on, repeat

        def pair_record(call: Call, values: Any) -> Record:
            found, ended = named.pop(call[0])
            if isinstance(values, LayerLatency):
                ran[id(values)] = (call[0], found)
            return Record(run_id, values, name, call[0], time=ended, provenance=found)

        aa_ratios, samples, stopped_by = yield from interleaved_series(
            pair,
            calls,
            pair_record,
            calibration_pairs=calibration_pairs,
            stop=StopRule(pairs, precision, budget_s),
            stalls=lambda call: StallWatch(copy_seconds(2 * tensor_bytes(call[1], call[2]))),
        )
        if not conclude:
            return
        samples, said = _one_candidates(samples, ran, origin)
        yield Record(
            run_id,
            layer_verdict(samples, aa_ratios, divergences, calls, ignores_input, stopped_by),
            name,
            provenance=said or origin(calls[0][0]),
        )


def _ran_key(found: Provenance) -> tuple[str, str, str] | None:
    """The candidate a provenance names (kernel id, code path, label); None: PyTorch."""
    return (found.kernel_id, found.isa or "", found.candidate or "") if found.kernel_id else None


def _one_candidates(
    samples: list[LayerLatency],
    ran: dict[int, tuple[str, Provenance]],
    origin: Callable[[str], Provenance],
) -> tuple[list[LayerLatency], Provenance | None]:
    """The pairs a verdict may speak for, and the provenance it names: a switch mid-comparison (a
    dashboard's click during a Run) left pairs of two candidates (or of the kernel and PyTorch) in
    one series, and a verdict over both would name the new candidate with the old one's speed.
    Kept: each instance's pairs measured on what it runs now; where none was measured since the
    switch, the pairs of the candidate that ran most, named as such. None: one candidate throughout."""
    keys = {id(s): _ran_key(ran[id(s)][1]) for s in samples if id(s) in ran}
    if len(set(keys.values())) < 2:
        return samples, None
    now = {path: _ran_key(origin(path)) for path, _ in ran.values()}
    current = [s for s in samples if id(s) in ran and keys[id(s)] == now[ran[id(s)][0]]]
    if current:
        return current, origin(ran[id(current[-1])][0])
    counts: dict[tuple[str, str, str] | None, int] = {}
    for key in keys.values():
        counts[key] = counts.get(key, 0) + 1
    most = max(counts, key=lambda key: counts[key])
    kept = [s for s in samples if keys.get(id(s), most) == most]
    return kept, ran[id(kept[-1])][1]


@contextlib.contextmanager
def _origins(board: Switches, name: str, calls: list[Call]) -> Iterator[Callable[[str], Provenance]]:
    """An instance's provenance by path, read on first use (60 instances must not delay the first
    record), from its first call, and read again after any change of the model's switches: a
    candidate switched in during a comparison (a dashboard's click mid-Run) names the pairs
    measured from then on.

    Kept with the change count it was read at, and read with it under the board's lock, so it is
    never that of a switch half made nor kept past a switch: a pair's `_pair` asks for it in the
    lock hold it was timed in, where a cached one costs a comparison of two integers. (Clearing
    the cache from the switch's event, as before, came too late: observers run after the switch
    lets go of the lock, and a pair timed in between was named by the state before it.)"""
    first: dict[str, tuple[tuple, dict]] = {}
    for path, args, kwargs in calls:
        first.setdefault(path, (args, kwargs))
    found: dict[str, tuple[int, Provenance]] = {}

    def origin(path: str) -> Provenance:
        with board.lock:
            count = board.changes
            known = found.get(path)
            if known is None or known[0] != count:
                known = found[path] = (count, provenance(board, name, path, *first[path]))
            return known[1]

    yield origin


def output_divergences(
    board: Switches,
    name: str,
    calls: list[Call],
    record: Callable[[str, LayerDivergence], Record],
    *,
    reference: bool = True,
) -> Generator[Record, None, tuple[list[LayerDivergence], bool]]:
    """Each call's output, kernel against PyTorch and each against a float64 run (unless
    `reference=False`): yields a record per instance (`record(path, values)`) and returns the
    divergences and whether the kernel ignores its input (one instance tells)."""
    import torch

    divergences: list[LayerDivergence] = []
    ignores_input = checked_input = False
    for path, args, kwargs in calls:
        with board.lock, torch.no_grad():
            current, pytorch, on = board.forwards(name, path)
            kernel_out = first_tensor(current(*args, **kwargs))
            pytorch_out = first_tensor(pytorch(*args, **kwargs))
            if on and kernel_out is not None and not checked_input:
                ignores_input = ignores_its_input(current, pytorch, args, kwargs, kernel_out)
                checked_input = True
        ref = None
        if reference:
            target = pytorch.__self__
            with contextlib.suppress(Exception):  # a layer that cannot run in float64: no reference
                ref = first_tensor(float64_reference(target, args, kwargs))
        if kernel_out is None or pytorch_out is None:
            continue
        found = LayerDivergence(**divergence(kernel_out, pytorch_out, ref), kernel_on=on)
        divergences.append(found)
        yield record(path, found)
    return divergences, ignores_input


def compare_values(
    board: Switches,
    captured: CapturedInputs,
    name: str,
    *,
    run_id: str,
    instances: Instances = None,
    runs: int = 10,
) -> Iterator[Record]:
    """The values alone, no timing: each instance's output against PyTorch and float64, then how
    often `runs` repeated calls agree bitwise (`determinism`); instances on PyTorch are switched on
    for it and back after."""
    paths = board.select(name, instances)
    calls = calls_for(captured, name, paths)
    with kernels_on_for(board, name, [path for path, _, _ in calls]), _origins(board, name, calls) as origin:
        yield from output_divergences(
            board,
            name,
            calls,
            lambda path, values: Record(run_id, values, name, path, provenance=origin(path)),
        )
        yield from determinism(board, captured, name, run_id=run_id, instances=instances, runs=runs)


def interleaved_series(
    pair: Callable[[Any, int, bool], tuple[float, float, bool, int] | None],
    items: Sequence[Any],
    record: Callable[[Any, Any], Record],
    *,
    calibration_pairs: int,
    stop: StopRule,
    stalls: Callable[[Any], StallWatch],
    mode: str = INFERENCE,
) -> Generator[Record, None, tuple[list[float], list[LayerLatency], str]]:
    """A/A pairs, then interleaved pairs round-robin over `items` until `stop` says; yields a record
    per pair and returns (A/A ratios, samples, why it stopped).

    The one loop of every comparison (inference and training, `mode`): `pair(item, index, aa)`
    times one pair (None: a pair a switch landed in, neither recorded nor counted; an A/A pair so
    dropped is not made up), `record(item, values)` the record it makes for that item; `stalls(item)` makes
    the watch that flags that item's pairs where the machine, not the op, took the time (one per
    item: instances of one layer may differ in size, as a model's Linear layers do).
    """
    watches = [stalls(item) for item in items]
    aa_ratios: list[float] = []
    for index in range(calibration_pairs):
        item = items[index % len(items)]
        timed = pair(item, index, True)
        if timed is None:
            continue
        first, second, _, repeat = timed
        watches[index % len(items)].observe(first, second, aa=True)
        aa_ratios.append(first / second)
        yield record(item, LayerCalibration(first, second, first / second, repeat, mode=mode))
    samples: list[LayerLatency] = []
    stopped_by = None
    while stopped_by is None:
        for item, watch in zip(items, watches, strict=True):
            timed = pair(item, stop.rounds, False)
            if timed is None:
                continue
            t_pytorch, t_other, on, repeat = timed
            stalled = watch.observe(t_pytorch, t_other)
            sample = LayerLatency(t_pytorch, t_other, t_pytorch / t_other, on, repeat, mode, stalled)
            samples.append(sample)
            yield record(item, sample)
        stopped_by = stop.after_round([s.speedup for s in samples])
    return aa_ratios, samples, stopped_by


def layer_verdict(
    samples: Sequence[LayerLatency],
    aa_ratios: list[float],
    divergences: Sequence[LayerDivergence | GradientDivergence],
    calls: list[Call],
    ignores_input: bool,
    stopped_by: str,
    mode: str = INFERENCE,
) -> LayerVerdict:
    """The layer's conclusion: its `Comparison` (pairs on a kernel when there are any, else A/A)."""
    found = Comparison.of_pairs(samples, aa_ratios, divergences)
    _, args, kwargs = calls[0]
    notes = found.notes(
        bytes_moved=2 * tensor_bytes(args, kwargs),  # inputs read, and an output at least that large
        ignores_input=ignores_input,
    )
    return LayerVerdict(
        instances=len(calls),
        **found.fields(),  # type: ignore[arg-type]
        accuracy=found.accuracy,
        stopped_by=stopped_by,
        pytorch_s=found.pytorch_median_s,
        kernel_s=found.kernel_median_s,
        kernel_on=found.kernel_on,
        notes=notes,
        mode=mode,
    )


def determinism(
    board: Switches,
    captured: CapturedInputs,
    name: str,
    *,
    run_id: str,
    instances: Instances = None,
    runs: int = 10,
) -> Iterator[Record]:
    """Repeat each call `runs` times: how often kernel, PyTorch and deterministic PyTorch repeat bitwise."""
    import torch

    paths = board.select(name, instances)
    calls = calls_for(captured, name, paths)

    def identical_rate(fn: Any, args: tuple, kwargs: dict) -> float:
        first = first_tensor(fn(*args, **kwargs))
        if first is None:  # no tensor to compare: every run alike, as far as one can tell
            return 1.0
        same = sum(_equal(first_tensor(fn(*args, **kwargs)), first) for _ in range(runs - 1))
        return (same + 1) / runs

    with kernels_on_for(board, name, [path for path, _, _ in calls]), _origins(board, name, calls) as origin:
        for path, args, kwargs in calls:
            with board.lock, torch.no_grad():
                current, pytorch, on = board.forwards(name, path)
                kernel_rate = identical_rate(current, args, kwargs)
                pytorch_rate = identical_rate(pytorch, args, kwargs)
                was = torch.are_deterministic_algorithms_enabled()
                torch.use_deterministic_algorithms(True)
                try:
                    deterministic_rate = identical_rate(pytorch, args, kwargs)
                finally:
                    torch.use_deterministic_algorithms(was)
            values = LayerDeterminism(runs, kernel_rate, pytorch_rate, deterministic_rate, on)
            yield Record(run_id, values, name, path, provenance=origin(path))


def _equal(found: torch.Tensor | None, first: torch.Tensor) -> bool:
    """Whether a repeat's output is bitwise the first one's (a repeat without a tensor is not)."""
    import torch

    return found is not None and torch.equal(found, first)
