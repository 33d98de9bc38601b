"""Start and stop a real JupyterLab (or Notebook 7) on 127.0.0.1 with a token: the browser tests'
fixture and `bench/dashboard_soak.py` share it."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Debian's chromium, headless, with nothing that reaches the network (the machine has none)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


class LabError(RuntimeError):
    """The server did not start (its log's tail is the message)."""


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    app: str  # "jupyterlab" or "notebook" (Notebook 7)

    def notebook(self, name: str, cells: list[str]) -> str:
        """Write a notebook into the lab's folder; returns the URL that opens it."""
        notebook = {
            "cells": [
                {"cell_type": "code", "metadata": {}, "source": cell, "outputs": [], "execution_count": None}
                for cell in cells
            ],
            "metadata": {
                "kernelspec": {
                    "name": "python3",
                    "display_name": "Python 3 (ipykernel)",
                    "language": "python",
                }
            },
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        (self.root / name).write_text(json.dumps(notebook))
        return self.notebook_url(name)

    def notebook_url(self, name: str) -> str:
        """The URL that opens notebook `name` (already in the lab's folder)."""
        if self.app == "notebook":
            return f"{self.url}/notebooks/{name}?token={self.token}"
        # reset: JupyterLab restores the last workspace otherwise, and the previous test's notebook
        # (its kernel shut down) opened beside this one and hid its cells
        return f"{self.url}/lab/tree/{name}?token={self.token}&reset"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def start_lab(app: str, root: Path) -> Iterator[Lab]:
    """`app` ("jupyterlab" or "notebook") serving `root`; stopped when the block ends."""
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ, JUPYTER_CONFIG_DIR=str(root / ".jupyter"), JUPYTER_RUNTIME_DIR=str(root / ".runtime")
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            app,
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--allow-root",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(root / "lab.log", "w"),  # noqa: SIM115
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                server.kill()
                raise LabError(
                    f"JupyterLab did not start:\n{(root / 'lab.log').read_text()[-2000:]}"
                ) from None
            time.sleep(0.3)
    try:
        yield Lab(url, token, root, app)
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()


def shut_down_kernels(lab: Lab) -> None:
    """Every kernel of the server goes: a dashboard's live run left going in one test's kernel took a
    core from the next test's measurements (the explore bar then outlived its wait)."""

    with urllib.request.urlopen(f"{lab.url}/api/kernels?token={lab.token}", timeout=10) as answer:
        kernels = json.load(answer)
    for kernel in kernels:
        request = urllib.request.Request(
            f"{lab.url}/api/kernels/{kernel['id']}?token={lab.token}", method="DELETE"
        )
        with contextlib.suppress(OSError):
            urllib.request.urlopen(request, timeout=30).close()
