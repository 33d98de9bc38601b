"""Every text architecture of the installed Transformers with a kernel hook, through the Explorer.

For each one a tiny random model is derived from its default config (tests/architectures.py); the
ones that cannot be built are reported with why (they are Transformers' own limits on a tiny
config, listed in the test's output). For every one that builds: the inventory and every row's `on`
answer without a raw exception (one-line answers where a row cannot switch), no row is silently
wrong (a kernel that runs moves the logits by at most rounding, or its row says "wrong results
here"), and everything off gives the logits bitwise.
"""

from __future__ import annotations

import os

import pytest
from architectures import hooked_architectures, sweep_one, table


@pytest.mark.slow
def test_every_hooked_architecture_through_the_explorer(hub: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # Hub candidates answer "offline and not cached" at once
    types = hooked_architectures()
    assert len(types) >= 50  # Transformers 5.22 has 100+; a broken listing must not pass as "all fine"
    results = [sweep_one(t) for t in types]
    print("\n" + table(results))
    ran = [r for r in results if r.built]
    assert len(ran) >= len(types) // 2, table(results)
    for r in ran:
        assert not r.raw_exception, f"{r.model_type}: {r.raw_exception}"
        assert not r.silently_wrong, f"{r.model_type}: silently wrong rows {r.silently_wrong}"
        assert r.restored, f"{r.model_type}: everything off did not restore the logits bitwise"
        for name, what in r.rows.items():
            assert "\n" not in what, f"{r.model_type} {name}: {what}"
    assert os.environ["HF_HUB_OFFLINE"] == "1"
