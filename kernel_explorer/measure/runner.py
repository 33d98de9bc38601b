"""Run measurements on a worker thread, streaming records into a `ResultLog`, cancellable any time.

A measurement is a generator of records; the runner appends each record as it comes and checks for
cancellation between records, so a cancel stops within one sample. Closing a generator runs its
`finally` blocks, which is where measurements put back any switch state they changed; that also
happens on errors and on KeyboardInterrupt (a foreground run re-raises it after cleaning up).

A worker-thread run first releases the starting thread's idle OpenMP pool (`measure/openmp.py`),
so its kernels run with the CPUs' only pool, as a foreground run's do: the same call costs the
same on either thread. Runs still going when the interpreter exits are cancelled and joined by an
`atexit` hook (their `finally` blocks put the switches back); a daemon thread left inside torch's
C++ while the interpreter finalizes aborts the process ("terminate called without an active
exception").
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.openmp import release_thread_pool
from kernel_explorer.measure.records import Provenance, Record, RunEvent

Measurement = Callable[[str], Iterator[Record]]  # run_id -> records

_run_numbers = itertools.count(1)
_current = threading.local()  # the handle of the run going on this thread, for `current_run_cancelled`
EXIT_JOIN_S = 30.0  # at exit, how long to wait for a run to finish its sample and put switches back


@dataclass(eq=False)  # compared and hashed by identity: one handle per run
class RunHandle:
    """A started run: cancel it, wait for it, read how it ended."""

    run_id: str
    _cancel: threading.Event = field(default_factory=threading.Event)
    _done: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    error: BaseException | None = None
    outcome: str = "running"  # finished, cancelled, failed

    def cancel(self) -> None:
        """Stop after the sample in progress."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run ends (True) or `timeout` seconds pass (False)."""
        return self._done.wait(timeout)


class Runner:
    """Starts runs that feed one `ResultLog`."""

    def __init__(self, log: ResultLog, origin: Callable[[], Provenance] | None = None) -> None:
        """`origin` gives the provenance of records that come without one (whole-model records,
        run events): read once per run, so every record in the log says where it comes from."""
        self.log = log
        self.origin = origin
        self._names: set[str] = set()

    def start(
        self, measurements: list[Measurement], *, background: bool = True, name: str | None = None
    ) -> RunHandle:
        """Run `measurements` in order; on a worker thread unless `background=False`.

        `name` becomes the run id (with a number added when the name was used before), so runs a
        user wants to compare later read as "before-fix", "after-fix" in every summary.
        """
        run_id = f"run-{next(_run_numbers)}" if not name else str(name).strip()
        if run_id in self._names:
            run_id = f"{run_id}-{next(_run_numbers)}"
        self._names.add(run_id)
        handle = RunHandle(run_id=run_id)
        if background:
            release_thread_pool()  # the worker's parallel regions get the only OpenMP pool
            _going.add(handle)
            handle.thread = threading.Thread(
                target=self._run,
                args=(handle, measurements),
                name=f"kernel-explorer-{handle.run_id}",
                daemon=True,
            )
            handle.thread.start()
        else:
            self._run(handle, measurements)
            if handle.error is not None:
                raise handle.error
        return handle

    def _run(self, handle: RunHandle, measurements: list[Measurement]) -> None:
        outer = getattr(_current, "handle", None)
        _current.handle = handle
        try:
            self._run_measurements(handle, measurements)
        finally:
            _current.handle = outer

    def _run_measurements(self, handle: RunHandle, measurements: list[Measurement]) -> None:
        found: list[Provenance | None] = []

        def append(record: Record) -> None:
            if record.provenance is None and self.origin is not None:
                if not found:
                    found.append(self.origin())
                record = dataclasses.replace(record, provenance=found[0])
            self.log.append(record)

        append(Record(handle.run_id, RunEvent("started")))
        try:
            for measurement in measurements:
                records = measurement(handle.run_id)
                try:
                    for record in records:
                        append(record)
                        if handle.cancelled:
                            break
                        # between two records nothing is timed: the interpreter goes to a thread
                        # that waits for it (the kernel's, with a click or Stop) now, not after
                        # the switch interval (5 ms, paid at every step of answering a click)
                        time.sleep(0)
                finally:
                    close = getattr(records, "close", None)
                    if close is not None:
                        close()  # runs the measurement's finally blocks: switch state put back
                if handle.cancelled:
                    break
            handle.outcome = "cancelled" if handle.cancelled else "finished"
            detail = ""
        except BaseException as error:  # KeyboardInterrupt included: cleaned up above, reported here
            handle.error = error
            handle.outcome = "cancelled" if isinstance(error, KeyboardInterrupt) else "failed"
            detail = f"{type(error).__name__}: {error}"
        append(Record(handle.run_id, RunEvent(handle.outcome, detail)))
        handle._done.set()


_going: weakref.WeakSet[RunHandle] = weakref.WeakSet()  # background runs, until they are collected


def current_run_cancelled() -> bool:
    """Whether the run going on this thread was cancelled: for a measurement step too long to wait
    for between two records (a whole model's forward on a busy machine took 3 to 10 s)."""
    handle = getattr(_current, "handle", None)
    return handle is not None and handle.cancelled


def running_elsewhere() -> bool:
    """Whether a background run is going on a thread other than the calling one."""
    me = threading.current_thread()
    return any(not handle.done and handle.thread is not me for handle in list(_going))


def leave_the_cpus_to_runs() -> None:
    """Release the calling thread's idle OpenMP pool while a background run goes elsewhere.

    A switch made during a Run (a widget click, a cell) can run parallel torch ops on its own
    thread (a probe's trial call, a guard's copy), which makes a second OpenMP pool; with two, the
    run's parallel regions wait by sleeping (`openmp.py`) and a 15-token forward of the default
    model took 7.8 s under the board's lock, so the next click and Stop waited as long. Call it
    outside any parallel region.
    """
    if running_elsewhere():
        release_thread_pool()


@atexit.register
def stop_runs_at_exit() -> None:
    """Cancel every background run still going and wait for it: its switches are put back and its
    thread leaves torch's C++ before the interpreter finalizes (a daemon thread inside it aborts)."""
    going = [handle for handle in list(_going) if not handle.done]
    for handle in going:
        handle.cancel()
    for handle in going:
        handle.wait(EXIT_JOIN_S)
        if handle.thread is not None:
            handle.thread.join(EXIT_JOIN_S)
