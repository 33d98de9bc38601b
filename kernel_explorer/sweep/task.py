"""One sweep task on its node: `kernel-explorer compare` in a process of its own, the log as text.

A process of its own, not the Ray worker's: the measurement runs exactly as the command line runs
it (threads, imports, the bundled hub build), a crash or an out-of-memory kill loses only this
task, and the worker stays small. This module imports no Ray: the driver ships the function.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernel_explorer.errors import SweepTaskError


def compare_on_node(arguments: list[str], host: str) -> dict[str, Any]:
    """Run `kernel-explorer compare ARGUMENTS --machine HOST --out ...` here; its log and timings.

    Returns {"log": JSON lines text, "compare_s": seconds the compare process ran, "started":
    wall-clock time it started, "host": HOST}. A compare that exits non-zero raises
    `SweepTaskError` with its last error line.
    """
    with tempfile.TemporaryDirectory(prefix="kx-sweep-") as folder:
        out = Path(folder) / "log.jsonl"
        command = [
            sys.executable,
            "-m",
            "kernel_explorer.views.cli",
            "compare",
            *arguments,
            "--machine",
            host,
            "--out",
            str(out),
        ]
        started = time.time()
        begin = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - begin
        if done.returncode != 0:
            lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            raise SweepTaskError(lines[-1] if lines else f"compare exited with status {done.returncode}")
        return {"log": out.read_text(), "compare_s": seconds, "started": started, "host": host}
