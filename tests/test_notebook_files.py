"""The tutorials as files: opening one changes nothing, git holds them without outputs, and their
prose says what to look for, never a figure one run printed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]-*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_opening_a_tutorial_changes_nothing(path: Path) -> None:
    """JupyterLab gives a cell without an id one and saves nbformat 4.5 as nbformat writes it:
    four cells of notebook 04 had no id, so opening it marked it modified."""
    text = path.read_text()
    notebook = json.loads(text)
    assert (notebook["nbformat"], notebook["nbformat_minor"]) == (4, 5)
    assert all("id" in cell for cell in notebook["cells"])
    assert nbformat.writes(nbformat.reads(text, as_version=4)) + "\n" == text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_tutorials_are_kept_without_outputs(path: Path) -> None:
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, cell["source"][:80]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_prose_states_no_measured_figure(path: Path) -> None:
    """Notebook 04 read "0.99x predicted, 1.2x realized" where the run printed 0.94x and 1.18x."""
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"])
            figures = [f for f in re.findall(r"\b\d+(?:\.\d+)?x\b", text) if f != "1x"]  # 1x: the line
            assert not figures, (figures, text[:200])
