"""The sweep tests' cluster (kernel_explorer.sweep.local_cluster) and how they find a task's process."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from kernel_explorer.sweep.local_cluster import RayNode, local_cluster


@contextlib.contextmanager
def two_node_cluster(folder: Path, label: str = "worker_b") -> Iterator[tuple[str, RayNode, RayNode]]:
    """(address, head, worker): `ray start --head` and a `ray start --address` labelled `label`."""
    with local_cluster(folder, (label,)) as (address, (head, worker)):
        yield address, head, worker


def compare_processes(machine: str) -> list[int]:
    """Pids of `kernel-explorer compare` processes running with `--machine MACHINE` (a sweep's task)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parts = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [p.decode(errors="replace") for p in parts]
        if "kernel_explorer.views.cli" in words and "compare" in words and machine in words:
            found.append(int(entry.name))
    return found
