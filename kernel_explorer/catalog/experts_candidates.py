"""The experts row's candidates: Transformers' experts implementations, and where each stands here.

Hub kernels first (`deepgemm`, `sonicmoe`, `deepgemm_megamoe`: Transformers loads them from the
Hub at their first call), then Transformers' PyTorch implementations (`grouped_mm`, `batched_mm`,
`eager`). A Hub one's state comes from Transformers' own loadability check, never from the Hub:
on a machine without the GPU it needs it reads "no build for this machine", with the repository
and Transformers' reason. The PyTorch ones are ready; a trial on the model (the door's) turns any
of them to "cannot run here" or "wrong results here" with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernel_explorer._backend import experts
from kernel_explorer._backend.mappings import MappingEntry
from kernel_explorer.catalog.availability import Availability, State
from kernel_explorer.catalog.candidates import Candidate
from kernel_explorer.inspect.layer_groups import EXPERTS

if TYPE_CHECKING:
    from kernel_explorer.catalog.probe_verdict import ProbeVerdict


@dataclass(frozen=True)
class ExpertsCandidate(Candidate):
    """One experts implementation the model could run (what `set_experts_implementation` takes)."""

    implementation: str = ""
    repo: str = ""  # a Hub one's repository, as Transformers names it ("" for PyTorch's)

    @property
    def pytorch(self) -> bool:
        """Transformers' PyTorch code (no kernel to load): never the default choice of `on`."""
        return not self.repo

    @property
    def repo_label(self) -> str:
        at = f"@{self.path}" if self.path else ""
        return self.implementation + at

    @property
    def label(self) -> str:
        return self.repo_label

    def __str__(self) -> str:
        return f"{self.label} [{self.source}]"


def candidate(implementation: str, device: str) -> ExpertsCandidate:
    """The candidate for `implementation` (a Hub one names its repository)."""
    from kernels import Mode

    entry = MappingEntry(EXPERTS, device, None, Mode.FALLBACK, None)
    repo = experts.hub_repository(implementation) if implementation in experts.HUB else ""
    return ExpertsCandidate(entry, "transformers", implementation=implementation, repo=repo)


def candidates(device: str, known: list[str]) -> list[ExpertsCandidate]:
    """Hub kernels, then Transformers' PyTorch implementations, then any other name the interface
    knows (one a user registered), each once."""
    order = [*experts.HUB, *experts.BUILTIN, *(name for name in known if name not in experts.HUB)]
    return [candidate(name, device) for name in dict.fromkeys(order)]


def availability(chosen: ExpertsCandidate, verdict: ProbeVerdict | None) -> Availability:
    """Where `chosen` stands here: Transformers' loadability check for a Hub kernel (never the
    Hub), ready for PyTorch's, each as its trial on this model left it."""
    if chosen.repo:
        refused = experts.hub_refusal(chosen.implementation)
        if refused is not None:
            return Availability(State.NO_BUILD, f"{chosen.repo}: {refused}")
        if chosen.implementation in experts.LOAD_TIME_ONLY:
            why = (
                f"{chosen.repo}: a load-time choice (FP8 models); Transformers switches to it only in "
                f"from_pretrained(..., experts_implementation={chosen.implementation!r})"
            )
            return Availability(State.CANNOT_RUN, why)
        found = Availability(
            State.UNVERIFIED, f"Transformers loads {chosen.repo} from the Hub at its first call"
        )
    else:
        found = Availability(State.READY, f"PyTorch, in Transformers ({chosen.implementation})")
    if verdict is None:
        return found
    if verdict.refused:
        return Availability(State.CANNOT_RUN, verdict.reason)
    if verdict.wrong:
        return Availability(State.WRONG_RESULTS, verdict.reason)
    if verdict.runs and found.state is State.UNVERIFIED:
        return Availability(State.READY, f"{chosen.repo}: loaded and tried on this model")
    return found
