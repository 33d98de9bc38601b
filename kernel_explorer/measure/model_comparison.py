"""Whole-model comparison: the current switch state against all-PyTorch, interleaved.

Each pair takes the switch state as it is at that moment (so a switch made mid-run counts from the
next pair), runs it, turns every layer to PyTorch, runs that, and puts the state back.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.capture import run_model
from kernel_explorer.measure.comparison import Comparison
from kernel_explorer.measure.kinds.model.records import ModelDecode, ModelPrefill, ModelVerdict
from kernel_explorer.measure.kinds.outputs import ModelAgreement
from kernel_explorer.measure.records import Record
from kernel_explorer.measure.stats import StallWatch
from kernel_explorer.measure.timing import Clock, interleaved_pair

if TYPE_CHECKING:
    import torch

    from kernel_explorer.measure.switches import Switches


@contextlib.contextmanager
def all_pytorch(board: Switches) -> Iterator[None]:
    """Every layer on PyTorch for the block; the switch state before comes back after."""
    with board.lock, board.holding(board.reset):
        yield


def token_ids(vocab_size: int, length: int, seed: int = 0) -> torch.Tensor:
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (1, length), generator=generator)


def sides(
    board: Switches, *, switch: bool = True
) -> dict[str, Callable[[], contextlib.AbstractContextManager[object]]]:
    """`interleaved_pair`'s contexts for a whole-model pair: each side under the model's lock, the
    PyTorch side (`a`) with every layer on PyTorch when `switch` (the kernel side runs as switched)."""

    @contextlib.contextmanager
    def pytorch_side() -> Iterator[None]:
        with board.lock, all_pytorch(board) if switch else contextlib.nullcontext():
            yield

    return {"a_side": pytorch_side, "b_side": lambda: board.lock}


def kernels_on(board: Switches) -> tuple[str, ...]:
    """The layers with a kernel on in at least one instance now (what a model measure ran with)."""
    return tuple(sorted({now.layer_name for now in board.running() if now.is_kernel}))


def model_verdict(
    measure: str,
    tokens: int,
    speedups: list[float],
    aa_ratios: list[float],
    floor_hint: float = 0.0,
    *,
    on: tuple[str, ...] = (),
    stalled: list[bool] | None = None,
) -> ModelVerdict:
    """The verdict of one model measure, from its `Comparison` (A/A ratios give its floor; without
    any, `floor_hint`); `on`: the layers whose kernels the measure ran (`kernels_on`); `stalled`:
    per pair, whether the machine stalled it (left out, as at the layer level)."""
    found = Comparison(tuple(speedups), tuple(aa_ratios), stalled=tuple(stalled or ()), floor_hint=floor_hint)
    return ModelVerdict(measure=measure, tokens=tokens, **found.fields(), kernels_on=on)  # type: ignore[arg-type]


def compare_prefill(
    board: Switches,
    *,
    run_id: str,
    lengths: tuple[int, ...] = (128, 512),
    pairs: int = 7,
    vocab_size: int,
    calibration_pairs: int = 3,
) -> Iterator[Record]:
    """Prefill latency (one forward over `length` tokens), kernels as switched vs all-PyTorch.

    First `calibration_pairs` A/A pairs per length (all-PyTorch twice: the noise floor), then
    `pairs` interleaved pairs; a `ModelVerdict` per length closes the measurement.
    """
    clock = Clock(board.device)
    inputs = {length: {"input_ids": token_ids(vocab_size, length)} for length in lengths}
    for length in lengths:
        run_model(board.model, inputs[length])  # warm-up, also checks the model accepts them
    forwards = {length: functools.partial(run_model, board.model, inputs[length]) for length in lengths}
    watches = {length: StallWatch() for length in lengths}  # the A/A pairs set each one's reference
    aa: dict[int, list[float]] = {}
    for length in lengths:
        aa[length] = []
        with all_pytorch(board):  # A/A: PyTorch on both sides
            for index in range(calibration_pairs):
                first, second = interleaved_pair(
                    clock, forwards[length], forwards[length], 1, index % 2 == 1, **sides(board, switch=False)
                )
                watches[length].observe(first, second, aa=True)
                aa[length].append(first / second)
    speedups: dict[int, list[float]] = {length: [] for length in lengths}
    stalls: dict[int, list[bool]] = {length: [] for length in lengths}
    for index in range(pairs):
        for length in lengths:
            pytorch_s, kernel_s = interleaved_pair(
                clock, forwards[length], forwards[length], 1, index % 2 == 1, **sides(board)
            )
            stalled = watches[length].observe(pytorch_s, kernel_s)
            speedups[length].append(pytorch_s / kernel_s)
            stalls[length].append(stalled)
            yield Record(run_id, ModelPrefill(length, pytorch_s, kernel_s, pytorch_s / kernel_s, stalled))
    for length in lengths:
        if speedups[length]:
            verdict = model_verdict(
                "prefill", length, speedups[length], aa[length], on=kernels_on(board), stalled=stalls[length]
            )
            yield Record(run_id, verdict)


def _generate(board: Switches, kwargs: dict[str, Any], new_tokens: int) -> torch.Tensor:
    import torch

    with board.lock, torch.no_grad():
        model: Any = board.model  # a Transformers model: generate is its own
        return model.generate(
            **kwargs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0
        )


def compare_decode(
    board: Switches,
    kwargs: dict[str, Any],
    *,
    run_id: str,
    new_tokens: int = 32,
    pairs: int = 3,
    noise_floor_hint: float = 0.0,
) -> Iterator[Record]:
    """Greedy decode speed in tokens/s, kernels as switched vs all-PyTorch, then a `ModelVerdict`.

    Its noise floor is `noise_floor_hint` (a decode A/A would double the longest measurement; the
    prefill floor of the same model on the same machine stands in for it).
    """
    clock = Clock(board.device)
    _generate(board, kwargs, 2)  # warm-up
    speedups: list[float] = []
    stalls: list[bool] = []
    watch = StallWatch()

    def decode() -> None:
        _generate(board, kwargs, new_tokens)

    for index in range(pairs):
        pytorch_s, kernel_s = interleaved_pair(clock, decode, decode, 1, index % 2 == 1, **sides(board))
        values = ModelDecode(
            tokens=new_tokens,
            pytorch_tok_s=new_tokens / pytorch_s,
            kernel_tok_s=new_tokens / kernel_s,
            speedup=pytorch_s / kernel_s,
            stalled=watch.observe(pytorch_s, kernel_s),
        )
        speedups.append(values.speedup)
        stalls.append(values.stalled)
        yield Record(run_id, values)
    if speedups:
        verdict = model_verdict(
            "decode", new_tokens, speedups, [], noise_floor_hint, on=kernels_on(board), stalled=stalls
        )
        yield Record(run_id, verdict)


def compare_outputs(
    board: Switches, kwargs: dict[str, Any], *, run_id: str, new_tokens: int = 24
) -> Iterator[Record]:
    """Logits (max diff, KL, top-1 agreement) and greedy generation, kernels as switched vs all-PyTorch."""
    with board.lock:
        kernel_logits = run_model(board.model, kwargs).logits.double()
        with all_pytorch(board):
            pytorch_logits = run_model(board.model, kwargs).logits.double()
    kernel_tokens = _generate(board, kwargs, new_tokens)
    with all_pytorch(board):
        pytorch_tokens = _generate(board, kwargs, new_tokens)
    start = kwargs["input_ids"].shape[-1]
    yield Record(
        run_id, agreement(kernel_logits, pytorch_logits, kernel_tokens[0, start:], pytorch_tokens[0, start:])
    )


def agreement(
    kernel_logits: torch.Tensor,
    pytorch_logits: torch.Tensor,
    kernel_tokens: torch.Tensor,
    pytorch_tokens: torch.Tensor,
    reference: str = "PyTorch",
    *,
    greedy: bool = False,
) -> ModelAgreement:
    """How far two sides agree: logits (max abs difference; KL of the kernel side from the
    reference, and top-1 agreement, both averaged over positions) and greedy tokens (the first
    generated position that differs). `greedy`: the logits are those each generated token was
    chosen from, compared up to the first token that differs (after it, the sides read different
    tokens)."""
    import torch

    differs = (kernel_tokens != pytorch_tokens).nonzero()
    if greedy and len(differs):
        kernel_logits, pytorch_logits = (
            kernel_logits[: differs[0, 0] + 1],
            pytorch_logits[: differs[0, 0] + 1],
        )
    kernel_logits, pytorch_logits = kernel_logits.double(), pytorch_logits.double()
    log_p = torch.log_softmax(pytorch_logits, dim=-1)
    log_q = torch.log_softmax(kernel_logits, dim=-1)
    return ModelAgreement(
        logits_max_abs=(kernel_logits - pytorch_logits).abs().max().item(),
        kl=(log_p.exp() * (log_p - log_q)).sum(-1).mean().item(),
        top1_agreement=(pytorch_logits.argmax(-1) == kernel_logits.argmax(-1)).double().mean().item(),
        greedy_tokens=len(kernel_tokens),
        first_divergence=None if len(differs) == 0 else int(differs[0, 0]),
        reference=reference,
    )
