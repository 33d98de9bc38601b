"""Switch notifications: per model, once per outermost change, errors kept and never raised."""

from __future__ import annotations

import torch

from kernel_explorer.switching import events as switch_events


def test_nested_changes_notify_once_and_only_that_model() -> None:
    model, other = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    heard: list[str] = []
    switch_events.subscribe(model, lambda: heard.append("model"))
    switch_events.subscribe(other, lambda: heard.append("other"))
    with switch_events.changing(model):
        with switch_events.changing(model):
            assert heard == []
        assert heard == []
    assert heard == ["model"]


def test_a_failing_observer_is_kept_not_raised() -> None:
    model = torch.nn.Linear(2, 2)
    heard: list[int] = []
    switch_events.subscribe(model, lambda: 1 / 0)
    unsubscribe = switch_events.subscribe(model, lambda: heard.append(1))
    before = len(switch_events.errors(model))
    with switch_events.changing(model):
        pass
    assert heard == [1] and isinstance(switch_events.errors(model)[-1], ZeroDivisionError)
    assert len(switch_events.errors(model)) == before + 1
    unsubscribe()
    with switch_events.changing(model):
        pass
    assert heard == [1]
