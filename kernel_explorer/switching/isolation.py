"""A stranger's kernel tried first in a worker process: a crash or a hang there is a row's reason.

The trial of a candidate (`probe.try_layer`, `attention_trial`) runs the kernel's own code: its
Python at import, its compiled ops at the first call. Run in the notebook's process, a kernel that
aborts, reads a null pointer or blocks forever takes the notebook down (or freezes it) inside
`inventory()`, before anything was switched, with the model, the captures and the results. So a
candidate that does not come from this package (a Hub repository, a local one, a peer, a mapping,
an attention repository, an extended class's candidate) is first tried in a worker: a separate
Python started fresh (never forked from the notebook: its threads and CUDA state do not carry
over), given a copy of the instance and the captured inputs, which runs the same trial function the
in-process probe runs and answers with its `ProbeVerdict`. A worker that dies reads "crashed its
trial (SIGSEGV)" (the signal's name, or its exit code), one that does not answer within the limit
"did not answer in 30 s" (`Explorer(..., trial_timeout=)`, default `DEFAULT_TIMEOUT`); either way
the candidate is never loaded here, and only a candidate whose trial passed there is (the trial
then runs here as before). Bundled kernels, this package's own, are not isolated.

One worker serves the whole session: started at the first candidate that needs it (one import of
torch, kernels and Transformers, a few seconds, outside any trial's limit), reused for every
candidate after, started again after a crash or a timeout (which kills it). It is a plain
subprocess of `sys.executable -c ...` on a socket pair, the spawn start method's fresh interpreter
without multiprocessing's re-import of `__main__` (which would run a user's script, unguarded by
`if __name__ == "__main__"`, a second time in the worker). It dies with the notebook (EOF on its
socket, and the parent-death signal on Linux).

What crosses: the trial's arguments, pickled. A module of a class the worker cannot import (a class
defined in the notebook itself) cannot cross: that trial runs here, as before isolation
(`Unisolable`). The classes the explorer makes are rebuilt there rather than imported: an extended
instance's marked subclass (`extension.marked_class` again), a function layer's class (from the
function it wraps, as Transformers' module defines it).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer.catalog.probe_verdict import CANNOT_RUN, ProbeVerdict

if TYPE_CHECKING:
    from kernels import Mode
    from torch import nn

    from kernel_explorer._backend.mappings import MappingEntry

#: seconds a trial may take in the worker before it reads "did not answer in N s" (a setting:
#: `Explorer(..., trial_timeout=)`; this is the default)
DEFAULT_TIMEOUT = 30.0
#: seconds the worker may take to start (import torch, kernels, Transformers): not a trial's time
START_TIMEOUT = 180.0
#: sources whose candidates run in this process without a worker: this package's own kernels
TRUSTED_SOURCES = ("bundled",)
#: False: every trial runs in this process, as before isolation (bench/isolation_cost.py measures
#: what isolation costs this way; never for kernels you do not trust)
ENABLED = True

__all__ = [
    "DEFAULT_TIMEOUT",
    "ENABLED",
    "Unisolable",
    "close",
    "isolated",
    "peer_classes",
    "run_isolated",
    "sendable",
    "try_layer_isolated",
    "worker_pid",
]


class Unisolable(Exception):
    """The trial's arguments cannot reach the worker (a class it cannot import): try it here."""


def isolated(candidate: Any) -> bool:
    """Whether `candidate` is tried in the worker first: every source but this package's own."""
    return ENABLED and getattr(candidate, "source", None) not in TRUSTED_SOURCES


def run_isolated(function: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
    """`function(*args)` in the worker (a module-level function, importable there); its result.

    A worker that crashes or does not answer within `timeout` seconds (default `DEFAULT_TIMEOUT`)
    gives a `ProbeVerdict` that cannot run here, with the reason ("crashed its trial (SIGSEGV)",
    "did not answer in 30 s"); an exception `function` raised there gives one with its one line.
    Raises `Unisolable` when the arguments cannot be sent or rebuilt there.
    """
    limit = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    payload = _dumps((function, args, dict(os.environ), list(sys.path)))
    with _lock:
        worker = _started()
        status, value = worker.call(payload, limit)
    if status == "ok":
        return value
    if status == "unisolable":
        raise Unisolable(value)
    return ProbeVerdict(CANNOT_RUN, value)


def worker_pid() -> int | None:
    """The running worker's process id (None: none started, or it died): for tests and benchmarks."""
    with _lock:
        return _worker.process.pid if _worker is not None and _worker.alive() else None


def close() -> None:
    """Stop the worker (the next isolated trial starts a new one)."""
    global _worker
    with _lock:
        if _worker is not None:
            _worker.stop()
            _worker = None


def try_layer_isolated(
    module: nn.Module,
    entry: MappingEntry,
    mode: Mode,
    samples: list[tuple[tuple[Any, ...], dict[str, Any]] | None],
    *,
    where: str,
    code_path: str | None = None,
    label: str = "",
    timeout: float | None = None,
) -> ProbeVerdict:
    """`probe.try_layer` in the worker, on `module` (a copy of the instance, sent without what the
    explorer or a kernel installed on it: forwards, hooks) and the captured `samples` (the capture's
    length and the longer one: a kernel that crashes only past the capture crashes the worker)."""
    found = run_isolated(_layer_trial, module, entry, mode, samples, where, code_path, label, timeout=timeout)
    if not isinstance(found, ProbeVerdict):
        return ProbeVerdict(CANNOT_RUN, f"its trial answered {type(found).__name__}, not a verdict")
    return found


def peer_classes(repo_path: Path, variant: str | None = None, *, timeout: float | None = None) -> list[str]:
    """A peer's layer classes, imported in the worker (`peers.imported_classes`); read from its
    source when it cannot import there (it raises anything, or crashes the worker)."""
    from kernel_explorer.catalog.peers import classes_in_source, imported_classes, layer_classes
    from kernel_explorer.errors import KernelExplorerError

    if not ENABLED:
        return layer_classes(repo_path, variant)
    try:
        found = run_isolated(imported_classes, Path(repo_path), timeout=timeout)
    except Unisolable:
        found = None
    if isinstance(found, KernelExplorerError):
        raise found
    if isinstance(found, list):
        return found
    return classes_in_source(repo_path, variant)


def sendable(module: nn.Module) -> nn.Module:
    """`module` (a copy: it is changed) without what the notebook installed on it, its submodules
    included: a kernel's or the explorer's forward, and hooks (a capture's, a holder's router),
    which are not the trial's and may not cross to the worker."""
    from kernel_explorer._backend.layer_forwards import remove_forward

    for part in module.modules():
        remove_forward(part)
        for key, value in list(vars(part).items()):
            if key.endswith("_hooks") and isinstance(value, dict):
                value.clear()
    return module


def _layer_trial(
    module: nn.Module,
    entry: MappingEntry,
    mode: Mode,
    samples: list[tuple[tuple[Any, ...], dict[str, Any]] | None],
    where: str,
    code_path: str | None,
    label: str,
) -> ProbeVerdict:
    """In the worker: the in-process trial itself, on a copy of `module` (`module` stays PyTorch's)."""
    import copy

    from kernel_explorer.switching.probe import try_layer

    trial = copy.deepcopy(module)
    return try_layer(trial, module, entry, mode, samples, where=where, code_path=code_path, label=label)


# -- the parent's side -----------------------------------------------------------------------------


class _Worker:
    """One worker process and the socket the parent talks to it on."""

    def __init__(self) -> None:
        import torch

        parent, child = socket.socketpair()
        code = (
            "import sys; sys.path[:0] = sys.argv[2:]; "
            "from kernel_explorer.switching.isolation import serve; serve(int(sys.argv[1]))"
        )
        threads = str(torch.get_num_threads())
        env = {**os.environ, "KERNEL_EXPLORER_WORKER_THREADS": threads}
        log = os.environ.get("KERNEL_EXPLORER_WORKER_LOG")  # where its output goes; default: nowhere
        with open(log or os.devnull, "ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code, str(child.fileno()), *[p for p in sys.path if p]],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                env=env,
                close_fds=True,
            )
        child.close()
        self.socket = parent
        from multiprocessing.connection import Connection

        self.connection = Connection(os.dup(parent.fileno()))
        parent.close()
        if not self.connection.poll(START_TIMEOUT) or self._receive() != ("ready", None):
            self.stop()
            raise RuntimeError("the trial worker did not start")

    def alive(self) -> bool:
        return self.process.poll() is None

    def _receive(self) -> tuple[str, Any]:
        return pickle.loads(self.connection.recv_bytes())

    def call(self, payload: bytes, timeout: float) -> tuple[str, Any]:
        """Send one request; ("ok", result), ("raised" | "crashed" | "timeout", reason) or
        ("unisolable", why)."""
        try:
            self.connection.send_bytes(payload)
            # rebuilding the arguments there imports their classes' modules: not the trial's time
            if not self.connection.poll(START_TIMEOUT):
                self.stop()
                return "timeout", f"did not answer in {START_TIMEOUT:g} s"
            status, value = self._receive()
            if status != "rebuilt":
                return status, value
            if not self.connection.poll(timeout):
                self.stop()
                return "timeout", f"did not answer in {timeout:g} s"
            return self._receive()
        except (EOFError, OSError):
            return "crashed", f"crashed its trial ({self._death()})"

    def _death(self) -> str:
        """How the worker died: the signal's name, or its exit code."""
        try:
            code = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.stop()
            return "it stopped answering"
        if code < 0:
            with contextlib.suppress(ValueError):
                return signal.Signals(-code).name
            return f"signal {-code}"
        return f"exit code {code}"

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.close()
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


_lock = threading.RLock()  # one request at a time: the worker answers in order
_worker: _Worker | None = None


def _started() -> _Worker:
    """The session's worker, started (again) when there is none alive."""
    global _worker
    if _worker is None or not _worker.alive():
        if _worker is not None:
            _worker.stop()
        _worker = _Worker()
    return _worker


atexit.register(close)


class _Pickler(pickle.Pickler):
    """Classes the explorer (or kernels) makes at run time, sent as how to make them again."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type):
            base = obj.__dict__.get("kernel_explorer_base")
            if base is not None:  # an extended instance's marked subclass
                return _marked_again, (base, obj.kernel_layer_name)
            if "<locals>" in obj.__qualname__:
                from kernel_explorer._backend.function_layers import function_of_class

                found = function_of_class(obj)
                if found is not None:  # a function layer's class: the one of the function it wraps
                    return _function_layer_class, found
        return NotImplemented


_MARKED: dict[tuple[type, str], type] = {}


def _marked_again(base: type, layer_name: str) -> type:
    """In the worker: a subclass of `base` marked as kernel layer `layer_name`, as `extension.
    marked_class` makes it in the notebook (kernels' class attributes, nothing else)."""
    from kernel_explorer._backend.layer_forwards import mark_layer_class

    found = _MARKED.get((base, layer_name))
    if found is None:
        namespace = {"__module__": __name__, "__qualname__": base.__qualname__, "kernel_explorer_base": base}
        metaclass: type = type(base)  # the class's own metaclass, as a class statement would use
        made: type[nn.Module] = metaclass(base.__name__, (base,), namespace)
        mark_layer_class(made, layer_name)
        _MARKED[(base, layer_name)] = found = made
    return found


def _function_layer_class(module: str, name: str) -> type:
    """In the worker: the class of the function layer Transformers' `module` defines as `name`."""
    import importlib

    return type(getattr(importlib.import_module(module), name))


def _dumps(value: Any) -> bytes:
    buffer = io.BytesIO()
    try:
        _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    except Exception as error:
        raise Unisolable(f"{type(error).__name__}: {error}") from None
    return buffer.getvalue()


# -- the worker's side -----------------------------------------------------------------------------


def serve(fd: int) -> None:
    """The worker's loop: one request in, one answer out, until the parent goes."""
    from multiprocessing.connection import Connection

    _die_with_parent()
    connection = Connection(fd)
    import kernels  # noqa: F401 - imported once here, not inside a trial's limit
    import torch
    import transformers  # noqa: F401

    import kernel_explorer._backend.hub
    import kernel_explorer._backend.layer_forwards
    import kernel_explorer.catalog.peers
    import kernel_explorer.switching.attention_trial
    import kernel_explorer.switching.code_paths
    import kernel_explorer.switching.guard
    import kernel_explorer.switching.probe  # noqa: F401

    torch.set_num_threads(int(os.environ.get("KERNEL_EXPLORER_WORKER_THREADS", torch.get_num_threads())))
    state = (torch.get_num_threads(), torch.get_default_dtype(), torch.is_grad_enabled())
    connection.send_bytes(pickle.dumps(("ready", None)))
    while True:
        try:
            data = connection.recv_bytes()
        except (EOFError, OSError):
            return
        torch.set_num_threads(state[0])  # what a kernel changed in an earlier trial stays there
        torch.set_default_dtype(state[1])
        torch.set_grad_enabled(state[2])
        connection.send_bytes(_answer(data, connection))


def _answer(data: bytes, connection: Any) -> bytes:
    from kernel_explorer.switching.probe import explain

    try:
        function, args, environ, path = pickle.loads(data)
    except Exception as error:
        return pickle.dumps(("unisolable", f"{type(error).__name__}: {error}"))
    connection.send_bytes(pickle.dumps(("rebuilt", None)))  # the trial's time starts now
    os.environ.clear()
    os.environ.update(environ)
    sys.path[:] = list(dict.fromkeys([*path, *sys.path]))
    try:
        answer = ("ok", function(*args))
    except BaseException as error:  # a stranger's code may raise anything, SystemExit included
        answer = ("raised", explain(error))
    try:
        return pickle.dumps(answer)
    except Exception as error:
        return pickle.dumps(("raised", f"its answer cannot be sent back: {type(error).__name__}: {error}"))


def _die_with_parent() -> None:
    """Linux: the worker gets SIGKILL when the notebook's process dies (a hung trial included)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
