"""A real JupyterLab on 127.0.0.1 (started here, stopped after) and Debian's chromium via Playwright."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_server import CHROMIUM_ARGS, Lab, LabError, shut_down_kernels, start_lab

SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"


@pytest.fixture(scope="session", params=["jupyterlab", "notebook"])
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, hub: dict) -> Iterator[Lab]:
    """JupyterLab 4, then Notebook 7, each on 127.0.0.1 with a token."""
    app = request.param
    try:
        with start_lab(app, tmp_path_factory.mktemp(app)) as found:
            yield found
    except LabError as error:
        pytest.fail(str(error))


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
    shut_down_kernels(lab)


def screenshot(page: object, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
