"""A real JupyterLab on 127.0.0.1 (started here, stopped after) and Debian's chromium via Playwright."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

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
SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"


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


@pytest.fixture(scope="session", params=["jupyterlab", "notebook"])
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, hub: dict) -> Iterator[Lab]:
    """JupyterLab 4, then Notebook 7, each on 127.0.0.1 with a token."""
    app = request.param
    root = tmp_path_factory.mktemp(app)
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
                pytest.fail(f"JupyterLab did not start:\n{(root / 'lab.log').read_text()[-2000:]}")
            time.sleep(0.3)
    yield Lab(url, token, root, app)
    server.terminate()
    try:
        server.wait(15)
    except subprocess.TimeoutExpired:
        server.kill()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.fail(
            "Browser tests need Debian's chromium: apt-get install -y chromium (make setup does it as root)"
        )
    with sync_playwright() as playwright:
        found = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield found
        found.close()


@pytest.fixture
def page(browser: object, lab: Lab) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    found = context.new_page()
    yield found
    context.close()
    _shut_down_kernels(lab)


def _shut_down_kernels(lab: Lab) -> None:
    """Every kernel of the server goes after a test: a dashboard's live run left going in one test's
    kernel took a core from the next test's measurements (the explore bar then outlived its wait)."""

    with urllib.request.urlopen(f"{lab.url}/api/kernels?token={lab.token}", timeout=10) as answer:
        kernels = json.load(answer)
    for kernel in kernels:
        request = urllib.request.Request(
            f"{lab.url}/api/kernels/{kernel['id']}?token={lab.token}", method="DELETE"
        )
        with contextlib.suppress(OSError):
            urllib.request.urlopen(request, timeout=30).close()


def screenshot(page: object, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
