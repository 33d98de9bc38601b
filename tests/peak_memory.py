"""Peak memory of a command and everything it starts, as Binder's memory limit would see it.

Binder caps a session's container (about 2 GiB on the public service), so what counts is the memory
of the whole process tree at once: the notebook kernel plus any compiler it runs, not one process.
`run_metered` samples the tree's summed RSS (an over-count of shared pages, so it errs on the safe
side) and also keeps each process's own high-water mark (`VmHWM`, exact even between samples).
Linux only: it reads /proc.

The command is started by a small reaper (`_REAPER`), not by the caller: a forked child's
`ru_maxrss` starts at its parent's size (Linux keeps the copied memory's high-water mark across
exec), so a command forked straight from a pytest process of 1 GiB would read 1 GiB however little
it used. Forked from the reaper, it starts at the reaper's ~10 MiB.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

GiB = 2**30
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Metered:
    """What one metered command did: its result, how long it took and its peak memory."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    tree_peak_bytes: int  # largest sampled sum of RSS over the command and its descendants
    process_peak_bytes: int  # largest VmHWM of any single process in the tree

    @property
    def peak_bytes(self) -> int:
        """The figure to hold against a memory limit: the larger of the two views."""
        return max(self.tree_peak_bytes, self.process_peak_bytes)


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # the process ended while we looked
            continue
        # the command name (field 2) may hold spaces and parentheses: split after its last ')'
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def _tree(root: int) -> list[int]:
    children = _children_by_parent()
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(children.get(pid, []))
    return pids


def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


#: runs argv[2:] as its child, reaps it with wait4 and writes "<ru_maxrss KiB> <exit code>" to argv[1]
_REAPER = """
import os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    except OSError as error:
        print(f"{sys.argv[2]}: {error}", file=sys.stderr, flush=True)
    os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(f"{usage.ru_maxrss} {os.waitstatus_to_exitcode(status)}")
"""


def run_metered(
    command: list[str], *, cwd: Path, env: dict[str, str], timeout: float, interval: float = 0.1
) -> Metered:
    """Run `command` to completion while sampling its process tree's memory every `interval` s.

    The command is reaped with `wait4` (by `_REAPER`), whose rusage adds the exact peak of the
    command and of every descendant it waited for, including any that lived between two samples.
    """
    with tempfile.TemporaryDirectory(prefix="kx-meter-") as folder:
        reaped = Path(folder) / "reaped"
        reaper = [sys.executable, "-c", _REAPER, str(reaped), *command]
        metered = _run_reaped(reaper, cwd, env, timeout, interval, shown=" ".join(command))
        if not reaped.exists():
            raise RuntimeError(
                f"the meter's reaper ended with {metered.returncode}: {metered.stderr[-2000:]}"
            )
        maxrss_kib, returncode = (int(word) for word in reaped.read_text().split())
    return Metered(
        returncode=returncode,
        stdout=metered.stdout,
        stderr=metered.stderr,
        seconds=metered.seconds,
        tree_peak_bytes=metered.tree_peak_bytes,
        process_peak_bytes=max(metered.process_peak_bytes, maxrss_kib * 1024),  # ru_maxrss is in KiB
    )


def _run_reaped(
    command: list[str], cwd: Path, env: dict[str, str], timeout: float, interval: float, *, shown: str
) -> Metered:
    """Run the reaper to completion, sampling its tree; its own exit code and rusage are not the
    command's (the caller reads those from the reaper's file)."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # one process group: a timeout ends the kernel and compilers too
    )
    outputs: dict[str, str] = {}
    readers = [
        threading.Thread(target=lambda n=name, s=stream: outputs.__setitem__(n, s.read()), daemon=True)
        for name, stream in (("stdout", process.stdout), ("stderr", process.stderr))
    ]
    for reader in readers:
        reader.start()
    tree_peak = process_peak = 0
    while True:
        pid, status = os.waitpid(process.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - start > timeout:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise TimeoutError(f"{shown} ran past {timeout:.0f} s")
        rss = 0
        for member in _tree(process.pid):
            rss += _status_kib(member, "VmRSS") * 1024
            process_peak = max(process_peak, _status_kib(member, "VmHWM") * 1024)
        tree_peak = max(tree_peak, rss)
        time.sleep(interval)
    process.returncode = os.waitstatus_to_exitcode(status)
    for reader in readers:
        reader.join()
    return Metered(
        returncode=process.returncode,
        stdout=outputs["stdout"],
        stderr=outputs["stderr"],
        seconds=time.perf_counter() - start,
        tree_peak_bytes=tree_peak,
        process_peak_bytes=process_peak,
    )
