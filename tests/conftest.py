"""Shared fixtures. Each test gets its own cache root so nothing leaks between tests or into ~/.cache."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path_factory.mktemp("kx-cache")
    monkeypatch.setenv("KERNEL_EXPLORER_CACHE", str(root))
    return root
