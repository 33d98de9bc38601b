"""Which nodes of a cluster a sweep runs on, and the names their records carry.

A node's name must be stable across runs (a rerun finds what is done by it) and unique (two nodes
may share a host: a test cluster on 127.0.0.1, or two GPUs kinds on one box): its custom resource
labels when it has any, after its hostname; the hostname alone when it is the only unlabelled node
there; else the hostname with the start of its node id.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

#: resources Ray gives every node, which say nothing about what kind of node it is
_BUILTIN = ("CPU", "GPU", "memory", "object_store_memory")


@dataclass(frozen=True)
class Node:
    """One alive node of the cluster, as the sweep sees it."""

    node_id: str
    hostname: str
    address: str
    labels: tuple[str, ...]  # custom resources and accelerator types ("worker_b", "accelerator_type:H100")
    cpus: float
    gpus: float
    name: str = ""

    def carries(self, resources: Iterable[str]) -> bool:
        """Whether the node has any of `resources` (a label, or "GPU")."""
        wanted = set(resources)
        return bool(wanted & set(self.labels)) or ("GPU" in wanted and self.gpus > 0)


def _labels(resources: dict[str, float]) -> tuple[str, ...]:
    return tuple(
        sorted(k for k, v in resources.items() if v > 0 and k not in _BUILTIN and not k.startswith("node:"))
    )


def named_nodes(found: list[dict]) -> list[Node]:
    """The alive nodes of `ray.nodes()`, each with its name."""
    alive = [n for n in found if n.get("Alive")]
    nodes = [
        Node(
            node_id=str(n["NodeID"]),
            hostname=str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress")),
            address=str(n.get("NodeManagerAddress", "")),
            labels=_labels(n.get("Resources", {})),
            cpus=float(n.get("Resources", {}).get("CPU", 0)),
            gpus=float(n.get("Resources", {}).get("GPU", 0)),
        )
        for n in alive
    ]
    unlabelled = Counter(n.hostname for n in nodes if not n.labels)
    named = []
    for n in nodes:
        if n.labels:
            name = f"{n.hostname}/{'+'.join(n.labels)}"
        elif unlabelled[n.hostname] == 1:
            name = n.hostname
        else:
            name = f"{n.hostname}-{n.node_id[:8]}"
        named.append(Node(n.node_id, n.hostname, n.address, n.labels, n.cpus, n.gpus, name))
    return sorted(named, key=lambda n: n.name)


def file_name(node: str, model: str) -> str:
    """The log file of (node, model) in the sweep's folder: what a rerun looks for."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", f"{node}__{model}").strip("_") + ".jsonl"
