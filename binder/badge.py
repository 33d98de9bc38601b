"""The README's Binder badge, derived from the one setting that names the repository.

That setting is `Repository` under `[project.urls]` in pyproject.toml (a GitHub URL): the package
metadata already has to name it, so the badge takes it from there instead of repeating it. After
changing it (publishing under another owner or name), run `make binder-badge` (this script), which
rewrites the badge line in README.md; `--check` only compares, and exits 1 with a one-line message
when they disagree (tests/test_binder.py runs the same comparison).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there, so the tests have it
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        sys.exit("binder/badge.py reads pyproject.toml: it needs Python 3.11+ or the tomli package")

ROOT = Path(__file__).resolve().parents[1]
# Binder builds this branch; the badge opens the quickstart in JupyterLab.
BRANCH = "main"
NOTEBOOK = "notebooks/01-quickstart.ipynb"
_GITHUB = re.compile(r"^https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?$")
_BADGE_LINE = re.compile(r"^\[!\[Binder\]\(.*$", re.MULTILINE)


def repository(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """`owner/name` from pyproject's `[project.urls] Repository`, or a ValueError saying what to fix."""
    urls = tomllib.loads(pyproject.read_text())["project"].get("urls", {})
    url = urls.get("Repository", "")
    match = _GITHUB.match(url)
    if not match:
        raise ValueError(
            f"{pyproject.name}: [project.urls] Repository must be https://github.com/<owner>/<name>, "
            f"got {url!r}"
        )
    return f"{match[1]}/{match[2]}"


def badge(repo: str) -> str:
    """The Markdown badge that launches `repo` on the public Binder service."""
    return (
        "[![Binder](https://mybinder.org/badge_logo.svg)]"
        f"(https://mybinder.org/v2/gh/{repo}/{BRANCH}?urlpath=lab/tree/{NOTEBOOK})"
    )


def readme_badge(readme: Path = ROOT / "README.md") -> str | None:
    """The README's current badge line, or None when it has none."""
    match = _BADGE_LINE.search(readme.read_text())
    return match[0] if match else None


def main(argv: list[str]) -> int:
    """Rewrite the README's badge from the setting, or with `--check` only report a mismatch."""
    readme = ROOT / "README.md"
    try:
        wanted = badge(repository())
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    current = readme_badge(readme)
    if current == wanted:
        return 0
    if current is None:
        print(f"README.md has no Binder badge line; put this one under the title: {wanted}", file=sys.stderr)
        return 1
    if "--check" in argv:
        print(
            "README.md's Binder badge disagrees with pyproject's Repository; run `make binder-badge`",
            file=sys.stderr,
        )
        return 1
    readme.write_text(readme.read_text().replace(current, wanted, 1))
    print(f"README.md: Binder badge now launches {repository()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
