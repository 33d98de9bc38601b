"""Which build variant of each candidate a machine takes, and why the others are rejected.

The answer is `kernels`' own resolver (`_backend/platform.variant_verdicts`), run on the variant
folders a candidate has (`build/<variant>/` of a local repository, the Hub's `build/` tree), for
this machine or for one the user describes ("cuda 13.0, sm_90, torch 2.13"): a user on a laptop sees
what the GPU job will load. A taken variant whose `metadata.json` declares GPU architectures is
also checked against the described GPU, as kernels checks it on load.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kernel_explorer._backend.platform import (
    DescribedPlatform,
    VariantVerdict,
    arch_refusal,
    describe_platform,
    variant_verdicts,
)
from kernel_explorer._backend.repositories import local_path


class HubRepository(Protocol):
    """A Hub repository as a candidate names it (`catalog.hub_access.HubReference`)."""

    @property
    def repo_id(self) -> str: ...
    @property
    def ref(self) -> str: ...
    @property
    def label(self) -> str: ...


class CandidateLike(Protocol):
    """What this module reads of a candidate (`catalog.candidates.Candidate`): inspect sits below the
    catalog, so it names the few members it reads, not the catalog's class."""

    @property
    def label(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def repository(self) -> Any: ...
    @property
    def hub(self) -> HubRepository | None: ...


@dataclass(frozen=True)
class CandidateVariants:
    """One candidate's variants on one machine: the one taken (None: none fits) and every verdict."""

    candidate: str  # the candidate's label
    repository: str  # its folder, or Hub repo id and revision
    taken: str | None
    verdicts: tuple[VariantVerdict, ...]
    refused_on_load: str = ""  # the taken build declares GPU archs the machine lacks
    note: str = ""  # why the variants are not known (the Hub did not answer, no build/ folder)

    def lines(self) -> list[str]:
        if self.note:
            return [f"{self.candidate}: {self.note}"]
        head = f"takes {self.taken}" if self.taken else "takes none: no variant fits"
        if self.refused_on_load:
            head += f", then refuses it on load: {self.refused_on_load}"
        return [f"{self.candidate}: {head}"] + [
            f"  {v.line(preferred=v.variant == self.taken)}" for v in self.verdicts
        ]


@dataclass(frozen=True)
class VariantsReport:
    """`Explorer.variants`: what the described machine (or this one) takes of each candidate of a layer."""

    layer: str
    platform: str  # the description, or "this machine"
    candidates: tuple[CandidateVariants, ...]

    def lines(self) -> list[str]:
        lines = [f"{self.layer} on {self.platform}:"]
        for found in self.candidates:
            lines += [f"  {line}" for line in found.lines()]
        if not self.candidates:
            lines.append("  (no candidates)")
        return lines

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def taken(self) -> dict[str, str | None]:
        """{candidate label: the variant taken}, for code that only wants the answer."""
        return {c.candidate: c.taken for c in self.candidates}


def local_variant_names(path: Path) -> list[str]:
    """The variant folders of a local repository (`build/<variant>/`, or the folder's own subfolders)."""
    if (path / "build").is_dir():
        return sorted(p.name for p in (path / "build").iterdir() if p.is_dir() and not p.name.startswith("."))
    if path.is_dir():
        return sorted(p.name for p in path.iterdir() if (p / "metadata.json").is_file())
    return []


def _archs(variant_dir: Path) -> list[str] | None:
    try:
        backend = json.loads((variant_dir / "metadata.json").read_text()).get("backend") or {}
    except (OSError, ValueError):
        return None
    archs = backend.get("archs") if isinstance(backend, dict) else None
    return [str(a) for a in archs] if isinstance(archs, list) else None


def candidate_variants(
    candidate: CandidateLike, platform: DescribedPlatform | None, *, query_hub: bool = False
) -> CandidateVariants:
    """What `platform` (None: this machine, for the candidate's device) takes of `candidate`.

    A Hub repository's `build/` tree is listed only with `query_hub` (as the inventory asks the Hub
    only then): a notebook cell never waits on the network unasked."""
    from kernel_explorer._backend.hub import remote_variant_names

    backend = None if platform is not None or candidate.device not in ("cpu",) else "cpu"
    path = local_path(candidate.repository)
    ref = candidate.hub
    if path is not None:
        where, names = str(path), local_variant_names(path)
        note = "" if names else f"no build/<variant>/ folders in {path} (build it first)"
    elif ref is not None and not query_hub:
        where, names = ref.label, []
        note = "variants not known: the Hub has not been asked (query_hub=True asks it)"
    elif ref is not None:
        where = ref.label
        try:
            names, note = remote_variant_names(ref.repo_id, ref.ref), ""
        except Exception as error:  # offline, not on the Hub: the answer is "not known", said so
            names, note = [], f"variants not known: the Hub did not list {ref.label} ({type(error).__name__})"
    else:
        return CandidateVariants(
            candidate.label, str(candidate.repository), None, (), note="not a repository"
        )
    if note:
        return CandidateVariants(candidate.label, where, None, (), note=note)
    verdicts = tuple(variant_verdicts(names, platform, backend))
    taken = next((v.variant for v in verdicts if v.accepted), None)
    refused = ""
    if taken is not None and platform is not None and path is not None:
        base = path / "build" if (path / "build" / taken).is_dir() else path
        refused = arch_refusal(_archs(base / taken), platform)
    return CandidateVariants(candidate.label, where, taken, verdicts, refused_on_load=refused)


def variants_report(
    layer: str, candidates: Sequence[CandidateLike], platform: str | None = None, *, query_hub: bool = False
) -> VariantsReport:
    """For each candidate of `layer`, the variant the described machine (None: this one) takes, and why
    the rest are rejected. An unreadable description raises one line naming the accepted forms."""
    described = None if platform is None else describe_platform(platform)
    unique = {}  # one row per repository: "bundled@avx2" is the bundled repository again
    for candidate in candidates:
        ref = candidate.hub
        unique.setdefault(
            str(local_path(candidate.repository) or (ref.label if ref else candidate.label)), candidate
        )
    found = tuple(candidate_variants(c, described, query_hub=query_hub) for c in unique.values())
    return VariantsReport(layer, "this machine" if described is None else str(described), found)
