"""Whole-model comparisons beyond eager inference: a training step, and the model under torch.compile.

Training step: forward, cross-entropy of each position against the next token, backward to every
parameter that requires grad, with the model as switched (its kernels in `Mode.TRAINING`) against
all-PyTorch. Gradients come from `torch.autograd.grad`, so the model's `.grad` stays untouched. The
model runs in the mode it is in (`model.eval()` after `from_pretrained`): dropout in train mode would
make the two sides differ by chance, not by kernel.

torch.compile: recompiling at every switch would cost more than the measurement, so each side is
compiled once: the model as switched (kernels in `Mode.TORCH_COMPILE`), and a deep copy taken while
every layer runs PyTorch (`pytorch_copy`). Both warm up, then run interleaved. `compare_compiled`
times prefill only (`mode="torch.compile"`); `compare_compiled_inference` (`compiled=True`) times
prefill per length and greedy decode on a static KV cache (measure/compiled_decode.py), compiled +
kernels against compiled PyTorch (the headline) and against eager PyTorch (the copy uncompiled, on
Transformers' dynamic cache), checks the three agree and says what compiling cost.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import statistics
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.measure.capture import first_tensor, run_model
from kernel_explorer.measure.kinds.model.records import (
    CompileTime,
    ModelPair,
    ModelVerdict,
    TrainingAgreement,
)
from kernel_explorer.measure.layer_training import kernels_in_mode
from kernel_explorer.measure.model_comparison import (
    agreement,
    all_pytorch,
    kernels_on,
    model_verdict,
    sides,
    token_ids,
)
from kernel_explorer.measure.records import Record
from kernel_explorer.measure.stats import StallWatch
from kernel_explorer.measure.timing import Clock, interleaved_pair

if TYPE_CHECKING:
    import torch
    from torch import nn

    from kernel_explorer.measure.switches import Switches

TRAINING_STEP = "training step"
COMPILED_PREFILL = "compiled prefill"
COMPILED_DECODE = "compiled decode"
AGAINST_EAGER = " against eager PyTorch"  # the third side's measures: "compiled decode against eager PyTorch"
KERNEL_SIDE, COMPILED_SIDE, EAGER_SIDE = "compiled + kernels", "compiled PyTorch", "eager PyTorch"


def _trainable(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def training_step(model: nn.Module, input_ids: torch.Tensor) -> tuple[float, list[torch.Tensor | None]]:
    """(loss, gradient per trainable parameter) of one step: next-token cross-entropy, then backward."""
    import torch
    import torch.nn.functional as F

    params = [p for _, p in _trainable(model)]
    with torch.enable_grad():
        output = model(input_ids=input_ids)
        logits = getattr(output, "logits", None)
        logits = first_tensor(output) if logits is None else logits
        if logits is None:
            raise KernelExplorerError("The model's output has no logits to take a training step on.")
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), input_ids[:, 1:].flatten())
        grads = torch.autograd.grad(loss, params, allow_unused=True)
    return loss.item(), list(grads)


def _switched(board: Switches, mode: str) -> contextlib.AbstractContextManager[None]:
    """The instances on now, in `mode` for the block (re-switched with the same candidate if needed)."""
    return kernels_in_mode(board, mode, list(board.snapshot()), switch_off_ones=False)


def gradient_agreement(names: list[str], kernel: list[Any], pytorch: list[Any]) -> dict[str, Any]:
    """How two gradient lists agree, per parameter: the worst (relative L2 error) named, its max abs
    difference, the lowest cosine and the median relative error; a missing gradient counts as zeros."""
    import torch

    rows = []
    for name, k, p in zip(names, kernel, pytorch, strict=True):
        if k is None and p is None:
            continue
        k = torch.zeros_like(p) if k is None else k.double()
        p = torch.zeros_like(k) if p is None else p.double()
        diff = (k - p).norm().item()
        norm = p.norm().item()
        rel = diff / norm if norm > 0 else (0.0 if diff == 0 else float("inf"))
        both = k.norm().item() * norm
        cosine = (k.flatten() @ p.flatten()).item() / both if both > 0 else float(diff == 0)
        rows.append((rel, name, (k - p).abs().max().item(), cosine))
    if not rows:
        return {"parameters": 0, "worst_parameter": "", "worst_rel_err": 0.0, "worst_max_abs": 0.0,
                "min_cosine": 1.0, "median_rel_err": 0.0}  # fmt: skip
    rel, name, max_abs, _ = max(rows)
    return {
        "parameters": len(rows),
        "worst_parameter": name,
        "worst_rel_err": rel,
        "worst_max_abs": max_abs,
        "min_cosine": min(r[3] for r in rows),
        "median_rel_err": statistics.median(r[0] for r in rows),
    }


def _pairs(
    clock: Clock,
    board: Switches,
    run_kernel: Callable[[], object],
    run_pytorch: Callable[[], object],
    *,
    calibration_pairs: int,
    pairs: int,
    switch: bool,
) -> Iterator[tuple[float, float, bool]]:
    """A/A pairs (PyTorch twice, yielded with kernel s = the second PyTorch), then `pairs`
    interleaved (PyTorch s, kernel s, stalled) through the one interleaver, the stall watch's
    reference set by the A/A pairs; `switch`: the PyTorch side runs with every layer on PyTorch."""
    watch = StallWatch()
    for index in range(calibration_pairs):
        with all_pytorch(board) if switch else contextlib.nullcontext():
            first, second = interleaved_pair(
                clock, run_pytorch, run_pytorch, 1, index % 2 == 1, **sides(board, switch=False)
            )
        yield first, second, watch.observe(first, second, aa=True)
    for index in range(pairs):
        pytorch_s, kernel_s = interleaved_pair(
            clock, run_pytorch, run_kernel, 1, index % 2 == 1, **sides(board, switch=switch)
        )
        yield pytorch_s, kernel_s, watch.observe(pytorch_s, kernel_s)


def _records(
    board: Switches,
    timed: Iterator[tuple[float, float, bool]],
    calibration_pairs: int,
    measure: str,
    length: int,
    run_id: str,
    floor_hint: float = 0.0,
) -> Iterator[Record]:
    """The records of `_pairs`' output: a `ModelPair` per interleaved pair (the A/A ones give the
    floor; without any, `floor_hint`), then the measure's `ModelVerdict`, stalled pairs left out as
    at the layer level."""
    ratios: list[float] = []
    speedups: list[float] = []
    stalls: list[bool] = []
    for index, (pytorch_s, kernel_s, stalled) in enumerate(timed):
        if index < calibration_pairs:
            ratios.append(pytorch_s / kernel_s)
            continue
        speedups.append(pytorch_s / kernel_s)
        stalls.append(stalled)
        yield Record(run_id, ModelPair(measure, length, pytorch_s, kernel_s, pytorch_s / kernel_s, stalled))
    verdict = model_verdict(
        measure, length, speedups, ratios, floor_hint, on=kernels_on(board), stalled=stalls
    )
    yield Record(run_id, verdict)


def compare_training_step(
    board: Switches,
    *,
    run_id: str,
    lengths: tuple[int, ...] = (128,),
    pairs: int = 7,
    vocab_size: int,
    calibration_pairs: int = 3,
) -> Iterator[Record]:
    """One training step as switched (kernels in training mode) vs all-PyTorch, per length.

    Per length: a `TrainingAgreement` (loss and per-parameter gradient agreement, the worst parameter
    named), `calibration_pairs` A/A step pairs (the noise floor), `pairs` interleaved step pairs
    (`ModelPair`), and a `ModelVerdict` ("training step").
    """
    clock = Clock(board.device)
    names = [name for name, _ in _trainable(board.model)]
    with _switched(board, "training"):
        for length in lengths:
            ids = token_ids(vocab_size, length)
            with board.lock:
                instances_on = sum(now.is_kernel for now in board.running())
                kernel_loss, kernel_grads = training_step(board.model, ids)
                with all_pytorch(board):
                    pytorch_loss, pytorch_grads = training_step(board.model, ids)
            agreement = gradient_agreement(names, kernel_grads, pytorch_grads)
            del kernel_grads, pytorch_grads
            yield Record(
                run_id,
                TrainingAgreement(
                    tokens=length,
                    pytorch_loss=pytorch_loss,
                    kernel_loss=kernel_loss,
                    loss_abs_diff=abs(kernel_loss - pytorch_loss),
                    instances_on=instances_on,
                    **agreement,
                ),
            )

            def step(ids: torch.Tensor = ids) -> None:
                training_step(board.model, ids)

            timed = _pairs(
                clock, board, step, step, calibration_pairs=calibration_pairs, pairs=pairs, switch=True
            )
            yield from _records(board, timed, calibration_pairs, TRAINING_STEP, length, run_id)


def pytorch_copy(board: Switches) -> nn.Module:
    """A deep copy of the model taken while every layer runs PyTorch: the reference side of a
    compiled comparison, which no later switch of the model reaches (a switch would recompile)."""
    with board.lock, all_pytorch(board):
        return copy.deepcopy(board.model)


def compiled_sides(board: Switches) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(the model as switched, compiled; an all-PyTorch deep copy, compiled). Call it with the
    kernels in torch.compile mode (`_switched(board, "torch.compile")`)."""
    import torch

    return torch.compile(board.model), torch.compile(pytorch_copy(board))


def compare_compiled(
    board: Switches,
    *,
    run_id: str,
    lengths: tuple[int, ...] = (512,),
    pairs: int = 7,
    vocab_size: int,
    calibration_pairs: int = 3,
    warmup: int = 2,
) -> Iterator[Record]:
    """Prefill under torch.compile: the model as switched (kernels in torch.compile mode), compiled,
    against a compiled all-PyTorch copy; A/A pairs (compiled PyTorch twice), interleaved pairs
    (`ModelPair`) and a `ModelVerdict` ("compiled prefill") per length."""
    clock = Clock(board.device)
    with _switched(board, "torch.compile"):
        compiled_kernel, compiled_pytorch = compiled_sides(board)
        for length in lengths:
            kwargs = {"input_ids": token_ids(vocab_size, length)}

            def kernel(kwargs: dict[str, Any] = kwargs) -> None:
                run_model(compiled_kernel, kwargs)

            def pytorch(kwargs: dict[str, Any] = kwargs) -> None:
                run_model(compiled_pytorch, kwargs)

            with board.lock:
                for _ in range(warmup):  # the first call per shape compiles
                    kernel()
                    pytorch()
            timed = _pairs(
                clock, board, kernel, pytorch, calibration_pairs=calibration_pairs, pairs=pairs, switch=False
            )
            yield from _records(board, timed, calibration_pairs, COMPILED_PREFILL, length, run_id)


def _against_references(
    clock: Clock,
    board: Switches,
    kernel: Callable[[], object],
    references: dict[str, Callable[[], object]],
    floors: dict[str, float],
    *,
    measure: str,
    tokens: int,
    pairs: int,
    calibration_pairs: int,
    run_id: str,
) -> Iterator[Record]:
    """`measure` of the compiled kernel side against each reference side (separate models: nothing
    is switched): per reference its A/A pairs, interleaved `ModelPair`s and `ModelVerdict`, the
    references taking turns pair by pair, so a drift of the machine meets each alike. Without A/A
    pairs a verdict's floor is `floors[reference]`; with them, the floor found is kept there."""
    streams = []
    for side, reference in references.items():
        timed = _pairs(
            clock, board, kernel, reference, calibration_pairs=calibration_pairs, pairs=pairs, switch=False
        )
        named = measure if side == COMPILED_SIDE else measure + AGAINST_EAGER
        streams.append(_records(board, timed, calibration_pairs, named, tokens, run_id, floors[side]))
    for batch in itertools.zip_longest(*streams):
        for side, record in zip(references, batch, strict=True):
            if record is None:
                continue
            if calibration_pairs and isinstance(record.values, ModelVerdict):
                floors[side] = max(floors[side], record.values.noise_floor)
            yield record


def compare_compiled_inference(
    board: Switches,
    kwargs: dict[str, Any],
    *,
    run_id: str,
    lengths: tuple[int, ...] = (128, 512),
    pairs: int = 7,
    vocab_size: int,
    decode_tokens: int = 32,
    decode_pairs: int = 3,
    calibration_pairs: int = 3,
) -> Iterator[Record]:
    """Inference under torch.compile, three sides: the model as switched with its kernels in
    torch.compile mode, compiled; a compiled all-PyTorch copy; and that copy eagerly.

    Each compiled side has a `StaticDecoder` per prefill length (a cache of exactly that length)
    and one for decode (the prompt in `kwargs`, then `decode_tokens` steps). In order:
    `CompileTime` per side and graph (every graph compiled once, before any timing); `ModelAgreement`
    of compiled + kernels against compiled PyTorch and against eager PyTorch (greedy tokens after the
    prompt, and the logits each was chosen from, up to the first that differs); per length, A/A
    pairs and `pairs` interleaved pairs against each reference (`ModelPair`, "compiled prefill" and
    "compiled prefill against eager PyTorch", alternating) and their `ModelVerdict`s; then
    `decode_pairs` pairs of `decode_tokens` decode steps ("compiled decode", "... against eager
    PyTorch"), whose noise floor is prefill's against the same reference.
    """
    from kernel_explorer.measure.compiled_decode import EagerDecoder, StaticDecoder

    clock = Clock(board.device)
    prompt = kwargs["input_ids"]
    start = prompt.shape[-1]
    with _switched(board, "torch.compile"):
        reference = pytorch_copy(board)
        models = {KERNEL_SIDE: board.model, COMPILED_SIDE: reference}
        prefills = {(side, n): StaticDecoder(model, n) for side, model in models.items() for n in lengths}
        decoders = {side: StaticDecoder(model, start + decode_tokens + 1) for side, model in models.items()}
        eager = EagerDecoder(reference)
        inputs = {n: token_ids(vocab_size, n) for n in lengths}
        with board.lock:  # every graph compiled, every side warm, before anything is timed
            for n in lengths:
                for run in (
                    prefills[KERNEL_SIDE, n].prefill,
                    prefills[COMPILED_SIDE, n].prefill,
                    eager.prefill,
                ):
                    run(inputs[n])
                    run(inputs[n])
            for decoder in decoders.values():
                decoder.generate(prompt, 3)
        for (side, n), decoder in prefills.items():
            yield Record(run_id, CompileTime(side, f"prefill {n}", decoder.compile_s[f"prefill {n}"]))
        for side, decoder in decoders.items():
            yield Record(run_id, CompileTime(side, f"prompt {start}", decoder.compile_s[f"prefill {start}"]))
            yield Record(run_id, CompileTime(side, "decode", decoder.compile_s["decode"]))

        with board.lock:
            kernel_tokens, kernel_logits = decoders[KERNEL_SIDE].generate_with_logits(prompt, decode_tokens)
            for side, decoder in ((COMPILED_SIDE, decoders[COMPILED_SIDE]), (EAGER_SIDE, eager)):
                tokens, logits = decoder.generate_with_logits(prompt, decode_tokens)
                found = agreement(
                    kernel_logits, logits, kernel_tokens[0, start:], tokens[0, start:], side, greedy=True
                )
                yield Record(run_id, found)

        floors = {COMPILED_SIDE: 0.0, EAGER_SIDE: 0.0}  # the largest prefill floor against each reference
        for n in lengths:
            yield from _against_references(
                clock,
                board,
                functools.partial(prefills[KERNEL_SIDE, n].prefill, inputs[n]),
                {
                    COMPILED_SIDE: functools.partial(prefills[COMPILED_SIDE, n].prefill, inputs[n]),
                    EAGER_SIDE: functools.partial(eager.prefill, inputs[n]),
                },
                floors,
                measure=COMPILED_PREFILL,
                tokens=n,
                pairs=pairs,
                calibration_pairs=calibration_pairs,
                run_id=run_id,
            )

        steps = {}
        with board.lock:  # one prefill of the prompt per side; every decode starts again after it
            for side, decoder in (*decoders.items(), (EAGER_SIDE, eager)):
                first = decoder.prefill(prompt).argmax(-1, keepdim=True)
                steps[side] = functools.partial(decoder.decode, first, start, decode_tokens + 1)
        kernel = steps.pop(KERNEL_SIDE)
        yield from _against_references(
            clock,
            board,
            kernel,
            steps,
            floors,
            measure=COMPILED_DECODE,
            tokens=decode_tokens,
            pairs=decode_pairs,
            calibration_pairs=0,
            run_id=run_id,
        )
