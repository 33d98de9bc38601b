"""Shared fixtures.

The whole session shares one fresh cache root (so the bundled hub is built once per run, from
source, like a user's `make setup`); tests that need their own cache set KERNEL_EXPLORER_CACHE
themselves.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from isa_paths import runnable_isas

# The test folders mirror the package; a test may import a helper another test module defines (by
# its module name: basenames are unique across the folders), wherever pytest reaches it first.
for _folder in sorted(Path(__file__).parent.iterdir()):
    if _folder.is_dir() and not _folder.name.startswith((".", "_")) and str(_folder) not in sys.path:
        sys.path.append(str(_folder))


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # KERNEL_EXPLORER_TEST_CACHE: a folder to reuse across local runs (the hub builds once there)
    reuse = os.environ.get("KERNEL_EXPLORER_TEST_CACHE")
    root = Path(reuse) if reuse else tmp_path_factory.mktemp("kx-cache")
    old = os.environ.get("KERNEL_EXPLORER_CACHE")
    os.environ["KERNEL_EXPLORER_CACHE"] = str(root)
    yield root
    if old is None:
        os.environ.pop("KERNEL_EXPLORER_CACHE", None)
    else:
        os.environ["KERNEL_EXPLORER_CACHE"] = old


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache root of this test's own (nothing converted or built in it yet)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("KERNEL_EXPLORER_CACHE", str(root))
    return root


@pytest.fixture(scope="session", autouse=True)
def hub(session_cache: Path) -> dict:
    """The bundled repositories, built (once per session) and loaded through kernels' loader.

    Autouse: `Explorer()` never builds, so every test finds the bundled hub built, as a user does
    after `make setup`.
    """
    from kernels import get_local_kernel

    from kernel_explorer.build.builder import build_hub

    # keyed by the hub folder (flash_attn), not build.toml's name (flash-attn: kernels forbids "_")
    return {built.repo_path.name: get_local_kernel(built.repo_path) for built in build_hub(progress=False)}


@pytest.fixture(params=runnable_isas())
def isa(request: pytest.FixtureRequest, hub: dict) -> Iterator[str]:
    """Run the test on one compiled code path of every bundled kernel, then restore the default."""
    for module in hub.values():
        module.set_isa(request.param)
    yield request.param
    for module in hub.values():  # back to each op's own measured path (set_isa pins every op)
        module.reset_isa()


@pytest.fixture(autouse=True)
def kernels_registry_as_it_was() -> Iterator[None]:
    """Each test starts from the kernel mapping registered with `kernels` before it, and leaves it so.

    Transformers 5.25's `from_pretrained` registers its default mapping with `kernels` for the whole
    process (as `set_use_kernels` does): a test that loads a saved model would otherwise hand every
    later test those candidates as "registered" ones.
    """
    import copy

    from kernel_explorer._backend.internals import internal

    mapping = internal("kernels.layer.globals", "_KERNEL_MAPPING")
    before = copy.deepcopy(mapping.get())  # kernels mutates the registered dict in place
    yield
    mapping.set(before)
