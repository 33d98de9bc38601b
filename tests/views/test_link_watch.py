"""The dashboard's link watcher against a real kernel: the protocol its front end relies on.

`widgets/link_watch.js` reads a ping that the kernel took ("idle" for it) without a pong as a kernel
that no longer knows the dashboard (restarted where the page did not hear it). Here a real ipykernel,
driven through jupyter_client as JupyterLab drives it, holds that: a live watcher's pong comes before
the kernel's idle for the ping, and after a restart the same ping gets its idle and no pong. (The
page's side, with JupyterLab and Chromium, is tests/browser/test_kernel_restart.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel_explorer.views.link_watch import AGAIN, LinkWatch

WIDGETS = Path(__file__).resolve().parents[2] / "widgets"


@pytest.fixture
def kernel() -> Iterator[tuple[Any, Any]]:
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3")
    yield manager, client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def _answers(client: Any, msg_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The iopub messages a request caused, up to the kernel's idle for it, in order."""
    found = []
    while True:
        message = client.get_iopub_msg(timeout=60)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        found.append((message["msg_type"], message["content"]))
        if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            return found


def _ping(client: Any, comm_id: str, n: int) -> list[tuple[str, dict[str, Any]]]:
    """What the page's ping looks like on the wire: an ipywidgets "custom" message to the comm."""
    message = client.session.msg(
        "comm_msg", {"comm_id": comm_id, "data": {"method": "custom", "content": {"type": "ping", "n": n}}}
    )
    client.shell_channel.send(message)
    return _answers(client, message["header"]["msg_id"])


def test_a_ping_gets_its_pong_before_idle_and_none_after_a_restart(kernel: tuple[Any, Any]) -> None:
    manager, client = kernel
    msg_id = client.execute("from kernel_explorer.views.link_watch import LinkWatch\nwatch = LinkWatch()")
    opened = [content for kind, content in _answers(client, msg_id) if kind == "comm_open"]
    comm_id = next(c["comm_id"] for c in opened if c["data"]["state"].get("_model_name") == "AnyModel")

    answers = _ping(client, comm_id, 7)
    kinds = [kind for kind, _ in answers]
    pongs = [c["data"]["content"] for kind, c in answers if kind == "comm_msg"]
    assert pongs == [{"type": "pong", "n": 7}], answers
    assert kinds.index("comm_msg") < len(kinds) - 1 and kinds[-1] == "status"  # the pong, then idle

    manager.restart_kernel(now=True)  # what JupyterLab's REST call does: the page hears nothing of it
    client.wait_for_ready(timeout=60)
    answers = _ping(client, comm_id, 8)
    assert answers[-1] == ("status", {"execution_state": "idle"}), answers  # taken...
    assert not [c for kind, c in answers if kind == "comm_msg"], answers  # ...and no pong: the page says so


def test_the_watcher_sits_first_in_the_dashboard_and_says_what_to_do(hub: dict) -> None:
    from kernel_explorer.explorer import Explorer
    from kernel_explorer.loading import tiny_llama
    from kernel_explorer.views.dashboard import Dashboard

    dashboard = Dashboard(Explorer(tiny_llama(), include_transformers=False))
    try:
        assert isinstance(dashboard.widget.children[0], LinkWatch)  # read first, above the table
        assert dashboard.link.again == AGAIN and "%kernels explore" in AGAIN
    finally:
        dashboard.close()
        dashboard.explorer.reset()


def test_the_watcher_and_the_table_speak_of_one_event() -> None:
    """The table ends a click in flight on the event the watcher sends, and the other way round."""
    watcher = (WIDGETS / "link_watch.js").read_text()
    table = (WIDGETS / "layer_table.js").read_text()
    for source in (watcher, table):
        assert 'new CustomEvent("kx-link-lost"' in source and 'addEventListener("kx-link-lost"' in source
    assert "kx-unlinked" in (WIDGETS / "link_watch.css").read_text() and "kx-unlinked" in watcher
