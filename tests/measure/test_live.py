"""The Run's model forward: the board's lock per kernel layer instance, and Stop seen inside it."""

from __future__ import annotations

import threading

import pytest

from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama
from kernel_explorer.measure.capture import model_inputs, run_model
from kernel_explorer.measure.live import RunCancelled, locked_per_instance
from kernel_explorer.measure.runner import RunHandle, _current, current_run_cancelled


@pytest.fixture
def explorer(hub: dict) -> Explorer:
    found = Explorer(tiny_llama(), include_transformers=False)
    yield found
    found.reset()


def test_a_switch_gets_the_lock_between_two_layers_of_the_forward(explorer: Explorer) -> None:
    """The whole forward held the lock: a switch clicked during it (3 to 10 s on a busy machine)
    waited for all of it. Now another thread can take the lock between two instances' calls."""
    board = explorer._switchboard  # the measurement's side: measure/ runs on the board
    kwargs = model_inputs(explorer.model, None, explorer.tokenizer)
    taken: list[bool] = []
    norm = explorer.model.model.norm  # the last kernel layer instance: every other one ran before it

    def from_another_thread(module: object, args: object) -> None:
        def take() -> None:
            got = board.lock.acquire(timeout=2)
            taken.append(got)
            if got:
                board.lock.release()

        thread = threading.Thread(target=take)
        thread.start()
        thread.join()

    hook = norm.register_forward_pre_hook(from_another_thread, prepend=True)
    try:
        with locked_per_instance(board):
            run_model(explorer.model, kwargs)
    finally:
        hook.remove()
    assert taken == [True]  # between two kernel layer instances the lock was free


def test_stop_is_seen_inside_the_forward(explorer: Explorer) -> None:
    board = explorer._switchboard
    kwargs = model_inputs(explorer.model, None, explorer.tokenizer)
    handle = RunHandle("run-x")
    handle.cancel()
    _current.handle = handle
    try:
        assert current_run_cancelled()
        with pytest.raises(RunCancelled), locked_per_instance(board):
            run_model(explorer.model, kwargs)
    finally:
        _current.handle = None
    assert board.lock.acquire(blocking=False)  # nothing left holding it
    board.lock.release()
