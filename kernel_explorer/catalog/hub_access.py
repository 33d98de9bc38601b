"""The Hub side of a candidate: is it cached, what does the Hub have, how to load it here.

Everything goes through `huggingface_hub` and `kernels` with the Hub endpoint the environment
names (`HF_ENDPOINT`), so the same code talks to the Hub or to a Hub-compatible server. Three faults
of kernels 0.17.2 with huggingface_hub 2.4 are worked around here, where the explorer loads:

1. A load by version downloads by commit and never writes `refs/v<N>`, so a later offline load by
   version fails. The explorer downloads by the version's branch name, which writes the ref, and
   offline, without the ref, takes the newest cached snapshot that has a build for this machine.
2. Offline, `kernels` resolves the cached snapshot as a whole and fails when other variants are
   missing from it. The explorer loads a cached variant offline as a local repository.
3. `HF_HUB_DISABLE_TELEMETRY=1` leaves `kernels` with an empty user agent that breaks online
   requests unless `HF_HUB_USER_AGENT_ORIGIN` is set; `_backend.hub.hub_session()` sets it while
   the explorer talks to the Hub or loads. (huggingface_hub 2.5 no longer sends it broken.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel_explorer._backend.hub import (
    download_variant,
    hub_api,
    hub_session,
    is_offline,
    repo_cache_folder,
    resolve_local_kernel,
    resolve_local_variant,
    resolve_remote_variant,
)
from kernel_explorer._backend.repositories import (
    hub_coordinates,
    hub_layer_repository,
    local_layer_repository,
)
from kernel_explorer.catalog.availability import Availability, State
from kernel_explorer.catalog.trust import REFUSED, digest_check
from kernel_explorer.errors import NoUsableKernelError

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class HubReference:
    """A Hub kernel repository as a mapping entry names it."""

    repo_id: str
    version: int | None = None
    revision: str | None = None
    trust_remote_code: bool | tuple[str, ...] = False
    locked: bool = False  # a `LockedLayerRepository`: `revision` is the commit its lock pins

    @property
    def ref(self) -> str:
        """The branch, tag or commit to ask the Hub for."""
        return f"v{self.version}" if self.version is not None else str(self.revision)

    @property
    def label(self) -> str:
        return f"{self.repo_id}@{self.ref}"

    def trusts_extra(self) -> tuple[str, ...]:
        """Repository ids the mapping entry itself opted in for (its `trust_remote_code` list)."""
        return tuple(self.trust_remote_code) if isinstance(self.trust_remote_code, tuple) else ()

    def trusts(self, allowlist: tuple[str, ...] = ()) -> bool:
        """Whether the user opted in for this repository (kernels' `trust_remote_code` rules)."""
        if self.trust_remote_code is True:
            return True
        allowed = self.trusts_extra() + tuple(allowlist)
        return self.repo_id in allowed


def hub_reference(repository: Any) -> HubReference | None:
    """The Hub repository behind a `LayerRepository`-like object, or None for local ones."""
    found = hub_coordinates(repository)
    if found is None:
        return None
    return HubReference(found.repo_id, found.version, found.revision, found.trust_remote_code, found.locked)


def cached_variant_dir(ref: HubReference, backend: str | None = None) -> Path | None:
    """The cached build directory `kernels` would pick here for `ref`, or None when not cached.

    When the cache has no `refs/v<N>` for a version (fault 1: `kernels` downloads by commit), the
    newest cached snapshot with a build for this machine stands in for it.
    """
    folder = repo_cache_folder(ref.repo_id)
    ref_file = folder / "refs" / ref.ref
    if ref_file.is_file():
        snapshots = [folder / "snapshots" / ref_file.read_text().strip()]
    elif _COMMIT.match(ref.ref):
        snapshots = [folder / "snapshots" / ref.ref]
    elif ref.version is not None and (folder / "snapshots").is_dir():
        snapshots = sorted((folder / "snapshots").iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    else:
        return None
    for snapshot in snapshots:
        found = _variant_in(snapshot / "build", backend)
        if found is not None:
            return found
    return None


def _variant_in(build: Path, backend: str | None) -> Path | None:
    variant, _ = resolve_local_variant(build, backend)
    if variant is None:
        return None
    path = build / variant
    return path if (path / "metadata.json").is_file() else None


def local_availability(repo_path: Path, backend: str | None = None) -> Availability:
    """Availability of a local repository (`LocalLayerRepository`), the way `kernels` resolves it."""
    repo_path = Path(repo_path)
    if not repo_path.exists():
        return Availability(State.FAILED, f"{repo_path} does not exist")
    try:
        variant = resolve_local_kernel(repo_path, backend)
    except FileNotFoundError:
        _, trace = resolve_local_variant(repo_path / "build", backend)
        return Availability(State.NO_BUILD, f"no build in {repo_path} fits this machine", trace=trace)
    except Exception as error:  # unreadable metadata.json and the like
        return Availability(State.FAILED, f"{type(error).__name__}: {error}")
    return Availability(State.READY, "local build", variant=variant)


def query_hub(
    ref: HubReference, *, allowlist: tuple[str, ...] = (), backend: str | None = None
) -> Availability:
    """Ask the Hub what it has for `ref` on this machine. Blocking: call it off the UI thread."""
    cached = cached_variant_dir(ref, backend)
    if is_offline():  # kernels skips the trust check offline: the cache decides
        if cached is not None:
            return Availability(State.READY, "in the local cache", variant=cached.name)
        return Availability(State.OFFLINE_NOT_CACHED, "HF_HUB_OFFLINE is set and no build is cached")
    flagged: bool | None = None  # the Hub's publisher flag, asked only when the user did not opt in
    try:
        with hub_session():
            api = hub_api()
            if not ref.trusts(allowlist):  # online, kernels checks trust before it looks at the cache
                org = ref.repo_id.split("/", 1)[0]
                overview = api.get_organization_overview(org)
                flagged = bool(getattr(overview, "trustedKernelPublisher", False))
                if not flagged:
                    return Availability(
                        State.UNTRUSTED,
                        f"the Hub does not flag {org!r} as a trusted kernel publisher; to opt in, "
                        f"pass trust_remote_code=[{ref.repo_id!r}] to Explorer",
                        trusted_publisher=False,
                    )
            if cached is not None:
                return Availability(
                    State.READY, "in the local cache", variant=cached.name, trusted_publisher=flagged
                )
            revision = ref.ref
            if ref.version is not None:
                branches = {
                    b.name: b.target_commit
                    for b in api.list_repo_refs(ref.repo_id, repo_type="kernel").branches
                }
                if revision not in branches:
                    versions = sorted(name for name in branches if name.startswith("v")) or ["none"]
                    return Availability(
                        State.NO_BUILD,
                        f"the Hub has no {revision} branch (versions: {', '.join(versions)})",
                        trusted_publisher=flagged,
                    )
                revision = branches[revision]
            variant, trace = resolve_remote_variant(api, ref.repo_id, revision, backend)
            if variant is None:
                return Availability(
                    State.NO_BUILD,
                    "no variant on the Hub fits this machine",
                    trace=trace,
                    trusted_publisher=flagged,
                )
            files = api.list_repo_tree(
                ref.repo_id,
                path_in_repo=f"build/{variant}",
                recursive=True,
                repo_type="kernel",
                revision=revision,
            )
            size = sum(getattr(item, "size", 0) or 0 for item in files)
    except Exception as error:
        name = type(error).__name__
        if "NotFound" in name:
            return Availability(State.FAILED, f"{ref.repo_id} is not on the Hub ({name})")
        return Availability(State.OFFLINE_NOT_CACHED, f"the Hub could not be reached: {name}: {error}")
    return Availability(
        State.DOWNLOADABLE, "on the Hub", variant=variant, size_bytes=size, trusted_publisher=flagged
    )


def download(ref: HubReference, variant: str, *, progress: bool = True) -> Path:
    """Download one build variant into `kernels`' cache; returns the variant directory.

    Downloads by the version's branch name so the cache records `refs/v<N>` (fault 1).
    """
    return download_variant(ref.repo_id, ref.ref, variant, progress=progress) / "build" / variant


def _refuse_changed(ref: HubReference, variant_path: Path | None) -> None:
    """Raise `NoUsableKernelError` when a file of the build about to load changed since it was built
    (whatever kernels' receipts say: a changed file is a changed file)."""
    check = digest_check(variant_path)
    if check.word == REFUSED:
        raise NoUsableKernelError(f"{ref.label} {check}")


def loadable_repository(
    ref: HubReference, layer_name: str, found: Availability, *, allowlist: tuple[str, ...] = ()
) -> Any:
    """The repository object to hand to `kernelize` for `ref`, given where it stands (`found`).

    Offline, a cached variant loads as a local repository (fault 2); online, a build the Hub has
    is downloaded first by branch name (fault 1); trust is never granted on the user's behalf.
    Raises `NoUsableKernelError` with the reason when it cannot load here.
    """
    cached = cached_variant_dir(ref)
    if is_offline():
        if cached is None:
            raise NoUsableKernelError(
                f"{ref.label} is not cached and HF_HUB_OFFLINE is set: switch it on once while online."
            )
        _refuse_changed(ref, cached)
        return local_layer_repository(cached.parent.parent, layer_name)
    if found.state is State.UNTRUSTED:
        raise NoUsableKernelError(f"{ref.label}: {found.reason}")
    if found.state is State.REFUSED:
        raise NoUsableKernelError(f"{ref.label} {found.state.value}: {found.reason}")
    if found.state not in (State.READY, State.DOWNLOADABLE, State.CHECKING):
        raise NoUsableKernelError(f"{ref.label} cannot run here: {found.details}")
    if cached is None and found.variant:
        download(ref, found.variant)
    _refuse_changed(ref, cached_variant_dir(ref))
    trust: bool | list[str] = True if ref.trust_remote_code is True else [*ref.trusts_extra(), *allowlist]
    return hub_layer_repository(
        ref.repo_id, layer_name, version=ref.version, revision=ref.revision, trust=trust
    )
