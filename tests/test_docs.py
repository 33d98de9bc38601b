"""The README stays a two-minute read, and what the docs point at exists.

`mkdocs build --strict` (run by `make test` before pytest) checks the pages' links and anchors and
the API reference; these check what it cannot see: the README's size and opening, its links into
docs/, and the repository paths the pages name in code spans (a renamed bench script or result
file would otherwise leave a stale name behind).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# a path in backticks under one of the repository's own folders, e.g. `bench/results/x.txt`
_PATH = re.compile(r"`((?:bench|binder|hub|kernel_explorer|notebooks|tests|widgets)/[\w./*-]*)`")


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.encode()) <= 8 * 1024, "README.md is over 8 KB: move the detail to a page in docs/"
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    assert first_block.startswith("make demo"), first_block
    assert "make test" in first_block
    assert text.index("```bash") < text.index("## "), "the two commands come before the first section"


def test_readme_links_reach_files() -> None:
    links = re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", README.read_text())
    assert links, "the README links to the docs"
    missing = [link for link in links if not (ROOT / link).exists()]
    assert missing == []


def test_paths_the_docs_name_exist() -> None:
    pages = [*DOCS.rglob("*.md"), ROOT / "DESIGN.md", README]
    missing = []
    for page in pages:
        for path in _PATH.findall(page.read_text()):
            path = path.rstrip(".")
            if not any(ROOT.glob(path)):
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert missing == []
