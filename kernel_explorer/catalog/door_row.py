"""One row of the inventory for a door Transformers opens besides layers and attention (the record;
`door_rows` collects them)."""

from __future__ import annotations

from dataclasses import dataclass

#: the row kinds, in the order the inventory lists them
FUNCTION_CHAIN = "function chain"
ATTENTION_NAME = "attention name"
QUANTIZATION = "quantization"
KERNEL_CONFIG = "kernel config"
KINDS = (FUNCTION_CHAIN, ATTENTION_NAME, QUANTIZATION, KERNEL_CONFIG)


@dataclass(frozen=True)
class DoorRow:
    """One door: what it is, what runs here through it, and why."""

    kind: str  # one of KINDS
    name: str  # the function, the attention name, the quantization method, the fused modules
    runs: str  # what runs here, in a few words ("torch reference", "kernels-community/flash-attn2@v4")
    reason: str  # why that and not the links before it
    repository: str = ""  # the Hub repository the door would load ("" when none)
    revision: str = ""  # the revision it would load at (`v4`, a branch, a commit; "" when none)
    instances: int = 0  # modules of the model the row covers (0: model-wide)

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.runs} ({self.reason})"


@dataclass(frozen=True)
class HubLink:
    """The Hub link of a function's chain, as the layer row knows it."""

    running: str = ""  # the kernel that runs now for the layer ("" when PyTorch runs)
    why_not: str = ""  # why no Hub kernel runs (the layer row's state and reason)
