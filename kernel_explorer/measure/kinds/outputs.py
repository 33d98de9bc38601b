"""Outputs: the model's logits and greedy generation as switched, against all-PyTorch.

`compare_model` (`measure/model_comparison.compare_outputs`, and under `compiled=True` against
compiled and eager PyTorch) logs one `ModelAgreement` per reference; the summary is a row each:
top-1 agreement, the logits' KL and largest difference, and where the greedy tokens part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kernel_explorer.measure.kinds.kind import Kind, RecordSource, records_of
from kernel_explorer.measure.summary import Column, NumberCell, Summary

__all__ = ["KIND", "ModelAgreement", "summarize"]


@dataclass(frozen=True)
class ModelAgreement:
    """Logits and greedy generation of the model as switched against all-PyTorch."""

    kind: ClassVar[str] = "model_agreement"
    logits_max_abs: float
    kl: float
    top1_agreement: float
    greedy_tokens: int
    first_divergence: int | None  # first generated position that differs; None: identical
    # what the kernel side is held against: "PyTorch" (eager, the prompt's logits), or under
    # compare_model(compiled=True) "compiled PyTorch" / "eager PyTorch" (the greedy steps' logits)
    reference: str = "PyTorch"


COLUMNS = (
    Column("run_id", "run", line=None),
    Column("against", "outputs", what=True),
    Column("top1_agreement", "top-1 agreement", "number", line="top-1 agreement {}"),
    Column("kl", "logits KL", "number", line=", logits KL {}"),
    Column("logits_max_abs", "logits max abs difference", "number", line=None),
    Column("greedy", "greedy tokens", line=", {}"),
)


def summarize(source: RecordSource) -> Summary:
    """A row per run and reference: how far the model's outputs as switched agree with it."""
    from kernel_explorer.measure.merge import machine_columns

    machines = machine_columns(source)
    rows: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    for record in records_of(source, ModelAgreement):
        v = record.values
        greedy = (
            f"greedy tokens identical ({v.greedy_tokens})"
            if v.first_divergence is None
            else f"greedy tokens differ from token {v.first_divergence} of {v.greedy_tokens}"
        )
        rows.append(
            {
                "run_id": record.run_id,
                "against": "outputs" if v.reference == "PyTorch" else f"outputs against {v.reference}",
                "top1_agreement": NumberCell(v.top1_agreement, "share"),
                "kl": NumberCell(v.kl),
                "logits_max_abs": NumberCell(v.logits_max_abs),
                "greedy": greedy,
            }
        )
        extra.append(
            {
                "reference": v.reference,
                "greedy_tokens": v.greedy_tokens,
                "first_divergence": v.first_divergence,
            }
            | machines(record.run_id)
        )
    return Summary("outputs", "Model outputs against all-PyTorch", COLUMNS, tuple(rows), extra=tuple(extra))


KIND = Kind(
    name="outputs",
    title="Model outputs against all-PyTorch",
    records=(ModelAgreement,),
    summarize=summarize,
    how="Explorer.compare_model()",
    order=40,
)
