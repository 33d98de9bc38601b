"""The Hub side of a candidate: is it cached, what does the Hub have, download it.

Everything goes through `huggingface_hub` and `kernels` with the Hub endpoint the environment
names (`HF_ENDPOINT`), so the same code talks to the Hub or to a Hub-compatible server. Three faults
of kernels 0.17.2 with huggingface_hub 2.4 are worked around here, where the explorer loads:

1. A load by version downloads by commit and never writes `refs/v<N>`, so a later offline load by
   version fails. The explorer downloads by the version's branch name, which writes the ref, and
   offline, without the ref, takes the newest cached snapshot that has a build for this machine.
2. Offline, `kernels` resolves the cached snapshot as a whole and fails when other variants are
   missing from it. The explorer loads a cached variant offline through `get_local_kernel`.
3. `HF_HUB_DISABLE_TELEMETRY=1` leaves `kernels` with an empty user agent that breaks online
   requests unless `HF_HUB_USER_AGENT_ORIGIN` is set; `hub_session()` sets it while the explorer loads.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel_explorer.availability import Availability, State

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class HubReference:
    """A Hub kernel repository as a mapping entry names it."""

    repo_id: str
    version: int | None = None
    revision: str | None = None
    trust_remote_code: bool | tuple[str, ...] = False

    @property
    def ref(self) -> str:
        """The branch, tag or commit to ask the Hub for."""
        return f"v{self.version}" if self.version is not None else str(self.revision)

    @property
    def label(self) -> str:
        return f"{self.repo_id}@{self.ref}"

    def trusts(self, allowlist: tuple[str, ...] = ()) -> bool:
        """Whether the user opted in for this repository (kernels' `trust_remote_code` rules)."""
        if self.trust_remote_code is True:
            return True
        allowed = tuple(self.trust_remote_code or ()) + tuple(allowlist)
        return self.repo_id in allowed


def hub_reference(repository: Any) -> HubReference | None:
    """The Hub repository behind a `LayerRepository`-like object, or None for local ones."""
    repo_id = getattr(repository, "_repo_id", None)
    if repo_id is None:
        return None
    trust = getattr(repository, "_trust_remote_code", False)
    trust = tuple(trust) if isinstance(trust, list) else bool(trust)
    revision = getattr(repository, "_revision", None)
    locks, dep = getattr(repository, "kernel_locks", None), getattr(repository, "kernel_dep", None)
    if locks is not None and dep is not None:
        revision = locks[dep].commit
    return HubReference(str(repo_id), getattr(repository, "_version", None), revision, trust)


def is_offline() -> bool:
    """Whether `huggingface_hub` is in offline mode (`HF_HUB_OFFLINE`) in this process."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def cache_root() -> Path:
    """Where `kernels` keeps Hub downloads: `KERNELS_CACHE`, else the Hugging Face cache."""
    from huggingface_hub import constants

    return Path(os.environ.get("KERNELS_CACHE") or constants.HF_HUB_CACHE)


def _repo_cache(repo_id: str) -> Path:
    from huggingface_hub.file_download import repo_folder_name

    return cache_root() / repo_folder_name(repo_id=repo_id, repo_type="kernel")


def _trace_lines(trace: list[Any]) -> tuple[str, ...]:
    from kernels.variants import variants_trace_str

    return tuple(line for line in variants_trace_str(trace).splitlines() if line.strip())


def cached_variant_dir(ref: HubReference, backend: str | None = None) -> Path | None:
    """The cached build directory `kernels` would pick here for `ref`, or None when not cached.

    When the cache has no `refs/v<N>` for a version (fault 1: `kernels` downloads by commit), the
    newest cached snapshot with a build for this machine stands in for it.
    """
    folder = _repo_cache(ref.repo_id)
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
    from kernels.variants import get_variants_local, resolve_variant

    variant, _ = resolve_variant(get_variants_local(build), backend)
    if variant is None:
        return None
    path = build / variant.variant_str
    return path if (path / "metadata.json").is_file() else None


def local_availability(repo_path: Path, backend: str | None = None) -> Availability:
    """Availability of a local repository (`LocalLayerRepository`), the way `kernels` resolves it."""
    from kernels.resolver import resolve_local_kernel
    from kernels.variants import get_variants_local, resolve_variant

    repo_path = Path(repo_path)
    if not repo_path.exists():
        return Availability(State.FAILED, f"{repo_path} does not exist")
    try:
        kernel = resolve_local_kernel(repo_path, backend=backend)
    except FileNotFoundError:
        _, trace = resolve_variant(get_variants_local(repo_path / "build"), backend)
        return Availability(
            State.NO_BUILD, f"no build in {repo_path} fits this machine", trace=_trace_lines(trace)
        )
    except Exception as error:  # unreadable metadata.json and the like
        return Availability(State.FAILED, f"{type(error).__name__}: {error}")
    return Availability(State.READY, "local build", variant=kernel.variant_str)


@contextlib.contextmanager
def hub_session() -> Iterator[None]:
    """Work around fault 3: an empty user agent when telemetry is off. Restores the setting after."""
    from huggingface_hub import constants

    patch = constants.HF_HUB_DISABLE_TELEMETRY and constants.HF_HUB_USER_AGENT_ORIGIN is None
    if patch:
        constants.HF_HUB_USER_AGENT_ORIGIN = "kernel-explorer"
    try:
        yield
    finally:
        if patch:
            constants.HF_HUB_USER_AGENT_ORIGIN = None


def _api() -> Any:
    from kernels.hf_hub import _get_hf_api

    return _get_hf_api(user_agent="kernel-explorer")


def query_hub(
    ref: HubReference, *, allowlist: tuple[str, ...] = (), backend: str | None = None
) -> Availability:
    """Ask the Hub what it has for `ref` on this machine. Blocking: call it off the UI thread."""
    from kernels.variants import get_variants, resolve_variant

    cached = cached_variant_dir(ref, backend)
    if is_offline():  # kernels skips the trust check offline: the cache decides
        if cached is not None:
            return Availability(State.READY, "in the local cache", variant=cached.name)
        return Availability(State.OFFLINE_NOT_CACHED, "HF_HUB_OFFLINE is set and no build is cached")
    try:
        with hub_session():
            api = _api()
            if not ref.trusts(allowlist):  # online, kernels checks trust before it looks at the cache
                org = ref.repo_id.split("/", 1)[0]
                overview = api.get_organization_overview(org)
                if not getattr(overview, "trustedKernelPublisher", False):
                    return Availability(
                        State.UNTRUSTED,
                        f"the Hub does not flag {org!r} as a trusted kernel publisher; to opt in, "
                        f"pass trust_remote_code=[{ref.repo_id!r}] to Explorer",
                    )
            if cached is not None:
                return Availability(State.READY, "in the local cache", variant=cached.name)
            revision = ref.ref
            if ref.version is not None:
                branches = {
                    b.name: b.target_commit
                    for b in api.list_repo_refs(ref.repo_id, repo_type="kernel").branches
                }
                if revision not in branches:
                    versions = sorted(name for name in branches if name.startswith("v")) or ["none"]
                    return Availability(
                        State.NO_BUILD, f"the Hub has no {revision} branch (versions: {', '.join(versions)})"
                    )
                revision = branches[revision]
            variant, trace = resolve_variant(
                get_variants(api, repo_id=ref.repo_id, revision=revision), backend
            )
            if variant is None:
                return Availability(
                    State.NO_BUILD, "no variant on the Hub fits this machine", trace=_trace_lines(trace)
                )
            files = api.list_repo_tree(
                ref.repo_id,
                path_in_repo=f"build/{variant.variant_str}",
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
    return Availability(State.DOWNLOADABLE, "on the Hub", variant=variant.variant_str, size_bytes=size)


def download(ref: HubReference, variant: str, *, progress: bool = True) -> Path:
    """Download one build variant into `kernels`' cache; returns the variant directory.

    Downloads by the version's branch name so the cache records `refs/v<N>` (fault 1).
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    if not progress:
        disable_progress_bars()
    try:
        with hub_session():
            snapshot = snapshot_download(
                ref.repo_id,
                repo_type="kernel",
                revision=ref.ref,
                allow_patterns=[f"build/{variant}/*"],
                ignore_patterns=["*.pyc", "**/__pycache__/**"],
                cache_dir=os.environ.get("KERNELS_CACHE") or None,
                library_name="kernels",
            )
    finally:
        if not progress:
            enable_progress_bars()
    return Path(snapshot) / "build" / variant
