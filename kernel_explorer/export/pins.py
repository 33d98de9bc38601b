"""The Hub kernels switched on now as `[tool.kernels.dependencies]` in a project's pyproject.toml.

`kernels lock PROJECT` resolves each `repo_id = version` entry to a commit (`kernels.lock`), and
`kernels` then loads those commits for the project. Only Hub repositories with a version can be
listed there; a local build or a kernel chosen by revision is written as a comment saying why, so
the file names every kernel the export uses.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_explorer.errors import KernelExplorerError

if TYPE_CHECKING:
    from kernel_explorer.export.plan import ExportPlan

HEADER = "[tool.kernels.dependencies]"


def pin_lines(plan: ExportPlan) -> list[str]:
    """The table's lines: `"org/name" = 1` per Hub kernel with a version, comments for the rest."""
    entries: dict[str, str] = {}
    comments: list[str] = []
    for layer in plan.layers:
        for choice in layer.choices:
            repo = choice.repository
            if repo.hub_id is not None and repo.version is not None:
                entries[repo.hub_id] = f"{repo.hub_id!r} = {repo.version}".replace("'", '"')
            elif repo.hub_id is not None:
                comments.append(
                    f"# {repo.hub_id} ({layer.layer}) is chosen by revision {repo.revision}: "
                    "kernels lock takes versions"
                )
            else:
                comments.append(f"# {layer.layer}: {choice.label} is a local build, not a Hub dependency")
    attention = plan.attention
    if attention is not None and attention.folder is None and "/" in attention.implementation:
        repo_id = attention.implementation.partition(":")[0].partition("@")[0]
        comments.append(f"# attention: {repo_id} (Transformers loads it by its own version rule)")
    elif attention is not None and attention.folder is not None:
        comments.append(f"# attention: {attention.label} is a local build, not a Hub dependency")
    return [HEADER, *sorted(entries.values()), *dict.fromkeys(comments)]


def write_pins(plan: ExportPlan, project: str | Path) -> Path:
    """Write (or replace) the table in `project`/pyproject.toml; returns the file's path.

    The rest of the file stays as it was, byte for byte: the table is replaced where it stands, or
    appended.
    """
    root = Path(project).expanduser()
    if not root.is_dir():
        raise KernelExplorerError(f"project {root} is not a folder; give the folder of pyproject.toml")
    path = root / "pyproject.toml"
    text = path.read_text() if path.is_file() else ""
    table = "\n".join(pin_lines(plan)) + "\n"
    found = re.search(r"^\[tool\.kernels\.dependencies\][^\n]*\n(?:(?!\[)[^\n]*\n?)*", text, re.MULTILINE)
    if found:
        text = text[: found.start()] + table + ("\n" if text[found.end() :] else "") + text[found.end() :]
    else:
        text = text + ("\n" if text and not text.endswith("\n\n") else "") + table
    try:
        path.write_text(text)
    except OSError as error:
        raise KernelExplorerError(
            f"cannot write {path}: {error.strerror}; choose a writable project"
        ) from None
    return path
