"""One row of the inventory: a kernel layer name of the model, its candidates here, what each
instance runs now (by a person's name, with the code path a multi-ISA kernel runs), the last
measured verdict and the layer's share of model time."""

from __future__ import annotations

import functools
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

from kernel_explorer._backend.repositories import local_path
from kernel_explorer.catalog.availability import State
from kernel_explorer.catalog.candidates import first_usable, repository_name, shown_label
from kernel_explorer.measure.kinds.breakdown import amdahl
from kernel_explorer.measure.summary import format_number

if TYPE_CHECKING:
    from kernel_explorer.catalog.availability import Availability
    from kernel_explorer.catalog.candidates import Candidate
    from kernel_explorer.inspect.layer_groups import LayerGroup
    from kernel_explorer.inspect.running import RunningNow
    from kernel_explorer.measure.kinds.time.records import LayerVerdict


#: where a candidate comes from when the user gave it explicitly (Explorer(mapping=, peers=), attention)
GIVEN_SOURCES = ("user", "peer")


@dataclass(frozen=True)
class InventoryRow:
    """One kernel layer name of the model."""

    group: LayerGroup
    candidates: tuple[tuple[Candidate, Availability], ...]
    running: tuple[RunningNow, ...]
    measured: LayerVerdict | None = None  # the last comparison's verdict, when there was one
    device: str = ""  # the model's device type: candidates mapped for others are folded away
    share: float | None = None  # of the model's prefill time on PyTorch (from the last `breakdown()`)
    #: kernel_name's answers: a table redraw asks it ~15 times per instance, while a Run holds the
    #: GIL half the time (a click's answer spent 30 ms of its 40 in these matches, idle)
    _names: dict[tuple[object, ...], str] = field(
        default_factory=dict, init=False, compare=False, repr=False, hash=False
    )

    @property
    def kind(self) -> str:
        """`module`, `function`, or `module, added by you` for a layer named with `Explorer.extend`."""
        return self.group.kind + (", added by you" if self.group.added else "")

    @property
    def share_summary(self) -> str:
        """The layer's share of model time, and what its measured kernel can give the model (Amdahl)."""
        if self.share is None:
            return "-"
        text = f"{self.share:.0%}"
        if self.measured is not None and self.measured.kernel_on and self.measured.measurable:
            _, model = amdahl(self.share, self.measured.speedup)
            if model is not None:
                text += f" (model {format_number(model, 'x')})"
        return text

    @property
    def measured_summary(self) -> str:
        """The last comparison in one phrase (`3.21x [3.10, 3.35] faster`), or "not measured"."""
        return "not measured" if self.measured is None else self.measured.summary

    @property
    def best(self) -> tuple[Candidate, Availability] | None:
        """The candidate the explorer would switch on: the first usable one, else the first one
        (attention's PyTorch implementations are candidates to switch to, never the kernel to pick)."""
        usable = first_usable(pair for pair in self.candidates if not getattr(pair[0], "pytorch", False))
        if usable is not None:
            return usable
        return self.candidates[0] if self.candidates else None

    @property
    def given(self) -> tuple[tuple[Candidate, Availability], ...]:
        """The candidates the user gave (a peer, their own mapping or attention repository) that do
        not rank first, with their own state: a peer that cannot load (megablocks without `triton`)
        is not hidden behind a Hub candidate that ranks above it."""
        best = self.best
        return tuple(
            pair
            for pair in self.candidates
            if pair[0].source in GIVEN_SOURCES and (best is None or pair[0] != best[0])
        )

    @property
    def given_summary(self) -> str:
        """`peer/megablocks:MegaBlocksMoeMLP: cannot run here: its Python code needs `triton``, one
        per given candidate, "; "-joined ("" when none)."""
        return "; ".join(f"{c.repo_label} [{c.source}]: {found}" for c, found in self.given)

    @property
    def warning(self) -> str:
        """Why the kernel that runs gives wrong results or has side effects here ("" when none does):
        the user named it."""
        return "; ".join(
            dict.fromkeys(
                now.note
                for now in self.running
                if now.is_kernel
                and now.note.startswith((State.WRONG_RESULTS.value, State.SIDE_EFFECTS.value))
            )
        )

    @property
    def warning_state(self) -> State:
        """The state the warning reads as (its colour): wrong results, or side effects."""
        side = self.warning.startswith(State.SIDE_EFFECTS.value)
        return State.SIDE_EFFECTS if side else State.WRONG_RESULTS

    @property
    def status(self) -> str:
        """One phrase: the best candidate's state, or why there is none."""
        best = self.best
        if best is None:
            return "no mapping from any source"
        return str(best[1])

    @property
    def trust_summary(self) -> str:
        """`bundled/rmsnorm: publisher local, not checked · signature not checked · digest matches ·
        lock not locked`: the best candidate's trust in words ("" when it names no build)."""
        best = self.best
        trust = best[1].trust if best else None
        return f"{best[0].repo_label}: {trust.short}" if best and trust else ""

    @property
    def refused(self) -> tuple[tuple[Candidate, Availability], ...]:
        """Candidates of this device refused because a file of their build changed since it was built."""
        return tuple(pair for pair in self.here if pair[1].state is State.REFUSED)

    def _elsewhere(self, candidate: Candidate) -> bool:
        return bool(self.device) and candidate.device != self.device

    @property
    def here(self) -> tuple[tuple[Candidate, Availability], ...]:
        """Candidates mapped for this device, usable ones first (each group in preference order).

        What a user can act on comes first; a GPU mapping cannot run on this CPU whatever its
        order in the catalog, so it never sits above the one that can.
        """
        mine = [pair for pair in self.candidates if not self._elsewhere(pair[0])]
        return tuple(sorted(mine, key=lambda pair: not pair[1].state.usable))  # stable: keeps order

    @property
    def elsewhere(self) -> tuple[tuple[Candidate, Availability], ...]:
        """Candidates mapped only for other devices (CUDA, ROCm, XPU, ...): shown folded."""
        return tuple(pair for pair in self.candidates if self._elsewhere(pair[0]))

    @property
    def elsewhere_summary(self) -> str:
        """`+8 candidates for other devices (cuda, rocm, xpu, npu)`, or "" when there are none."""
        others = self.elsewhere
        if not others:
            return ""
        devices = ", ".join(dict.fromkeys(c.device for c, _ in others))
        noun = "candidate" if len(others) == 1 else "candidates"
        return f"+{len(others)} {noun} for other devices ({devices})"

    def kernel_name(self, now: RunningNow) -> str:
        """A person's name for what `now` runs: `bundled/rmsnorm RMSNorm`, `peer/plain-silu PlainSilu`
        (repository and layer).

        Found by matching the loaded kernel's repository with this row's candidates; the op
        namespace (`_rmsnorm_cpu_23eb2fc398`) is an id for tooltips and exports, not for reading.
        """
        if now.name:  # the door named it (attention: sdpa, eager, a repository)
            return now.name
        if not now.is_kernel:
            return "PyTorch"
        key = (now.repository, now.layer_class, now.kernel_id)
        if key not in self._names:
            self._names[key] = self._kernel_name(now)
        return self._names[key]

    def _kernel_name(self, now: RunningNow) -> str:
        matches = [c for c, _ in self.candidates if _same_repository(c, now.repository)]
        if not matches and now.repository and Path(now.repository).is_absolute():
            # a peer built again into another cache folder (an explorer made anew in one session):
            # the process keeps the module it loaded first, so the kernel names the older folder;
            # it is the row's peer of that name, when only one has it
            name = repository_name(Path(now.repository))
            same = [c for c, _ in self.candidates if c.hub is None and c.repo_name == name]
            matches = same if len({c.label for c in same if c.layer_class == now.layer_class}) == 1 else []
        # the layer class that runs first: one repository may offer several (Q8_0Linear, Q4_1Linear)
        matches.sort(key=lambda c: (c.repository.layer_name != now.layer_class, self._elsewhere(c)))
        if matches:
            match = matches[0]
            repo = match.repo_label
            if match.built_into_cache:
                # built into the cache (`py-rmsnorm-85944792`): by its own name, as the picker writes
                # it, the folder's digest only where two of the row's repositories would read the same
                repo = shown_label(match, [c for c, _ in self.candidates]).rsplit(":", 1)[0]
            return f"{repo} {match.repository.layer_name}"
        if now.repository and now.repository != "unknown":
            return f"{PurePath(now.repository).name} {self.group.name}"
        return f"kernel {now.kernel_id}"

    @property
    def running_counts(self) -> list[tuple[str, str, int]]:
        """(name, kernel id or "", instances) per distinct thing running, most instances first."""
        counts = Counter((self.kernel_name(now), now.kernel_id or "") for now in self.running)
        return [(name, kernel_id, n) for (name, kernel_id), n in counts.most_common()]

    @property
    def running_summary(self) -> str:
        """`PyTorch x4, bundled/rmsnorm RMSNorm x1`: what the instances run now, by name; with why
        PyTorch runs where a kernel was asked for and did not (`does not support training`, ...)."""
        text = ", ".join(f"{name} x{n}" for name, _, n in self.running_counts)
        reasons = dict.fromkeys(now.reason for now in self.running if not now.is_kernel and now.reason)
        return text + "".join(f" ({reason})" for reason in reasons)

    @property
    def code_paths(self) -> dict[str, str]:
        """Each code path the row's kernels run now, and why ("avx2: 1.9x faster than avx512 here")."""
        return {
            now.code_path.path: now.code_path.why
            for now in self.running
            if now.is_kernel and now.code_path.path
        }

    @property
    def code_path_summary(self) -> str:
        """`code path avx2 (pinned)` for the row's cell, or "" where no kernel that names paths runs."""
        paths = self.code_paths
        pinned = any(now.code_path.pinned for now in self.running if now.is_kernel)
        return f"code path {', '.join(paths)}{' (pinned)' if pinned else ''}" if paths else ""

    @property
    def through_summary(self) -> str:
        """How the model reaches the kernels that run, where the door says (attention: `direct
        (attention_forward, no flash glue)` or `Transformers' flash glue (flash_attention_forward)`)."""
        return "; ".join(dict.fromkeys(now.through for now in self.running if now.is_kernel and now.through))

    @property
    def changes_summary(self) -> str:
        """What the running kernels did to their modules (`changes its module on first use (...);
        restored on off; 1.2 MB kept while on`), or "": the guard's word, once per distinct note."""
        return "; ".join(dict.fromkeys(now.note for now in self.running if now.is_kernel and now.note))


def _same_repository(candidate: Candidate, repository: str | None) -> bool:
    """Whether `candidate` names the repository a loaded kernel came from (Hub id or local folder)."""
    if not repository:
        return False
    ref = candidate.hub
    if ref is not None:
        return ref.repo_id == repository
    path = local_path(candidate.repository)
    return path is not None and _real(str(path)) == _real(repository)


@functools.lru_cache(maxsize=512)
def _real(path: str) -> str:
    """`os.path.realpath`, remembered: a table redraw asked it 732 times (0.1 s of a switch's answer)
    for the same few repository folders."""
    return os.path.realpath(path)
