"""The records of a layer's values against PyTorch: divergence of outputs and gradients (each side
also against float64), and determinism (how often repeated calls agree bitwise).

Built by the layer comparisons (`measure/layer_comparison.py`, `measure/layer_training.py`); read
by the values kind's summary, the time kind's accuracy columns and the live plots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class _DivergenceFields:
    """How one kernel tensor differs from PyTorch's, and each from float64 (see measure/divergence.py)."""

    dtype: str
    elements: int
    bitwise_equal: float  # share of output elements that are bitwise equal
    allclose: bool
    max_abs: float | None = None
    max_rel: float | None = None
    mean_abs: float | None = None
    max_ulp: int | None = None
    mean_ulp: float | None = None
    kernel_err64: float | None = None  # max abs error of the kernel against float64
    pytorch_err64: float | None = None  # max abs error of PyTorch against float64
    reference_max_abs: float | None = None  # largest magnitude of the float64 output (sets 1 ULP)
    kernel_on: bool = True


@dataclass(frozen=True)
class LayerDivergence(_DivergenceFields):
    """How an instance's kernel output differs from PyTorch's, and each against float64."""

    kind: ClassVar[str] = "layer_divergence"


@dataclass(frozen=True)
class GradientDivergence(_DivergenceFields):
    """One gradient of an instance (an input's or a weight's): kernel and PyTorch, each against float64."""

    kind: ClassVar[str] = "gradient_divergence"
    gradient: str = ""  # "input 0", "weight", ...: what the gradient is taken with respect to


@dataclass(frozen=True)
class LayerDeterminism:
    """How often repeated calls give bitwise the same output."""

    kind: ClassVar[str] = "layer_determinism"
    runs: int
    kernel_identical: float
    pytorch_identical: float
    pytorch_deterministic_identical: float
    kernel_on: bool = True
