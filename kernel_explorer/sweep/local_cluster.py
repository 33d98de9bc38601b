"""A Ray cluster on this machine (127.0.0.1) for trying the sweep, its tests and its benchmark:
`ray start --head` and one more `ray start --address` per resource label, one CPU each.

Each node is a `ray start --block` process in a session of its own, so a node is stopped (or killed,
to test a node dying) by signalling its own process group, never by `ray stop` (which would stop
every Ray node of the machine, other users' too). Ports are chosen free, so a second cluster on the
machine does not collide with this one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: detect a dead node within seconds, not Ray's default half a minute; and give a node's agents
#: (Python processes, slow to start on a loaded machine) time before the raylet gives up on them
FAST_HEALTH_CHECKS = {
    "RAY_agent_register_timeout_ms": "300000",
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray() -> str:
    """The `ray` command beside this Python (the [ray] extra's)."""
    return str(Path(sys.executable).with_name("ray"))


@dataclass
class RayNode:
    process: subprocess.Popen
    label: str | None

    def kill(self) -> None:
        """SIGKILL to the node's whole process group: the raylet, its workers, their children."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)


def _start(arguments: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [_ray(), "start", "--block", *arguments],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((host, int(port))) == 0


def _wait_for_nodes(
    address: str, count: int, nodes: list[tuple[subprocess.Popen, Path]], timeout: float = 300.0
) -> None:
    """Until `count` nodes are alive; a node process that exits raises its log's last line."""
    import ray

    deadline = time.monotonic() + timeout
    while not _listening(address):
        for process, log in nodes:
            if process.poll() is not None:
                lines = [line for line in log.read_text().splitlines() if line.strip()]
                raise RuntimeError(f"ray start exited: {lines[-1] if lines else process.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listens at {address} after {timeout:.0f} s")
        time.sleep(0.5)
    while True:
        for process, log in nodes:
            if process.poll() is not None:
                lines = [line for line in log.read_text().splitlines() if line.strip()]
                raise RuntimeError(f"ray start exited: {lines[-1] if lines else process.returncode}")
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
            alive = sum(1 for n in ray.nodes() if n.get("Alive"))
        except Exception:
            alive = 0
        finally:
            ray.shutdown()
        if alive >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the Ray cluster at {address} has {alive} of {count} nodes after {timeout:.0f} s"
            )
        time.sleep(1.0)


#: `ray start` tries per node: a raylet whose agents take over Ray's fixed 15 s to write their ports
#: (Python start-up on a loaded 2-core machine) exits at start, and the same start then succeeds
START_TRIES = 3


def _start_node(
    address: str, count: int, arguments: list[str], env: dict[str, str], log: Path, label: str | None
) -> RayNode:
    """A node started and seen alive (`count` nodes in the cluster), tried `START_TRIES` times; each
    failed try is kept in the log (`log`.1, .2) and the last one raises."""
    for attempt in range(1, START_TRIES + 1):
        node = RayNode(_start(arguments, env, log), label)
        try:
            _wait_for_nodes(address, count, [(node.process, log)], timeout=150.0)
            return node
        except (RuntimeError, TimeoutError):
            node.kill()
            if attempt == START_TRIES:
                raise
            log.rename(log.with_name(f"{log.name}.{attempt}"))
    raise AssertionError("unreachable")


@contextlib.contextmanager
def local_cluster(
    folder: Path, labels: tuple[str, ...] = ("worker_b",)
) -> Iterator[tuple[str, list[RayNode]]]:
    """(address, [head, one worker per label]) of a running cluster; every node stopped after.

    `folder` keeps Ray's session files and each node's log (head.log, worker-LABEL.log)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    address = f"127.0.0.1:{port}"
    env = {**os.environ, **FAST_HEALTH_CHECKS, "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--num-cpus=1", "--num-gpus=0", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]

    head_args = [
        "--head",
        f"--port={port}",
        "--include-dashboard=false",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--temp-dir={folder / 'ray'}",
        *common,
    ]
    nodes: list[RayNode] = []
    try:
        nodes.append(_start_node(address, 1, head_args, env, folder / "head.log", None))
        for label in labels:
            worker_args = [
                f"--address={address}",
                f'--resources={{"{label}": 1}}',
                f"--dashboard-agent-listen-port={free_port()}",
                *common,
            ]
            log = folder / f"worker-{label}.log"
            nodes.append(_start_node(address, len(nodes) + 1, worker_args, env, log, label))
        yield address, nodes
    finally:
        for node in reversed(nodes):
            node.kill()
