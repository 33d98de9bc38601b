"""Memory against PyTorch: what a kernel allocates per call, keeps, and makes the model hold.

Memory is half of why a kernel is picked: flash attention's headline is memory that grows linearly
with the sequence where eager's grows with its square, a quantized Linear's is the weight bytes it
reads, and a kernel may keep a workspace or packed weights. This kind measures, on the captured
inputs the time comparison uses:

- per layer (`LayerMemory`, one record per instance and repeat): the **peak** of one call, the
  bytes allocated during it above what was allocated before it (its output included), and the
  **retained** bytes, still allocated once the call's outputs are dropped (packed weights a kernel
  caches on its first call, a workspace it keeps), of the kernel (the candidate on now, or the
  default, as `compare` switches it) and of PyTorch, on the same inputs;
- attention's peak as a curve over the sequence (`AttentionMemory`): the first attention module's
  call at the capture's length and at longer ones (the capture's prompt repeated, captured again),
  through the row's kernel, the model's PyTorch attention (sdpa: what ratios divide by) and eager;
- the model (`ModelWeights`, `ModelPrefillMemory`): the weight bytes it holds (parameters, buffers,
  and tensors kernels keep on their modules, each storage once) and the part of them one forward
  passes to an op (read through a `TorchDispatchMode`; an op that takes a tensor counts it whole, so
  an embedding counts its table), and the peak of a prefill on the captured prompt, with the
  compared layers' kernels on and all-PyTorch. The bundled quantized Linear keeps its packed weight
  beside the float one (PyTorch's side runs on it): held grows by the packed bytes, read shrinks to
  them. A kernel that packed before the measurement (at the capture's forward, or any call before)
  retains nothing in its layer's calls; the model's kept bytes say what it holds. Not counted: an
  original tensor a kernel replaced that only the switch's guard keeps alive (megablocks' experts;
  `switching/guard.py` knows those bytes, the board does not say them).

How the bytes are read. CPU: torch's own profiler with `profile_memory=True` (kineto): c10's CPU
allocator reports every allocation and free it serves while the profiler is on in the calling
thread, each with its size, so the running sum of those events gives the peak and what is left.
That sees what goes through ATen's allocator, inside a C++ kernel too (`at::empty` for an output, a
split-key scratch, a packed weight made with torch ops). It cannot see memory a kernel takes with
plain `malloc`/`new` (the bundled kernels' per-thread `kx::Scratch` buffers, a library's own
workspace), nor allocations made on other threads (an OpenMP worker inside a parallel region: the
profiler's state is per thread), nor the frees of tensors allocated before the call. A
`TorchDispatchMode` would see only each op's outputs, not a kernel's temporaries; CPU allocator
statistics like CUDA's do not exist in torch 2.13 (`torch.accelerator.memory_stats` needs an
accelerator). CUDA: the caching allocator's own counters (`reset_peak_memory_stats`,
`max_memory_allocated`, `memory_allocated`), which see every allocation made through it, from any
stream; memory a library takes with `cudaMalloc` itself is not counted either.

Memory is nearly deterministic, so intervals (`stats.median_interval` over the repeats after each
measurement's first call, which may pack weights: 6 by default, the fewest whose min-max interval
covers 95%) are narrow; a difference is called only when the kernel/PyTorch ratio's interval clears
1 by more than `RELATIVE_FLOOR` and the medians differ by more than one page (`PAGE`): the
allocator's granularity, below which resident memory does not move. The verdict reads "smaller",
"larger" or "no difference we can detect here". The first CPU measurement sets KINETO_LOG_LEVEL=6
where the user has not set it: kineto otherwise writes two lines to stderr per measured call.
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.measure.kinds.kind import Kind, LayerRequest, RecordSource
from kernel_explorer.measure.records import Record
from kernel_explorer.measure.stats import Interval, median_interval
from kernel_explorer.measure.summary import Column, IntervalCell, NumberCell, Summary
from kernel_explorer.measure.verdict import Verdict

if TYPE_CHECKING:
    import plotly.graph_objects as go
    from torch import nn

    from kernel_explorer.measure.capture import CapturedInputs
    from kernel_explorer.measure.runner import Measurement

#: calls per side and instance: a first call (which may pack weights, so peaks leave it out) and six
#: more, the fewest whose min-max interval covers 95% (1 - 2/2^6)
DEFAULT_REPEATS = 7
#: attention's curve: these multiples of the capture's length ...
CURVE_FACTORS = (1, 4, 16, 64)
#: ... up to this many tokens (or the model's max_position_embeddings): eager's scores at 1024
#: tokens and 9 heads are 38 MB a call, and a capture forward of SmolLM2 at that length about a second
CURVE_MAX_TOKENS = 1024
#: a difference smaller than one page does not change what the process holds
PAGE = 4096
#: ... nor one within 1% of PyTorch's bytes
RELATIVE_FLOOR = 0.01

KERNEL, PYTORCH = "kernel", "pytorch"  # the two sides of a layer or model record
BASELINE = "baseline"  # the attention implementation ratios divide by (the model's PyTorch attention)
#: time's sampling options a `compare` call may pass along: they do not apply to memory
_TIME_OPTIONS = frozenset({"pairs", "precision", "budget_s", "calibration_pairs", "determinism_runs"})
#: instance attributes that are torch's bookkeeping, never tensors a kernel keeps
_BOOKKEEPING = frozenset({"_parameters", "_buffers", "_modules", "forward"})


# -- records -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerMemory:
    """One call of an instance through the kernel and one through PyTorch, on the same captured
    inputs: each call's peak (bytes allocated during it above what was allocated before, its output
    included) and what it retained once its outputs were dropped."""

    kind: ClassVar[str] = "layer_memory"
    kernel_peak_bytes: int
    pytorch_peak_bytes: int
    kernel_retained_bytes: int
    pytorch_retained_bytes: int
    tokens: int  # the capture's length
    call: int  # 0: the first call of this measurement (a kernel packing its weights retains them there)
    implementation: str = ""  # what the kernel side ran (the candidate's label; "PyTorch" when off)
    kernel_on: bool = True  # False: the instance ran PyTorch on both sides
    device: str = "cpu"


@dataclass(frozen=True)
class AttentionMemory:
    """One call of the first attention module through one implementation at one length."""

    kind: ClassVar[str] = "attention_memory"
    implementation: str  # "bundled/flash_attn", "sdpa", "eager", ...
    role: str  # "kernel" (the row's kernel), "baseline" (the model's PyTorch attention), "pytorch"
    tokens: int
    peak_bytes: int
    retained_bytes: int
    call: int
    kernel_on: bool = False  # the implementation is a kernel (a kernel that failed to switch: False)
    device: str = "cpu"


@dataclass(frozen=True)
class ModelWeights:
    """The weight bytes of the model on one side: held (parameters, buffers and tensors kernels keep
    on their modules, each storage once), of which kept (the kernels' own: packed weights), and
    read (those one forward on the captured prompt passes to an op)."""

    kind: ClassVar[str] = "model_weights"
    side: str  # "kernel" (the compared layers' kernels on) or "pytorch" (every layer on PyTorch)
    held_bytes: int
    kept_bytes: int
    read_bytes: int
    kernels: str = ""  # the layers with a kernel on, comma-separated


@dataclass(frozen=True)
class ModelPrefillMemory:
    """One prefill (a forward on the captured prompt) on one side: its peak and what it retained."""

    kind: ClassVar[str] = "model_prefill_memory"
    side: str
    tokens: int
    peak_bytes: int
    retained_bytes: int
    call: int
    device: str = "cpu"


RECORDS = (LayerMemory, AttentionMemory, ModelWeights, ModelPrefillMemory)


# -- reading the bytes of one call ---------------------------------------------------------------


@dataclass(frozen=True)
class Allocation:
    """What one call allocated: its peak above the bytes allocated before it, and what it left."""

    peak_bytes: int
    retained_bytes: int


def allocated_during(call: Callable[[], Any], device: str = "cpu") -> Allocation:
    """Run `call()`, drop what it returns, and read the bytes it allocated (see the module doc)."""
    if device == "cpu":
        return _cpu_allocation(call)
    if device == "cuda":
        return _cuda_allocation(call)
    raise KernelExplorerError(
        f"Memory is measured on cpu and cuda; the model is on {device!r}: move it to one of them."
    )


def _cpu_allocation(call: Callable[[], Any]) -> Allocation:
    """The CPU allocator's events under torch's profiler, summed in time order."""
    from torch.autograd.profiler import profile

    # kineto writes two log lines per profiled block to the process's stderr (USDT profiler_start /
    # profiler_stop) unless told otherwise before its first use; a user's own level is kept
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    try:
        with profile(profile_memory=True, use_kineto=True) as profiled:
            output = call()
            del output
    except RuntimeError as error:
        if "profiler" in str(error).lower() and "already" in str(error).lower():
            raise KernelExplorerError(
                "Memory is read through torch's profiler, which is already on in this thread: "
                "measure memory outside your own torch.profiler block."
            ) from error
        raise
    results: Any = getattr(profiled, "kineto_results", None)  # set once the profile closed; untyped
    events: list[Any] = [e for e in results.events() if e.name() == "[memory]"]
    running = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        if event.device_type().name != "CPU":
            continue
        running += event.nbytes()
        peak = max(peak, running)
    return Allocation(peak, max(running, 0))


def _cuda_allocation(call: Callable[[], Any]) -> Allocation:
    """The CUDA caching allocator's counters around the call (synchronized, so the call is done)."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    output = call()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del output
    return Allocation(max(peak, 0), max(torch.cuda.memory_allocated() - before, 0))


# -- per layer ------------------------------------------------------------------------------------


def _label(board: Any, name: str, path: str) -> str:
    """What the instance runs now, as a reader names it: the candidate's label, else the kernel id."""
    (now,) = board.running(name, [path])
    if not now.is_kernel:
        return "PyTorch"
    return now.candidate or now.kernel_id or now.name


def _tokens(board: Any, args: tuple[Any, ...]) -> int:
    """The capture's length in tokens (from the board, else the first tensor's second-to-last dim)."""
    from kernel_explorer.measure.capture import first_tensor

    tokens = board.trial_tokens()
    if tokens:
        return int(tokens)
    first = first_tensor(args)
    return int(first.shape[-2]) if first is not None and first.dim() >= 2 else 0


def layer_memory(
    board: Any,
    captured: CapturedInputs,
    name: str,
    *,
    run_id: str,
    instances: str | list[str] | None = None,
    repeats: int = DEFAULT_REPEATS,
    switch_on: bool = True,
) -> Iterator[Record]:
    """`repeats` rounds over the layer's instances: each instance's captured call through what it
    runs now (its kernel, switched on for the measurement where it is off, as `compare` does) and
    through PyTorch, one `LayerMemory` per call pair. Read under the board's lock, so a switch made
    meanwhile shows in the next pair."""
    import torch

    from kernel_explorer.measure.layer_comparison import calls_for, kernels_on_for
    from kernel_explorer.measure.provenance import provenance

    paths = board.select(name, instances)
    calls = calls_for(captured, name, paths)
    tokens = _tokens(board, calls[0][1])
    switched = (
        kernels_on_for(board, name, [p for p, _, _ in calls]) if switch_on else contextlib.nullcontext()
    )
    with switched:
        origins: dict[str, Any] = {}
        for call in range(repeats):
            for path, args, kwargs in calls:
                with board.lock, torch.no_grad():
                    current, pytorch, on = board.forwards(name, path)
                    label = _label(board, name, path) if on else "PyTorch"
                    kernel = allocated_during(functools.partial(current, *args, **kwargs), board.device)
                    reference = allocated_during(functools.partial(pytorch, *args, **kwargs), board.device)
                if path not in origins:
                    origins[path] = provenance(board, name, path, args, kwargs)
                values = LayerMemory(
                    kernel.peak_bytes,
                    reference.peak_bytes,
                    kernel.retained_bytes,
                    reference.retained_bytes,
                    tokens,
                    call,
                    label,
                    on,
                    board.device,
                )
                yield Record(run_id, values, name, path, provenance=origins[path])


# -- attention over the sequence --------------------------------------------------------------------


def curve_lengths(
    tokens: int, model: nn.Module | None = None, factors: Sequence[int] = CURVE_FACTORS
) -> list[int]:
    """The curve's lengths for a capture of `tokens`: `factors` times it, capped at `CURVE_MAX_TOKENS`
    and the model's `max_position_embeddings` (a length past the cap is measured once, at the cap)."""
    limit = CURVE_MAX_TOKENS
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        limit = min(limit, positions)
    return sorted({min(tokens * factor, limit) for factor in factors if tokens > 0})


def repeated_prompt(kwargs: Mapping[str, Any], length: int) -> dict[str, Any]:
    """The capture's model call with its tokens (and attention mask) repeated to `length`; other
    keywords (positions, caches) dropped, so the model makes its own."""
    import torch

    ids = kwargs.get("input_ids")
    if not isinstance(ids, torch.Tensor) or ids.dim() < 1 or ids.shape[-1] == 0:
        raise KernelExplorerError(
            "Attention's memory curve repeats the captured prompt's token ids; this capture has no "
            "input_ids: capture with a prompt or a tensor of token ids, or pass lengths=()."
        )
    tokens = int(ids.shape[-1])
    repeats = -(-length // tokens)
    found: dict[str, Any] = {}
    for key in ("input_ids", "attention_mask"):
        value = kwargs.get(key)
        if isinstance(value, torch.Tensor) and value.shape[-1] == tokens:
            found[key] = value.repeat(*([1] * (value.dim() - 1)), repeats)[..., :length]
    return found


def _implementations(board: Any, name: str, candidates: Sequence[Any] | None) -> list[tuple[str, Any]]:
    """(role, how to switch it on) for the curve: each kernel asked for (None: the one on now, or
    the default), the model's PyTorch attention (the door's baseline), and eager beside it."""
    door = board.doors[name]
    found: list[tuple[str, Any]] = [(KERNEL, chosen) for chosen in (candidates or [None])]
    found.append((BASELINE, None))
    if getattr(door, "baseline", "sdpa") != "eager":
        found.append((PYTORCH, "eager"))
    return found


@contextlib.contextmanager
def _running(board: Any, name: str, role: str, chosen: Any) -> Iterator[None]:
    """The attention row switched to what `role` measures for the block, as it was after."""
    from kernel_explorer.measure.layer_comparison import kernels_on_for

    if role == BASELINE:
        yield
    elif role == KERNEL and chosen is None:
        with kernels_on_for(board, name, list(board.select(name))):
            yield
    else:
        switch = lambda: board.on(name, candidate=chosen)  # noqa: E731
        with board.holding(switch, keep_others=True):
            yield


def _eager_mask(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The call with its causal mask made, where it was captured without one: the model builds eager's
    mask once per forward, outside the attention function, so no call of eager pays for it."""
    from kernel_explorer._backend.attention_interface import causal_mask

    if len(args) < 4 or args[3] is not None:
        return args
    return (*args[:3], causal_mask(args[0], args[1], kwargs.get("sliding_window")), *args[4:])


def attention_memory(
    board: Any,
    *,
    run_id: str,
    lengths: Sequence[int] | None = None,
    repeats: int = DEFAULT_REPEATS,
    candidates: Sequence[Any] | None = None,
) -> Iterator[Record]:
    """Attention's peak at each length (None: `curve_lengths` of the capture), through the row's
    kernel, the model's PyTorch attention and eager, on the first attention module's call captured
    at that length: one `AttentionMemory` per implementation, length and repeat."""
    import torch

    from kernel_explorer.measure.capture import capture_inputs

    door = board.attention
    if door is None:
        return
    name = door.group.name
    path = board.select(name)[0]
    call = board.model_inputs()
    if call is None:
        raise KernelExplorerError("Attention's memory curve needs the captured prompt: capture() first.")
    prompt = int(call["input_ids"].shape[-1]) if "input_ids" in call else 0
    wanted = list(lengths) if lengths is not None else curve_lengths(prompt, board.model)
    captured: dict[int, tuple[tuple[Any, ...], dict[str, Any]]] = {}
    for length in wanted:
        found = capture_inputs(board, repeated_prompt(call, length), only={(name, path)})
        calls = found.calls.get((name, path))
        if calls:
            captured[length] = calls[0]
    for role, chosen in _implementations(board, name, candidates):
        with _running(board, name, role, chosen):
            for length, (args, kwargs) in captured.items():
                for repeat in range(repeats):
                    with board.lock, torch.no_grad():
                        current, pytorch, on = board.forwards(name, path)
                        function = pytorch if role == BASELINE else current
                        implementation = _attention_name(board, name, path, role, on)
                        given = _eager_mask(args, kwargs) if implementation == "eager" else args
                        used = allocated_during(functools.partial(function, *given, **kwargs), board.device)
                    values = AttentionMemory(
                        implementation,
                        role,
                        length,
                        used.peak_bytes,
                        used.retained_bytes,
                        repeat,
                        kernel_on=on and role == KERNEL,
                        device=board.device,
                    )
                    yield Record(run_id, values, name, path)


def _attention_name(board: Any, name: str, path: str, role: str, on: bool) -> str:
    """The implementation a curve's record names: the baseline's name, or what runs now."""
    door = board.doors[name]
    if role == BASELINE:
        return str(getattr(door, "baseline", "PyTorch"))
    (now,) = board.running(name, [path])
    return (now.candidate or now.kernel_id or now.name) if on else (now.name or "PyTorch")


# -- the model --------------------------------------------------------------------------------------


def _storage_key(tensor: Any) -> int | None:
    """The address of a tensor's storage (views of one storage share it), or None without one."""
    try:
        return int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # a meta, sparse or functional tensor
        return None


def _storage_bytes(tensor: Any) -> int:
    return int(tensor.untyped_storage().nbytes())


def _tensors_in(value: Any) -> Iterator[Any]:
    """The tensors in an attribute's value: a tensor, or any tuple (a NamedTuple), list or dict of them."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item)


def weight_storages(model: nn.Module) -> tuple[dict[int, int], dict[int, int]]:
    """({storage: bytes} of the parameters and buffers, {storage: bytes} of the other tensors the
    modules hold as attributes: what kernels keep, such as a packed weight); each storage once."""
    owned: dict[int, int] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        key = _storage_key(tensor)
        if key is not None and key:
            owned[key] = _storage_bytes(tensor)
    kept: dict[int, int] = {}
    for module in model.modules():
        for attribute, value in vars(module).items():
            if attribute in _BOOKKEEPING or attribute.endswith("_hooks"):
                continue
            for tensor in _tensors_in(value):
                key = _storage_key(tensor)
                if key and key not in owned:
                    kept[key] = _storage_bytes(tensor)
    return owned, kept


def storages_read(forward: Callable[[], Any]) -> set[int]:
    """The storages of every tensor an op takes during `forward()` (a `TorchDispatchMode` on the op
    level, where a kernel's custom op shows its packed weight and hides the float one it left)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    seen: set[int] = set()

    class Reads(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            for leaf in tree_leaves((args, kwargs or {})):
                if isinstance(leaf, torch.Tensor):
                    key = _storage_key(leaf)
                    if key:
                        seen.add(key)
            return func(*args, **(kwargs or {}))

    with Reads():
        output = forward()
    del output
    return seen


def model_weights(model: nn.Module, forward: Callable[[], Any]) -> tuple[int, int, int]:
    """(held, kept, read) bytes of the model's weights now (see `ModelWeights`)."""
    owned, kept = weight_storages(model)
    read = storages_read(forward)
    every = {**owned, **kept}
    return sum(every.values()), sum(kept.values()), sum(size for key, size in every.items() if key in read)


def _kernels_on_where_off(board: Any, names: Iterable[str]) -> None:
    """Each layer's kernel (the default candidate) on where it is off; a layer none can run stays on
    PyTorch."""
    for name in names:
        off = [now.instance for now in board.running(name, board.select(name)) if not now.is_kernel]
        if off:
            with contextlib.suppress(KernelExplorerError):
                board.on(name, off)


def model_memory(
    board: Any, names: Sequence[str], *, run_id: str, repeats: int = DEFAULT_REPEATS
) -> Iterator[Record]:
    """The model's weights and `repeats` prefills on the captured prompt, first with the layers in
    `names` on their kernels (where one can run; what was on stays on), then with every layer on
    PyTorch. The sides are not interleaved: a kernel that packs its weights would pack them again
    after each all-PyTorch turn, and memory does not drift with the machine as time does."""
    from kernel_explorer.measure.capture import run_model
    from kernel_explorer.measure.model_comparison import all_pytorch, kernels_on

    call = board.model_inputs()
    if call is None:
        raise KernelExplorerError("The model's memory needs the captured prompt: capture() first.")
    tokens = int(call["input_ids"].shape[-1]) if "input_ids" in call else 0

    def forward() -> Any:
        return run_model(board.model, call)

    def side(label: str) -> Iterator[Record]:
        with board.lock:
            forward()  # a kernel that packs its weights on its first call has packed them
            held, kept, read = model_weights(board.model, forward)
            on = ",".join(kernels_on(board)) if label == KERNEL else ""
        yield Record(run_id, ModelWeights(label, held, kept, read, on))
        for repeat in range(repeats):
            with board.lock:
                used = allocated_during(forward, board.device)
            yield Record(
                run_id,
                ModelPrefillMemory(label, tokens, used.peak_bytes, used.retained_bytes, repeat, board.device),
            )

    with board.holding(lambda: _kernels_on_where_off(board, names), keep_others=True):
        yield from side(KERNEL)
    with all_pytorch(board):
        yield from side(PYTORCH)


# -- the plan ---------------------------------------------------------------------------------------


def _repeats(options: Mapping[str, Any]) -> int:
    repeats = options.get("repeats", DEFAULT_REPEATS)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats <= 0:
        raise KernelExplorerError(
            f"repeats must be a positive whole number of calls per side, got {repeats!r} "
            f"({DEFAULT_REPEATS}, the default, is the fewest whose interval covers 95%)."
        )
    return repeats


def _lengths(options: Mapping[str, Any]) -> tuple[int, ...] | None:
    lengths = options.get("lengths")
    if lengths is None:
        return None
    if isinstance(lengths, int) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in lengths
    ):
        raise KernelExplorerError(
            f"lengths must be a list of token counts for attention's memory curve (e.g. [16, 64, 256]; "
            f"[] for no curve), got {lengths!r}."
        )
    return tuple(sorted(set(lengths)))


def _chosen(board: Any, name: str, wanted: Sequence[str] | None) -> list[Any]:
    """The candidates of `name` the words name (None: one turn with what is on now, or the default)."""
    if not wanted:
        return [None]
    door = board.doors[name]
    found = list(dict.fromkeys(c for word in wanted for c in door.matching(word)))
    if not found:
        known = ", ".join(c.label for c in door.candidates()) or "none"
        raise KernelExplorerError(f"No candidate of {name!r} matches {list(wanted)}; its candidates: {known}")
    return found


def _with_candidate(board: Any, name: str, chosen: Any, instances: Any, measure: Measurement) -> Measurement:
    """`measure` with `chosen` switched on for `name` while it runs (None: as it is)."""
    if chosen is None:
        return measure

    def run(run_id: str) -> Iterator[Record]:
        switch = lambda: board.on(name, instances, candidate=chosen)  # noqa: E731
        with board.holding(switch, keep_others=True):
            yield from measure(run_id)

    return run


def plan(request: LayerRequest) -> list[Measurement]:
    """The measurements `compare(*names, measure="memory")` starts: each layer (once per candidate
    asked for), attention's curve when attention is among the names, then the model.

    Options: `repeats` (calls per side, default 6), `lengths` (the curve's token counts; default
    `CURVE_FACTORS` times the capture's, capped; [] for none), `model` (False: no model part).
    Time's sampling options are ignored; any other is one line naming these."""
    options = dict(request.options)
    unknown = set(options) - {"repeats", "lengths", "model"} - _TIME_OPTIONS
    if unknown:
        raise KernelExplorerError(
            "compare(measure='memory') takes repeats=, lengths= and model=, "
            f"not {', '.join(sorted(unknown))}."
        )
    if request.mode != "inference":
        raise KernelExplorerError(
            f"Memory is measured in inference mode (one forward per call), not {request.mode!r}: "
            "leave mode at 'inference' for measure='memory'."
        )
    repeats, lengths = _repeats(options), _lengths(options)
    board, names = request.board, list(request.names)
    for name in names:
        board.group(name)  # an unknown name: the one line naming the model's layers, before anything runs
    measurements: list[Measurement] = []
    for name in names:
        for chosen in _chosen(board, name, request.candidates):
            measure: Measurement = lambda run_id, n=name: layer_memory(  # noqa: E731
                board, request.inputs(False), n, run_id=run_id, instances=request.instances, repeats=repeats
            )
            measurements.append(_with_candidate(board, name, chosen, request.instances, measure))
    attention = board.attention.group.name if board.attention is not None else None
    if attention in names and lengths != ():
        kernels = None if not request.candidates else _chosen(board, attention, request.candidates)

        def curve(run_id: str) -> Iterator[Record]:
            request.inputs(False)  # the capture the curve repeats
            yield from attention_memory(
                board, run_id=run_id, lengths=lengths, repeats=repeats, candidates=kernels
            )

        measurements.append(curve)
    if options.get("model", True):

        def whole(run_id: str) -> Iterator[Record]:
            request.inputs(False)
            yield from model_memory(board, names, run_id=run_id, repeats=repeats)

        measurements.append(whole)
    return measurements


# -- the summary ------------------------------------------------------------------------------------


def memory_verdict(
    ratio: Interval | None, kernel_bytes: float, pytorch_bytes: float, *, kernel_on: bool = True
) -> Verdict:
    """Smaller, larger, or no difference: the kernel/PyTorch ratio's interval must clear 1 by more than
    `RELATIVE_FLOOR`, and the two medians differ by more than `PAGE` bytes."""
    if not kernel_on:
        return Verdict.KERNEL_OFF
    if abs(kernel_bytes - pytorch_bytes) <= PAGE:
        return Verdict.NO_DIFFERENCE
    if ratio is None:  # PyTorch allocated nothing
        return Verdict.LARGER
    if ratio.high < 1 - RELATIVE_FLOOR:
        return Verdict.SMALLER
    if ratio.low > 1 + RELATIVE_FLOOR:
        return Verdict.LARGER
    return Verdict.NO_DIFFERENCE


def _interval(values: Sequence[float]) -> Interval | None:
    return median_interval(values) if values else None


def _bytes_cell(values: Sequence[float]) -> IntervalCell | None:
    found = _interval(values)
    if found is None:
        return None
    return IntervalCell(found.median, found.low, found.high, "bytes", found.confidence, "repeats")


def _ratio_cell(found: Interval | None) -> IntervalCell | None:
    return (
        None
        if found is None
        else IntervalCell(found.median, found.low, found.high, "x", found.confidence, "repeats")
    )


def _ratios(pairs: Iterable[tuple[float, float]]) -> Interval | None:
    """The interval of kernel/PyTorch over pairs (pairs where PyTorch allocated nothing left out)."""
    return _interval([kernel / pytorch for kernel, pytorch in pairs if pytorch > 0])


def _steady(calls: Sequence[Any]) -> list[Any]:
    """The calls after each measurement's first (a first call may pack weights): all when there is one."""
    later = [c for c in calls if c.call > 0]
    return later or list(calls)


COLUMNS = (
    Column("layer", "Layer", what=True),
    Column("measure", "Measure", what=True, line=" {}"),
    Column("kernel", "Kernel", what=True, line=" ({})"),
    Column("tokens", "Tokens", "number", what=True, line=" at {} tokens"),
    Column("kernel_bytes", "Kernel bytes", "interval", line="kernel {}"),
    Column("pytorch_bytes", "PyTorch bytes", "interval", line=" against PyTorch {}"),
    Column("ratio", "Kernel / PyTorch", "interval", line="ratio {}"),
    Column("verdict", "Verdict", "verdict", line=" {}"),
    Column("kernel_kept", "Kept (kernel)", "number", line="kept: kernel {}"),
    Column("pytorch_kept", "Kept (PyTorch)", "number", line=", PyTorch {}"),
)

NOTES = (
    "peak per call: bytes allocated during one call above those before it, the output included, of the "
    "layer's largest instance (attention's curve: its first module), median [95% interval] over the "
    "repeats after the first, and their ratio pair by pair; kept: the most any call left allocated once "
    "its output was dropped (a first call packing its weights keeps them).",
    "weights held: parameters, buffers and tensors kernels keep on their modules; read: those one "
    "forward passes to an op (an embedding counts its whole table).",
    "CPU: what c10's allocator serves on the calling thread (torch's profiler); memory a kernel takes "
    "with malloc/new, or on OpenMP worker threads, is not seen.",
)


def summarize(source: RecordSource) -> Summary:
    """Every memory record of `source` as one table: a row per layer (and candidate), per attention
    implementation and length against the model's PyTorch attention, and the model's weights and
    prefill; `extra` carries each row's section, run and raw numbers for plots."""
    rows: list[dict[str, object]] = []
    extra: list[dict[str, object]] = []
    runs = {
        r.run_id
        for kind in ("layer_memory", "attention_memory", "model_weights", "model_prefill_memory")
        for r in source.records(kind)
    }

    def add(row: dict[str, object], more: dict[str, object]) -> None:
        rows.append(row)
        extra.append(more)

    for (run_id, layer, implementation), records in _grouped(
        source.records("layer_memory"), _layer_key
    ).items():
        add(*_layer_row(run_id, layer, implementation, records))
    for (run_id, tokens), records in _grouped(source.records("attention_memory"), _curve_key).items():
        for row in _curve_rows(run_id, tokens, records):
            add(*row)
    weights = _grouped(source.records("model_weights"), lambda r: r.run_id)
    prefills = _grouped(source.records("model_prefill_memory"), lambda r: r.run_id)
    for run_id in dict.fromkeys([*weights, *prefills]):
        for row in _model_rows(run_id, weights.get(run_id, []), prefills.get(run_id, [])):
            add(*row)
    columns = COLUMNS if len(runs) <= 1 else (Column("run", "Run"), *COLUMNS)
    if len(runs) > 1:
        rows = [{"run": more["run_id"], **row} for row, more in zip(rows, extra, strict=True)]
    return Summary("memory", KIND_TITLE, columns, tuple(rows), NOTES if rows else (), tuple(extra))


def _grouped(records: Iterable[Record], key: Callable[[Record], Any]) -> dict[Any, list[Record]]:
    found: dict[Any, list[Record]] = defaultdict(list)
    for record in records:
        found[key(record)].append(record)
    return dict(found)


def _layer_key(record: Record) -> tuple[str, str, str]:
    values = record.values
    label = values.implementation if values.kernel_on else "PyTorch"  # type: ignore[union-attr]
    return record.run_id, record.layer or "", label


def _curve_key(record: Record) -> tuple[str, int]:
    return record.run_id, record.values.tokens  # type: ignore[union-attr]


def _layer_row(
    run_id: str, layer: str, implementation: str, records: list[Record]
) -> tuple[dict[str, object], dict[str, object]]:
    """A layer's row: the peaks of its largest instance (by PyTorch's median peak: the call that sets
    the layer's high-water mark) and their ratio, pair by pair; the most any call of any instance kept."""
    values: list[LayerMemory] = [r.values for r in records]  # type: ignore[misc]
    by_instance: dict[str | None, list[LayerMemory]] = defaultdict(list)
    for record in records:
        by_instance[record.instance].append(record.values)  # type: ignore[arg-type]
    largest = max(
        by_instance.values(), key=lambda calls: statistics.median(c.pytorch_peak_bytes for c in calls)
    )
    steady = _steady(largest)
    kernel = [float(c.kernel_peak_bytes) for c in steady]
    pytorch = [float(c.pytorch_peak_bytes) for c in steady]
    ratio = _ratios((c.kernel_peak_bytes, c.pytorch_peak_bytes) for c in steady)
    on = any(v.kernel_on for v in values)
    verdict = memory_verdict(ratio, statistics.median(kernel), statistics.median(pytorch), kernel_on=on)
    row: dict[str, object] = {
        "layer": layer,
        "measure": "peak per call",
        "kernel": implementation,
        "tokens": values[0].tokens,
        "kernel_bytes": _bytes_cell(kernel),
        "pytorch_bytes": _bytes_cell(pytorch),
        "ratio": _ratio_cell(ratio) if on else None,
        "verdict": verdict,
        "kernel_kept": NumberCell(max(v.kernel_retained_bytes for v in values), "bytes"),
        "pytorch_kept": NumberCell(max(v.pytorch_retained_bytes for v in values), "bytes"),
    }
    more = {"section": "layer", "run_id": run_id, "instances": len(by_instance), "calls": len(values)}
    return row, more


def _curve_rows(
    run_id: str, tokens: int, records: list[Record]
) -> Iterator[tuple[dict[str, object], dict[str, object]]]:
    """At one length: a row per implementation that is not the baseline, against the baseline."""
    by_name: dict[tuple[str, str], list[AttentionMemory]] = defaultdict(list)
    for record in records:
        values: AttentionMemory = record.values  # type: ignore[assignment]
        by_name[(values.role, values.implementation)].append(values)
    base = next((calls for (role, _), calls in by_name.items() if role == BASELINE), [])
    base_name = next((name for role, name in by_name if role == BASELINE), "PyTorch")
    base_by_call = {c.call: float(c.peak_bytes) for c in base}
    pytorch = [float(c.peak_bytes) for c in _steady(base)]
    for (role, implementation), calls in by_name.items():
        peaks = [float(c.peak_bytes) for c in _steady(calls)]
        more: dict[str, object] = {
            "section": "attention",
            "run_id": run_id,
            "role": role,
            "implementation": implementation,
            "baseline": base_name,
        }
        if role == BASELINE:
            continue
        ratio = _ratios(
            (float(c.peak_bytes), base_by_call[c.call]) for c in _steady(calls) if c.call in base_by_call
        )
        on = role != KERNEL or any(c.kernel_on for c in calls)
        verdict = (
            memory_verdict(ratio, statistics.median(peaks), statistics.median(pytorch), kernel_on=on)
            if pytorch
            else Verdict.NOT_MEASURABLE
        )
        row: dict[str, object] = {
            "layer": "attention",
            "measure": "peak per call, by length",
            "kernel": implementation,
            "tokens": tokens,
            "kernel_bytes": _bytes_cell(peaks),
            "pytorch_bytes": _bytes_cell(pytorch),
            "ratio": _ratio_cell(ratio),
            "verdict": verdict,
            "kernel_kept": NumberCell(max(c.retained_bytes for c in calls), "bytes"),
            "pytorch_kept": NumberCell(max((c.retained_bytes for c in base), default=None), "bytes"),
        }
        yield row, more


def _model_rows(
    run_id: str, weights: list[Record], prefills: list[Record]
) -> Iterator[tuple[dict[str, object], dict[str, object]]]:
    """The model's weights held and read (one number per side: they do not vary), and its prefill peak."""
    sides: dict[str, ModelWeights] = {r.values.side: r.values for r in weights}  # type: ignore[union-attr,misc]
    kernel, pytorch = sides.get(KERNEL), sides.get(PYTORCH)
    on = bool(kernel is not None and kernel.kernels)
    label = kernel.kernels.replace(",", ", ") if kernel is not None and kernel.kernels else "none on"
    if kernel is not None and pytorch is not None:
        for measure, mine, theirs, kept in (
            ("weights held", kernel.held_bytes, pytorch.held_bytes, (kernel.kept_bytes, pytorch.kept_bytes)),
            ("weights read by a forward", kernel.read_bytes, pytorch.read_bytes, None),
        ):
            ratio = Interval(mine / theirs, mine / theirs, mine / theirs, 1, 1.0) if theirs else None
            row: dict[str, object] = {
                "layer": "model",
                "measure": measure,
                "kernel": label,
                "tokens": None,
                "kernel_bytes": NumberCell(mine, "bytes"),
                "pytorch_bytes": NumberCell(theirs, "bytes"),
                "ratio": NumberCell(mine / theirs if theirs else None, "x"),
                "verdict": memory_verdict(ratio, mine, theirs, kernel_on=on),
                "kernel_kept": NumberCell(kept[0], "bytes") if kept else None,
                "pytorch_kept": NumberCell(kept[1], "bytes") if kept else None,
            }
            yield row, {"section": "model", "run_id": run_id}
    by_side: dict[str, list[ModelPrefillMemory]] = defaultdict(list)
    for record in prefills:
        by_side[record.values.side].append(record.values)  # type: ignore[union-attr,arg-type]
    mine_calls, their_calls = _steady(by_side.get(KERNEL, [])), _steady(by_side.get(PYTORCH, []))
    if not mine_calls or not their_calls:
        return
    theirs_by_call = {c.call: float(c.peak_bytes) for c in their_calls}
    ratio = _ratios(
        (float(c.peak_bytes), theirs_by_call[c.call]) for c in mine_calls if c.call in theirs_by_call
    )
    peaks, reference = [float(c.peak_bytes) for c in mine_calls], [float(c.peak_bytes) for c in their_calls]
    row = {
        "layer": "model",
        "measure": "prefill peak",
        "kernel": label,
        "tokens": mine_calls[0].tokens,
        "kernel_bytes": _bytes_cell(peaks),
        "pytorch_bytes": _bytes_cell(reference),
        "ratio": _ratio_cell(ratio),
        "verdict": memory_verdict(
            ratio, statistics.median(peaks), statistics.median(reference), kernel_on=on
        ),
        "kernel_kept": NumberCell(max(c.retained_bytes for c in by_side[KERNEL]), "bytes"),
        "pytorch_kept": NumberCell(max(c.retained_bytes for c in by_side[PYTORCH]), "bytes"),
    }
    yield row, {"section": "model", "run_id": run_id}


# -- the figure -------------------------------------------------------------------------------------


def memory_figure(summary: Summary) -> go.Figure:
    """Left: a pair of bars per layer (kernel and PyTorch peak per call, with their intervals);
    right: attention's peak per call against the sequence length, a line per implementation (the
    baseline from its own numbers), log-log, so linear growth is a slope of 1 and quadratic of 2."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(
        rows=1, cols=2, subplot_titles=("Peak per call, per layer", "Attention: peak per call by length")
    )
    layers = [
        (row, more)
        for row, more in zip(summary.rows, summary.extra, strict=False)
        if more.get("section") == "layer"
    ]
    for key, name, colour in (("kernel_bytes", "kernel", "#1f77b4"), ("pytorch_bytes", "PyTorch", "#7f7f7f")):
        cells = [row.get(key) for row, _ in layers]
        figure.add_trace(
            go.Bar(
                x=[f"{row['layer']} ({row['kernel']})" for row, _ in layers],
                y=[c.median if isinstance(c, IntervalCell) else None for c in cells],
                error_y=_error_bars(cells),
                name=name,
                marker_color=colour,
                legendgroup=name,
            ),
            row=1,
            col=1,
        )
    lines: dict[str, list[tuple[int, IntervalCell]]] = defaultdict(list)
    for row, more in zip(summary.rows, summary.extra, strict=False):
        if more.get("section") != "attention":
            continue
        tokens = int(row["tokens"])  # type: ignore[call-overload]
        if isinstance(row.get("kernel_bytes"), IntervalCell):
            lines[str(row["kernel"])].append((tokens, row["kernel_bytes"]))  # type: ignore[arg-type]
        baseline = f"{more.get('baseline')} (PyTorch)"
        if isinstance(row.get("pytorch_bytes"), IntervalCell) and all(
            t != tokens for t, _ in lines[baseline]
        ):
            lines[baseline].append((tokens, row["pytorch_bytes"]))  # type: ignore[arg-type]
    for implementation, points in lines.items():
        points.sort(key=lambda p: p[0])
        figure.add_trace(
            go.Scatter(
                x=[t for t, _ in points],
                y=[c.median for _, c in points],
                error_y=_error_bars([c for _, c in points]),
                mode="lines+markers",
                name=implementation,
            ),
            row=1,
            col=2,
        )
    figure.update_yaxes(title_text="bytes", type="log", row=1, col=1)
    figure.update_xaxes(title_text="tokens", type="log", row=1, col=2)
    figure.update_yaxes(title_text="bytes", type="log", row=1, col=2)
    figure.update_layout(title=summary.title, barmode="group", template="plotly_white")
    return figure


def _error_bars(cells: Sequence[object]) -> dict[str, object]:
    """Plotly's asymmetric error bars from interval cells (0 where a cell has none)."""
    plus = [c.high - c.median if isinstance(c, IntervalCell) else 0.0 for c in cells]
    minus = [c.median - c.low if isinstance(c, IntervalCell) else 0.0 for c in cells]
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus}


KIND_TITLE = "Memory against PyTorch"
KIND = Kind("memory", KIND_TITLE, RECORDS, summarize, plan, figure=memory_figure)
