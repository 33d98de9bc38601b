"""Where the toolkit keeps what it builds or converts (models, kernel builds).

One root, `$KERNEL_EXPLORER_CACHE` or the user cache dir, so a user can move or wipe everything the
toolkit made with one variable or one `rm -r`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kernel_explorer.errors import CacheDirError

CACHE_ENV = "KERNEL_EXPLORER_CACHE"


def cache_root() -> Path:
    """The cache root: `$KERNEL_EXPLORER_CACHE` if set, else the platform's user cache dir."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("kernel-explorer"))


def writable_cache_dir(*parts: str) -> Path:
    """`cache_root()/parts...`, created and checked writable, or a `CacheDirError` naming the fix."""
    path = cache_root().joinpath(*parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise CacheDirError(
            f"cache dir {path} is not writable ({exc.strerror or exc}); "
            f"set {CACHE_ENV} to a writable directory"
        ) from None
    return path
