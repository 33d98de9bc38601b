"""The Hub and the cache as `kernels` sees them: its API client, cache folders, variant resolution.

Everything goes through `huggingface_hub` and `kernels` with the endpoint the environment names
(`HF_ENDPOINT`), so the same code talks to the Hub or to a Hub-compatible server.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kernel_explorer._backend.internals import internal


def is_offline() -> bool:
    """Whether `huggingface_hub` is in offline mode (`HF_HUB_OFFLINE`) in this process."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def kernels_cache_root() -> Path:
    """Where `kernels` keeps Hub downloads: `KERNELS_CACHE`, else the Hugging Face cache."""
    from huggingface_hub import constants

    return Path(os.environ.get("KERNELS_CACHE") or constants.HF_HUB_CACHE)


def repo_cache_folder(repo_id: str) -> Path:
    """The cache folder of one kernel repository (`kernels--org--name`)."""
    from huggingface_hub.file_download import repo_folder_name

    return kernels_cache_root() / repo_folder_name(repo_id=repo_id, repo_type="kernel")


@contextlib.contextmanager
def hub_session() -> Iterator[None]:
    """With `HF_HUB_DISABLE_TELEMETRY=1`, `kernels` sends an empty user agent that breaks online
    requests unless `HF_HUB_USER_AGENT_ORIGIN` is set: set it for the block, and restore it after."""
    from huggingface_hub import constants

    patch = constants.HF_HUB_DISABLE_TELEMETRY and constants.HF_HUB_USER_AGENT_ORIGIN is None
    if patch:
        constants.HF_HUB_USER_AGENT_ORIGIN = "kernel-explorer"
    try:
        yield
    finally:
        if patch:
            constants.HF_HUB_USER_AGENT_ORIGIN = None


def hub_api() -> Any:
    """The `HfApi` client `kernels` itself uses (same endpoint, token and headers)."""
    _get_hf_api = internal("kernels.hf_hub", "_get_hf_api")

    return _get_hf_api(user_agent="kernel-explorer")


def _trace_lines(trace: list[Any]) -> tuple[str, ...]:
    variants_trace_str = internal("kernels.variants", "variants_trace_str")

    return tuple(line for line in variants_trace_str(trace).splitlines() if line.strip())


def resolve_local_variant(build: Path, backend: str | None = None) -> tuple[str | None, tuple[str, ...]]:
    """The variant `kernels` picks in a local `build/` folder (None if none fits), and its trace."""
    get_variants_local = internal("kernels.variants", "get_variants_local")
    resolve_variant = internal("kernels.variants", "resolve_variant")

    variant, trace = resolve_variant(get_variants_local(build), backend)
    return (None if variant is None else variant.variant_str), _trace_lines(trace)


def resolve_remote_variant(
    api: Any, repo_id: str, revision: str, backend: str | None = None
) -> tuple[str | None, tuple[str, ...]]:
    """The variant `kernels` would download from the Hub at `revision`, and its trace."""
    get_variants = internal("kernels.variants", "get_variants")
    resolve_variant = internal("kernels.variants", "resolve_variant")

    variant, trace = resolve_variant(get_variants(api, repo_id=repo_id, revision=revision), backend)
    return (None if variant is None else variant.variant_str), _trace_lines(trace)


def resolve_local_kernel(repo_path: Path, backend: str | None = None) -> str:
    """The variant `kernels` loads from a local repository; `FileNotFoundError` when none fits."""
    resolve = internal("kernels.resolver", "resolve_local_kernel")

    return resolve(Path(repo_path), backend=backend).variant_str


def download_variant(repo_id: str, revision: str, variant: str, *, progress: bool = True) -> Path:
    """Download one build variant into `kernels`' cache; returns the snapshot folder."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    if not progress:
        disable_progress_bars()
    try:
        with hub_session():
            snapshot = snapshot_download(
                repo_id,
                repo_type="kernel",
                revision=revision,
                allow_patterns=[f"build/{variant}/*"],
                ignore_patterns=["*.pyc", "**/__pycache__/**"],
                cache_dir=os.environ.get("KERNELS_CACHE") or None,
                library_name="kernels",
            )
    finally:
        if not progress:
            enable_progress_bars()
    return Path(snapshot)


def remote_variant_names(repo_id: str, revision: str) -> list[str]:
    """The `build/<variant>/` folder names of a Hub kernel repository at `revision` (a branch like v1)."""
    from huggingface_hub.hf_api import RepoFolder

    tree = hub_api().list_repo_tree(repo_id, path_in_repo="build", repo_type="kernel", revision=revision)
    return sorted({item.path.split("/")[-1] for item in tree if isinstance(item, RepoFolder)})
