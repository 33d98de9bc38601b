"""Every kernel mapping in one place, with where it came from and whether it can run here.

Five sources, in the order the explorer prefers them when the user does not choose:
- "user": the mapping passed to `Explorer(model, mapping=...)`, in the dict form `kernels` takes;
- "registered": what is registered with `kernels` (`register_kernel_mapping`, `use_kernel_mapping`);
- "bundled": the project's CPU kernel hub, built for this machine;
- "peer": local kernel-builder repositories, `Explorer(model, peers=[path])` (`add_peer`, peers.py);
- "transformers": Transformers' default mapping (what `use_kernels=True` registers).

Hub queries run on a small thread pool, are cached for the session and bounded in time, so a view
that asks for availability never blocks on the network for longer than it chose to wait.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.hub import hub_session, is_offline
from kernel_explorer._backend.mappings import (
    MappingEntry,
    iter_mapping,
    iter_registered_mapping,
    transformers_mapping,
)
from kernel_explorer._backend.modes import mode_name, mode_priority
from kernel_explorer._backend.repositories import local_path
from kernel_explorer.build.bundled import BUILD_HINT, bundled_mapping
from kernel_explorer.build.cache import cache_root
from kernel_explorer.catalog.availability import Availability, State
from kernel_explorer.catalog.hub_access import (
    HubReference,
    cached_variant_dir,
    hub_reference,
    loadable_repository,
    local_availability,
    query_hub,
)
from kernel_explorer.catalog.trust import Trust, hub_trust, local_trust
from kernel_explorer.catalog.words import with_code_path
from kernel_explorer.errors import KernelExplorerError, NoUsableKernelError

if TYPE_CHECKING:
    from kernels import Mode

    from kernel_explorer._backend.locks import KernelPin
    from kernel_explorer.catalog.probe_verdict import ProbeVerdict

SOURCES: tuple[str, ...] = ("user", "registered", "bundled", "peer", "transformers")


@dataclass(frozen=True)
class Candidate:
    """One repository that could replace one kernel layer name, on one device, in one mode."""

    entry: MappingEntry
    source: str  # one of SOURCES
    path: str | None = None  # a code path pinned while on ("avx2" for "bundled@avx2"); None: its choice

    @property
    def layer_name(self) -> str:
        return self.entry.layer_name

    @property
    def device(self) -> str:
        return self.entry.device

    @property
    def repository(self) -> Any:
        return self.entry.repository

    @property
    def hub(self) -> HubReference | None:
        return hub_reference(self.repository)

    @property
    def repo_label(self) -> str:
        """Short name of the repository: `org/name@v1` for the Hub, the folder name for local ones."""
        at = f"@{self.path}" if self.path else ""
        ref = self.hub
        if ref is not None:
            return ref.label + at
        path = local_path(self.repository)
        if path is not None:
            return f"{self.source}/{path.name}{at}"
        return str(self.repository) + at

    @property
    def repo_name(self) -> str:
        """The repository's own name, as its author wrote it: `activation` for
        kernels-community/activation and for bundled/activation, `plain-silu` for a peer built into
        the cache as `plain-silu-1a2b3c4d` (its metadata's name); "" for an object naming no folder."""
        ref = self.hub
        if ref is not None:
            return ref.repo_id.rsplit("/", 1)[-1]
        path = local_path(self.repository)
        return "" if path is None else repository_name(path)

    @property
    def built_into_cache(self) -> bool:
        """Whether this is a local repository the builder built into its cache: a folder of the
        cache's `repos/`, named by the repository and the build's digest (`py-rmsnorm-85944792`), a
        name no person chose (a person's `mykernel-20240601` elsewhere is not one)."""
        path = local_path(self.repository)
        if path is None or _HASHED.search(path.name) is None:
            return False
        return path.resolve().parent == (cache_root() / "repos").resolve()

    @property
    def short_name(self) -> str:
        """What a view calls it beside its source, and a word `on` takes: the repository's own name
        ("activation", "plain-silu"), with a pinned code path ("activation@avx2")."""
        name = self.repo_name or self.repo_label
        return name + (f"@{self.path}" if self.path else "")

    @property
    def short_label(self) -> str:
        """What a person reads and types for it: its label less "(device, mode)", a local repository
        named by its own name, not by the folder the builder's cache gave it
        (`peer/plain-silu:PlainSilu`, never `peer/plain-silu-85944792:PlainSilu`); a Hub repository's
        as its label has it (`kernels-community/activation@v1:Silu`). `shown_label` keeps the folder
        where two repositories would read the same."""
        if self.hub is not None or not self.repo_name or local_path(self.repository) is None:
            return without_scope(self.label)
        at = f"@{self.path}" if self.path else ""
        return f"{self.source}/{self.repo_name}{at}:{self.layer_class}"

    def names(self) -> tuple[str, ...]:
        """Every word that names this candidate: its source, its label (whole, without the device, or
        its repository's), the repository's own name, its short label, a Hub repository's id, its
        layer class."""
        names = [self.source, self.label, self.repo_label, str(self), f"{self.repo_label}:{self.layer_class}"]
        if self.repo_name:
            names += [self.repo_name, f"{self.source}/{self.repo_name}", self.short_label]
        ref = self.hub
        if ref is not None:
            names.append(ref.repo_id)
        names.append(self.layer_class)
        return tuple(dict.fromkeys(n for n in names if n))

    @property
    def layer_class(self) -> str:
        """The repository's layer class this candidate loads (`Silu`, `PlainSilu`)."""
        return str(getattr(self.repository, "layer_name", "") or "")

    @property
    def label(self) -> str:
        """`repo:Layer (device, mode)`: unique within a catalog and what a user types to choose."""
        where = self.device if self.entry.properties is None else f"{self.device} {self.entry.properties}"
        return f"{self.repo_label}:{self.repository.layer_name} ({where}, {mode_name(self.entry.mode)})"

    def __str__(self) -> str:
        return f"{self.label} [{self.source}]"


def without_scope(label: str) -> str:
    """A candidate's label without the "(device, mode)" it ends in (`bundled/activation:Silu`): how
    every view and the report write a candidate, and what a record's label is grouped by."""
    return label.split(" (", 1)[0]


def shown_label(candidate: Candidate, others: Iterable[Candidate]) -> str:
    """`candidate.short_label`, unless another repository among `others` (the layer's candidates)
    reads the same, two peers of one name built from two folders: then its label less "(device,
    mode)", the build folder's hash kept to tell them apart."""
    short, long = candidate.short_label, without_scope(candidate.label)
    if any(o.short_label == short and without_scope(o.label) != long for o in others):
        return long
    return short


_HASHED = re.compile(r"-[0-9a-f]{8}$")  # the builder's cache folder: the source's name, then a hash


@functools.lru_cache(maxsize=256)
def repository_name(path: Path) -> str:
    """A local repository's name: its build's `metadata.json` name (what kernel-builder's build.toml
    calls it), else the folder's name less the hash the builder's cache adds."""
    for meta in sorted(Path(path).glob("build/*/metadata.json")):
        try:
            name = json.loads(meta.read_text()).get("name")
        except (OSError, ValueError):
            continue
        if isinstance(name, str) and name:
            return name
    return _HASHED.sub("", Path(path).name)


def _key(entry: MappingEntry) -> tuple[str, str, str | None, Any, Any]:
    """What makes two mapping entries the same candidate (Transformers' defaults, once registered,
    appear twice)."""
    return (entry.layer_name, entry.device, entry.properties, entry.mode, entry.repository)


def names_one(candidate: Any) -> bool:
    """Whether the user named one candidate (a `Candidate`, a label, "bundled/rmsnorm"), rather than
    a source to choose from ("bundled", "peer@avx2") or nothing: a named candidate whose trial gave
    wrong results still switches (with a warning); a default choice never takes it."""
    if isinstance(candidate, Candidate):
        return True
    return isinstance(candidate, str) and candidate.rsplit("@", 1)[0] not in SOURCES


def first_usable(found: Iterable[tuple[Candidate, Availability]]) -> tuple[Candidate, Availability] | None:
    """The candidate the explorer switches on when the user does not choose: the first usable one.

    The one rule both `Catalog.choose` and the inventory's "best candidate" follow, so the table
    always names what `on()` will pick.
    """
    for pair in found:
        if pair[1].state.usable:
            return pair
    return None


class Catalog:
    """Candidates per kernel layer name, from every source, and their availability here.

    Args:
        mapping: the user's own mapping, `{layer_name: {device: repo or {Mode: repo}}}`.
        include_registered / include_bundled / include_transformers: which other sources to read.
        trust_remote_code: repository ids the user trusts in addition to trusted publishers.
        hub_timeout: seconds `availability(..., query_hub=True)` waits for the Hub by default.
    """

    def __init__(
        self,
        mapping: dict[str, dict[Any, Any]] | None = None,
        *,
        include_registered: bool = True,
        include_bundled: bool = True,
        include_transformers: bool = True,
        trust_remote_code: Iterable[str] = (),
        hub_timeout: float = 5.0,
    ) -> None:
        self.trust_remote_code = tuple(trust_remote_code)
        self.hub_timeout = hub_timeout
        self._lock = threading.Lock()
        self._hub_queries: dict[tuple[HubReference, tuple[str, ...]], Future[Availability]] = {}
        self._failures: dict[Candidate, str] = {}
        self._unsupported: dict[tuple[Candidate, Mode], str] = {}  # refused a mode (kept PyTorch)
        self._probes: dict[tuple[Candidate, Mode], ProbeVerdict] = {}  # tried on this explorer's model
        self._pool: ThreadPoolExecutor | None = None
        self._pins: tuple[KernelPin, ...] = ()  # the project's kernels.lock, when the explorer has one
        self._candidates = self._collect(
            mapping or {}, include_registered, include_bundled, include_transformers
        )

    @staticmethod
    def _collect(
        mapping: dict[str, dict[Any, Any]], registered: bool, bundled: bool, transformers: bool
    ) -> list[Candidate]:
        sources: list[tuple[str, Iterable[MappingEntry]]] = [("user", iter_mapping(mapping))]
        if registered:
            sources.append(("registered", list(iter_registered_mapping())))
        if bundled:
            sources.append(("bundled", iter_mapping(bundled_mapping())))
        if transformers:
            sources.append(("transformers", iter_mapping(transformers_mapping())))
        # Transformers' defaults, once registered (5.25's from_pretrained registers them), appear
        # twice: they keep the name of where they came from.
        defaults = {_key(entry) for entry in iter_mapping(transformers_mapping())} if transformers else set()
        seen: set[tuple[str, str, str | None, Any, Any]] = set()
        found: list[Candidate] = []
        for source, entries in sources:
            for entry in entries:
                key = _key(entry)
                if key in seen:
                    continue
                seen.add(key)
                found.append(Candidate(entry, "transformers" if key in defaults else source))
        return found

    def add(self, mapping: dict[str, dict[Any, Any]], source: str = "user") -> list[Candidate]:
        """Add a mapping's candidates (for a layer the user names later, see `extension.py`).

        They take their source's place in the preference order; entries already known are kept
        once. Returns the candidates that are new.
        """
        if source not in SOURCES:
            raise KernelExplorerError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
        with self._lock:
            known = {_key(c.entry) for c in self._candidates}
            added = []
            for entry in iter_mapping(mapping):
                if _key(entry) not in known:
                    known.add(_key(entry))
                    added.append(Candidate(entry, source))
            merged = self._candidates + added
            self._candidates = sorted(merged, key=lambda c: SOURCES.index(c.source))  # stable
        return added

    def add_peer(self, mapping: dict[str, dict[Any, Any]]) -> list[Candidate]:
        """Add one peer repository's mapping (after the bundled candidates); returns its candidates."""
        return self.add(mapping, source="peer")

    def candidates(self, layer_name: str | None = None) -> list[Candidate]:
        """All candidates, or those for one layer name, most preferred source first."""
        return [c for c in self._candidates if layer_name is None or c.layer_name == layer_name]

    def matching(self, layer_name: str, word: str, device: str | None = None) -> list[Candidate]:
        """The candidates of `layer_name` a user's word names (`Candidate.names`): a source ("bundled",
        "peer", ...), a label, a repository label or `repo:Layer`, the repository's own name
        ("plain-silu", "activation"), a Hub repository id, the layer class; each with an optional
        `@path` ("bundled@avx2"). With `device`, a word that names candidates for several devices
        names those for `device`. The one reading `on`, `using` and `compare` share.

        A word that is not a source and names more than one repository (or class) here is one line
        listing the names that tell them apart (`KernelExplorerError`); a word naming none: [].
        """

        def named(w: str) -> list[Candidate]:
            found = [c for c in self.candidates(layer_name) if w in c.names()]
            if device is not None and len(found) > 1:
                found = [c for c in found if c.device == device] or found
            return found

        found = with_code_path(word, named)
        distinct = {(c.repo_label, c.layer_class) for c in found}
        if len(distinct) > 1 and word.rsplit("@", 1)[0] not in SOURCES:
            names = ", ".join(self.names_that_work(layer_name, device, among=found))
            raise KernelExplorerError(
                f"{word!r} names {len(distinct)} candidates of {layer_name!r}: name one of {names}"
            )
        return found

    def names_that_work(
        self, layer_name: str, device: str | None = None, *, among: Sequence[Candidate] | None = None
    ) -> list[str]:
        """For each candidate of `layer_name` (those for `device`, or `among`), the first word that
        names it alone here: its repository's name, its class, its source, source/name, its
        repository's label, else its whole label."""
        every = self.candidates(layer_name)
        here = [c for c in every if device is None or c.device == device]
        chosen: list[str] = []
        for candidate in among if among is not None else here:
            words = (
                candidate.repo_name,
                candidate.layer_class,
                candidate.source,
                f"{candidate.source}/{candidate.repo_name}",
                candidate.repo_label,
                candidate.label,
            )
            alone = next(
                (w for w in words if w and [c for c in here if w in c.names()] == [candidate]),
                candidate.label,
            )
            if alone not in chosen:
                chosen.append(alone)
        return chosen

    def no_match(self, layer_name: str, word: str, device: str) -> KernelExplorerError:
        """The one line for a word that names no candidate of `layer_name`: the names that work here,
        and how many candidates are mapped for other devices only."""
        every = self.candidates(layer_name)
        names = self.names_that_work(layer_name, device)
        elsewhere = sorted({c.device for c in every if c.device != device})
        others = sum(c.device != device for c in every)
        tail = f" (+{others} for other devices: {', '.join(elsewhere)})" if elsewhere else ""
        if not names:
            return KernelExplorerError(
                f"No candidate {word!r} for layer {layer_name!r}: it has none here{tail}"
            )
        sources = [s for s in SOURCES if any(c.source == s and c.device == device for c in every)]
        return KernelExplorerError(
            f"No candidate {word!r} for layer {layer_name!r}: name one of {', '.join(names)} "
            f"(or a source: {', '.join(sources)}){tail}"
        )

    def layer_names(self) -> list[str]:
        return sorted({c.layer_name for c in self._candidates})

    def record_failure(self, candidate: Candidate, reason: str) -> None:
        """Remember that `candidate` failed to load or run here; it reads "failed to load" after."""
        with self._lock:
            self._failures[candidate] = reason

    def record_unsupported(self, candidate: Candidate, mode: Mode, reason: str) -> None:
        """Remember that `candidate` refused `mode` here (kernelize kept PyTorch: no backward, say);
        it reads "no mapping for this device or mode" with `reason` in that mode after."""
        with self._lock:
            self._unsupported[(candidate, mode)] = reason

    def record_probe(self, candidate: Candidate, mode: Mode, verdict: ProbeVerdict) -> None:
        """Remember what trying `candidate` on the model found: a ready candidate reads "cannot run
        here" or "unverified" with the reason after, and one that runs says what it does to its module."""
        with self._lock:
            self._probes[(candidate, mode)] = verdict

    def forget_probe(self, candidate: Candidate, mode: Mode) -> None:
        """Drop what a trial found (the model changed dtype or capture length: tried again at next use)."""
        with self._lock:
            self._probes.pop((candidate, mode), None)

    def clear_failure(self, candidate: Candidate) -> None:
        with self._lock:
            self._failures.pop(candidate, None)

    def _query(self, ref: HubReference) -> Future[Availability]:
        key = (ref, self.trust_remote_code)
        with self._lock:
            future = self._hub_queries.get(key)
            if future is None:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kernel-explorer-hub")
                future = self._pool.submit(query_hub, ref, allowlist=self.trust_remote_code)
                self._hub_queries[key] = future
            return future

    def forget_hub_answers(self) -> None:
        """Drop the session's Hub answers (after a download, or to ask again)."""
        with self._lock:
            self._hub_queries.clear()

    def availability(
        self,
        candidate: Candidate,
        *,
        device: str,
        mode: Mode,
        query_hub: bool = False,
        wait: float | None = None,
    ) -> Availability:
        """Where `candidate` stands here for a model on `device` in `mode`.

        Without `query_hub`, a Hub candidate that is not cached reads "checking" (or the session's
        earlier answer); with it, the query starts in the background and this waits `wait` seconds
        (default `hub_timeout`). The answer carries the candidate's `trust` (publisher, signature,
        digest, lock); a build with a file changed since it was built reads "refused" and is never
        loaded.
        """
        found = self._where(candidate, device=device, mode=mode, query_hub=query_hub, wait=wait)
        trust = self.trust(candidate, found)
        if trust is None:
            return found
        if trust.refusal and found.state is not State.NO_MAPPING:
            return Availability(State.REFUSED, trust.refusal, variant=found.variant, trust=trust)
        return replace(found, trust=trust)

    def use_pins(self, pins: tuple[KernelPin, ...]) -> None:
        """The project's kernel pins (`kernels.lock`), which the candidates' lock column compares with."""
        self._pins = tuple(pins)

    def trust(self, candidate: Candidate, found: Availability) -> Trust | None:
        """Where `candidate` stands on publisher, signature, digest and lock (`catalog/trust.py`), from
        its build on disk, without loading it; None for a repository object that names no folder."""
        ref = candidate.hub
        if ref is None:
            path = local_path(candidate.repository)
            if path is None:
                return None
            variant = found.variant or local_availability(path).variant
            return local_trust(path / "build" / variant if variant else None)
        offline = is_offline()
        with self._lock:
            asked = (ref, self.trust_remote_code) in self._hub_queries
        return hub_trust(
            ref,
            cached_variant_dir(ref),
            allowlist=self.trust_remote_code,
            trusted_publisher=found.trusted_publisher,
            offline=offline,
            waiting=asked and found.state is State.CHECKING,
            pins=self._pins,
        )

    def _where(
        self, candidate: Candidate, *, device: str, mode: Mode, query_hub: bool, wait: float | None
    ) -> Availability:
        """`availability` before the trust checks: mapping, build, cache, Hub, trial."""
        with self._lock:
            failure = self._failures.get(candidate)
        if failure is not None:
            return Availability(State.FAILED, failure)
        with self._lock:
            refused = self._unsupported.get((candidate, mode))
        if refused is not None:
            return Availability(State.NO_MAPPING, refused)
        entry = candidate.entry
        if entry.device != device:
            return Availability(State.NO_MAPPING, f"mapped for {entry.device}, the model is on {device}")
        if entry.mode not in mode_priority(mode):
            return Availability(
                State.NO_MAPPING, f"mapped for {mode_name(entry.mode)}, not for {mode_name(mode)}"
            )
        ref = candidate.hub
        if ref is None:
            path = local_path(candidate.repository)
            if path is None:
                return Availability(State.READY, "custom repository object (not inspected)")
            found = local_availability(path)
            if candidate.source == "bundled" and not found.state.usable:
                return Availability(State.NO_BUILD, f"the bundled hub is not built here; {BUILD_HINT}")
            return self._with_probe(candidate, mode, found)
        cached = cached_variant_dir(ref)
        if cached is not None and (is_offline() or ref.trusts(self.trust_remote_code)):
            found = Availability(State.READY, "in the local cache", variant=cached.name)
            return self._with_probe(candidate, mode, found)
        if is_offline():
            return Availability(State.OFFLINE_NOT_CACHED, "HF_HUB_OFFLINE is set and no build is cached")
        key = (ref, self.trust_remote_code)
        with self._lock:
            future = self._hub_queries.get(key)
        if future is None and not query_hub:
            return Availability(State.CHECKING, "the Hub has not been asked yet")
        future = future or self._query(ref)
        try:
            return future.result(timeout=self.hub_timeout if wait is None else wait)
        except FutureTimeout:
            return Availability(State.CHECKING, "waiting for the Hub's answer")

    def _with_probe(self, candidate: Candidate, mode: Mode, found: Availability) -> Availability:
        """A ready candidate as its trial on the model left it (unchanged when it was not tried)."""
        with self._lock:
            verdict = self._probes.get((candidate, mode))
        if verdict is None or found.state is not State.READY:
            return found
        if verdict.refused:
            return replace(found, state=State.CANNOT_RUN, reason=verdict.reason)
        if verdict.wrong:
            return replace(found, state=State.WRONG_RESULTS, reason=verdict.reason)
        if verdict.distrusted:  # side effects: what its trial found it does besides its output
            return replace(found, state=State.SIDE_EFFECTS, reason=verdict.reason)
        if not verdict.runs:
            return replace(found, state=State.UNVERIFIED, reason=verdict.reason)
        model = f"model: {verdict.answers}" if verdict.answers else ""
        said = [r for r in (found.reason, verdict.changes, model) if r]
        return replace(found, reason="; ".join(said)) if said != [found.reason] else found

    def choose(
        self, layer_name: str, *, device: str, mode: Mode, candidate: str | Candidate | None = None
    ) -> Candidate:
        """The candidate to switch on: the one named, else the first usable one by source order."""
        return self._choose(layer_name, device=device, mode=mode, candidate=candidate)[0]

    def _choose(
        self, layer_name: str, *, device: str, mode: Mode, candidate: str | Candidate | None
    ) -> tuple[Candidate, Availability | None]:
        options = self.candidates(layer_name)
        if isinstance(candidate, Candidate):
            return candidate, None
        if candidate is not None:
            options = self.matching(layer_name, candidate, device)
            if not options:
                raise self.no_match(layer_name, candidate, device)
            if len(options) == 1:  # else a source's, or one repository's for several modes: the first usable
                return options[0], None
        found = [(option, self.availability(option, device=device, mode=mode)) for option in options]
        best = first_usable(found)
        if best is not None:
            return best
        detail = (
            "\n  ".join(f"{option.label}: {why}" for option, why in found) or "no mapping from any source"
        )
        raise NoUsableKernelError(
            f"No kernel for {layer_name!r} can run here ({device}, {mode_name(mode)}):\n  {detail}"
        )

    def resolve(
        self, layer_name: str, *, device: str, mode: Mode, candidate: str | Candidate | None = None
    ) -> tuple[Candidate, MappingEntry]:
        """The candidate to switch on (as `choose`) and the mapping entry that loads it here.

        The load decision: local repositories must be usable as they are; a Hub repository is
        resolved by `hub_access.loadable_repository` (offline cache, download, trust). Raises
        `NoUsableKernelError` with the reason when nothing can load here.
        """
        chosen, found = self._choose(layer_name, device=device, mode=mode, candidate=candidate)
        ref = chosen.hub
        if ref is None:
            found = found or self.availability(chosen, device=device, mode=mode)
            wanted = found.state.distrusted and names_one(candidate)  # the door warns
            if not found.state.usable and not wanted:
                if found.state in (State.CANNOT_RUN, State.REFUSED) or found.state.distrusted:  # said once
                    raise NoUsableKernelError(f"{chosen.repo_label} {found.state.value}: {found.reason}")
                raise NoUsableKernelError(f"{chosen.repo_label} cannot run here: {found.details}")
            return chosen, chosen.entry
        if is_offline():
            found = Availability(State.CHECKING, "offline: the cache decides")
        else:
            found = self.availability(chosen, device=device, mode=mode, query_hub=True)
        with hub_session():
            repository = loadable_repository(
                ref, chosen.repository.layer_name, found, allowlist=self.trust_remote_code
            )
        if found.state is State.DOWNLOADABLE:
            self.forget_hub_answers()  # it is cached now
        return chosen, replace(chosen.entry, repository=repository)
