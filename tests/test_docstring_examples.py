"""Every example in a docstring runs: a reader copies them first, so a broken one is a broken promise.

Examples are the ```python blocks of any docstring in the package (module, class or function); each
runs in a fresh namespace, in the order written. The one in `Explorer` loads the default model,
hence slow.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

import kernel_explorer

PACKAGE = Path(kernel_explorer.__file__).parent
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _examples() -> list[tuple[str, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "hub" in path.relative_to(PACKAGE).parts:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node) or ""
                for n, block in enumerate(BLOCK.findall(doc)):
                    where = f"{path.relative_to(PACKAGE)}:{getattr(node, 'name', '<module>')}#{n}"
                    found.append((where, block))
    return found


def test_the_package_has_docstring_examples() -> None:
    assert any("Explorer" in where for where, _ in _examples())


@pytest.mark.slow
@pytest.mark.parametrize(("where", "code"), _examples(), ids=[w for w, _ in _examples()])
def test_docstring_example_runs(where: str, code: str, hub: dict) -> None:
    exec(compile(textwrap.dedent(code), where, "exec"), {"__name__": "__example__"})
