"""What one trial of a candidate on a model found: the value the probe fills and the catalog keeps.

It lives with the catalog because the catalog ranks candidates by it and the inventory shows it;
the trial itself (`switching.probe`) runs behind a door.
"""

from __future__ import annotations

from dataclasses import dataclass

OK, CANNOT_RUN, UNVERIFIED = "runs here", "cannot run here", "unverified"
#: it runs and returns PyTorch's shape, but its values are far beyond PyTorch's own error against
#: float64 (`numerics.divergence.wrong_bound`): never the default choice, switched only when named
WRONG = "wrong results here"
#: it runs and computes PyTorch's values, but changes the session or its input, or keeps memory
#: (`switching.trial_checks`): never the default choice, switched only when named, with a warning
SIDE_EFFECTS = "side effects here"


@dataclass(frozen=True)
class ProbeVerdict:
    """What one trial of a candidate on this model found."""

    outcome: str  # OK, CANNOT_RUN, WRONG, SIDE_EFFECTS or UNVERIFIED
    reason: str = ""
    changes: str = ""  # what the kernel did to its module ("changes its module on first use (...)")
    kept_bytes: int = 0  # per instance: the original tensors kept alive while the kernel holds it
    in_place: bool = False  # it changed tensors in place: the guard must copy, not alias
    answers: str = ""  # how the model's answers move with it on every instance (model_trial.Answers)

    @property
    def runs(self) -> bool:
        return self.outcome == OK

    @property
    def refused(self) -> bool:
        return self.outcome == CANNOT_RUN

    @property
    def wrong(self) -> bool:
        """It ran, and computed something else than PyTorch (the reason says how far off, where)."""
        return self.outcome == WRONG

    @property
    def distrusted(self) -> bool:
        """It runs, but what it did (wrong values, side effects) keeps it from any default choice:
        switched only when the user names it (with a warning), refused under `strict`."""
        return self.outcome in (WRONG, SIDE_EFFECTS)

    def __str__(self) -> str:
        return self.outcome + (f": {self.reason}" if self.reason else "")
