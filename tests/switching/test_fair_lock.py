"""The board's lock goes to a switch between two timed pairs, not after the measurement lets go."""

from __future__ import annotations

import threading
import time

from kernel_explorer.switching.fair_lock import HandingRLock


def _longest_wait(lock: object, tries: int = 20) -> float:
    """A 'measurement' takes `lock` for ~2 ms at a time, back to back, holding the interpreter in
    between (as recording a pair does); the longest another thread waits for it, of `tries`."""
    stop = threading.Event()

    def measure() -> None:
        while not stop.is_set():
            with lock:
                end = time.perf_counter() + 0.002
                while time.perf_counter() < end:
                    pass
            sum(range(200))  # the record of the pair: Python work, the interpreter held

    worker = threading.Thread(target=measure)
    worker.start()
    waits = []
    try:
        for _ in range(tries):
            began = time.perf_counter()
            with lock:
                waits.append(time.perf_counter() - began)
            time.sleep(0.01)
    finally:
        stop.set()
        worker.join()
    return max(waits)


def test_a_waiting_thread_gets_the_lock_between_two_holds() -> None:
    assert _longest_wait(HandingRLock()) < 0.25


def test_it_is_reentrant_and_non_blocking_acquire_says_no() -> None:
    lock = HandingRLock()
    with lock, lock:
        taken = []
        thread = threading.Thread(target=lambda: taken.append(lock.acquire(blocking=False)))
        thread.start()
        thread.join()
        assert taken == [False]
    assert lock.acquire(blocking=False)
    lock.release()
