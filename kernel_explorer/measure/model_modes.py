"""Whole-model comparisons beyond eager inference: a training step, and prefill under torch.compile.

Training step: forward, cross-entropy of each position against the next token, backward to every
parameter that requires grad, with the model as switched (its kernels in `Mode.TRAINING`) against
all-PyTorch. Gradients come from `torch.autograd.grad`, so the model's `.grad` stays untouched. The
model runs in the mode it is in (`model.eval()` after `from_pretrained`): dropout in train mode would
make the two sides differ by chance, not by kernel.

torch.compile: recompiling at every switch would cost more than the measurement, so each side is
compiled once: the model as switched (kernels in `Mode.TORCH_COMPILE`), and a deep copy taken while
every layer runs PyTorch. Both warm up, then run interleaved.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.capture import first_tensor, run_model
from kernel_explorer.measure.layer_training import kernels_in_mode
from kernel_explorer.measure.model_comparison import all_pytorch, kernels_on, model_verdict, token_ids
from kernel_explorer.measure.records import ModelPair, Record, TrainingAgreement
from kernel_explorer.measure.timing import Clock

if TYPE_CHECKING:
    import torch
    from torch import nn

    from kernel_explorer.switching.board import Switchboard

TRAINING_STEP = "training step"
COMPILED_PREFILL = "compiled prefill"


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
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), input_ids[:, 1:].flatten())
        grads = torch.autograd.grad(loss, params, allow_unused=True)
    return loss.item(), list(grads)


def _switched(board: Switchboard, mode: str) -> contextlib.AbstractContextManager[None]:
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


def _interleaved(
    clock: Clock,
    board: Switchboard,
    run_kernel: Callable[[], Any],
    run_pytorch: Callable[[], Any],
    index: int,
    *,
    switch: bool,
) -> tuple[float, float]:
    """(PyTorch s, kernel s) of one pair, order alternating; `switch`: PyTorch side via `all_pytorch`."""
    seconds: dict[bool, float] = {}
    for pytorch_side in (True, False) if index % 2 == 0 else (False, True):
        with board.lock, all_pytorch(board) if switch and pytorch_side else contextlib.nullcontext():
            seconds[pytorch_side] = clock.per_call(run_pytorch if pytorch_side else run_kernel, 1)
    return seconds[True], seconds[False]


def compare_training_step(
    board: Switchboard,
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

            with all_pytorch(board):
                ratios = []
                for _ in range(calibration_pairs):
                    first, second = _interleaved(clock, board, step, step, 0, switch=False)
                    ratios.append(first / second)
            speedups = []
            for index in range(pairs):
                pytorch_s, kernel_s = _interleaved(clock, board, step, step, index, switch=True)
                speedups.append(pytorch_s / kernel_s)
                yield Record(
                    run_id, ModelPair(TRAINING_STEP, length, pytorch_s, kernel_s, pytorch_s / kernel_s)
                )
            yield Record(run_id, model_verdict(TRAINING_STEP, length, speedups, ratios, on=kernels_on(board)))


def compiled_sides(board: Switchboard) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(the model as switched, compiled; an all-PyTorch deep copy, compiled). Call it with the
    kernels in torch.compile mode (`_switched(board, "torch.compile")`)."""
    import torch

    with board.lock, all_pytorch(board):
        reference = copy.deepcopy(board.model)
    return torch.compile(board.model), torch.compile(reference)


def compare_compiled(
    board: Switchboard,
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
                run_model(compiled_kernel, kwargs)  # type: ignore[arg-type]

            def pytorch(kwargs: dict[str, Any] = kwargs) -> None:
                run_model(compiled_pytorch, kwargs)  # type: ignore[arg-type]

            with board.lock:
                for _ in range(warmup):  # the first call per shape compiles
                    kernel()
                    pytorch()
            ratios = []
            for index in range(calibration_pairs):
                first, second = _interleaved(clock, board, pytorch, pytorch, index, switch=False)
                ratios.append(first / second)
            speedups = []
            for index in range(pairs):
                pytorch_s, kernel_s = _interleaved(clock, board, kernel, pytorch, index, switch=False)
                speedups.append(pytorch_s / kernel_s)
                pair = ModelPair(COMPILED_PREFILL, length, pytorch_s, kernel_s, pytorch_s / kernel_s)
                yield Record(run_id, pair)
            yield Record(
                run_id, model_verdict(COMPILED_PREFILL, length, speedups, ratios, on=kernels_on(board))
            )
