"""Whether a kernel candidate can run here, and why not: the vocabulary every view shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernel_explorer.catalog.trust import Trust


class State(str, Enum):
    """Where a candidate stands on this machine, from best to worst."""

    READY = "ready"  # a local or cached build for this machine; loads without the network
    DOWNLOADABLE = "downloadable"  # the Hub has a build for this machine
    NO_BUILD = "no build for this machine"  # builds exist, none for this machine (see trace)
    UNTRUSTED = "publisher not trusted"  # the Hub does not flag the publisher; the user may opt in
    OFFLINE_NOT_CACHED = "offline and not cached"  # no network (or no answer) and nothing cached
    NO_MAPPING = "no mapping for this device or mode"  # mapped for other devices or modes only
    FAILED = "failed to load"  # tried and failed; the error is kept
    REFUSED = "refused"  # a file of its build changed since it was built (digest): never loaded
    CANNOT_RUN = "cannot run here"  # loads, but its trial on this model failed (no CPU kernel, dtype)
    # runs, but its trial's values are far from PyTorch's (against float64): switched only when named
    WRONG_RESULTS = "wrong results here"
    # runs and computes PyTorch's values, but changes torch's settings or its input, or keeps memory
    SIDE_EFFECTS = "side effects here"
    UNVERIFIED = "unverified"  # loads; no trial could settle whether it runs on this model
    CHECKING = "checking"  # a Hub query is still running

    @property
    def key(self) -> str:
        """A stable identifier for code and CSS ("ready", "no_build", ...); the value is for people."""
        return self.name.lower()

    @property
    def colour(self) -> str:
        """The badge colour every view uses for this state (one table, here)."""
        return _COLOURS[self]

    @property
    def distrusted(self) -> bool:
        """It runs, but its trial found wrong values or side effects: switched only when named."""
        return self in (State.WRONG_RESULTS, State.SIDE_EFFECTS)

    @property
    def usable(self) -> bool:
        """Whether switching the candidate on may succeed (a pending Hub answer counts: try it)."""
        return self in (State.READY, State.DOWNLOADABLE, State.CHECKING, State.UNVERIFIED)


_COLOURS: dict[State, str] = {
    State.READY: "#1a7f37",
    State.DOWNLOADABLE: "#0969da",
    State.CHECKING: "#6e7781",
    State.NO_BUILD: "#9a6700",
    State.UNTRUSTED: "#bc4c00",
    State.OFFLINE_NOT_CACHED: "#9a6700",
    State.NO_MAPPING: "#6e7781",
    State.FAILED: "#cf222e",
    State.REFUSED: "#cf222e",
    State.CANNOT_RUN: "#cf222e",
    State.WRONG_RESULTS: "#8250df",
    State.SIDE_EFFECTS: "#8250df",
    State.UNVERIFIED: "#6e7781",
}


@dataclass(frozen=True)
class Availability:
    """One candidate's state here, with everything needed to explain it."""

    state: State
    reason: str = ""
    variant: str | None = None  # the build variant `kernels` picks here
    trace: tuple[str, ...] = field(default=())  # kernels' variant decisions: "variant: why rejected"
    size_bytes: int | None = None  # download size of the variant, when the Hub says
    trusted_publisher: bool | None = None  # the Hub's `trustedKernelPublisher` flag (None: not asked)
    trust: Trust | None = field(default=None, compare=False)  # publisher, signature, digest, lock

    def __str__(self) -> str:
        text = self.state.value
        if self.variant:
            text += f" ({self.variant})"
        if self.reason:
            text += f": {self.reason}"
        return text

    @property
    def details(self) -> str:
        """Reason plus the variant trace, one line each: what a tooltip shows."""
        lines = [str(self)]
        if self.size_bytes is not None:
            lines.append(f"download size: {self.size_bytes / 1e6:.1f} MB")
        lines.extend(self.trace)
        return "\n".join(lines)
