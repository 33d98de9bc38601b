"""The layers the imports make: read every import of the package (top level, inside functions, and
those made only for types, since each is a dependency a reader must follow), map it to its layer,
and hold the graph to what each layer says it may import.

A layer is a subpackage (`build`, `catalog`, `inspect`, `switching`, `measure`, `numerics`,
`inventory`, `export`, `sweep`, `views`, `_backend`), or one of the top-level modules: `errors`
(the leaf every layer raises from), the face's modules (`explorer`, `records`, `loading`,
`machine`), `__main__`, and the package itself (`kernel_explorer/__init__.py`, which also opens
the IPython extension, so it sits above the views). Each states its rule in its docstring (a
subpackage's in its `__init__`) as one line: `May import: a, b, c` (or `nothing`).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import kernel_explorer

PACKAGE = Path(kernel_explorer.__file__).parent
PACKAGE_NODE = "kernel_explorer"
#: what the views may import: the face, never a layer below it
FACE = {
    "kernel_explorer.explorer",
    "kernel_explorer.records",
    "kernel_explorer.errors",
    "kernel_explorer.loading",
    "kernel_explorer.machine",
}
_RULE = re.compile(r"^May import: (.+)$", re.MULTILINE)


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "hub" in path.relative_to(PACKAGE).parts:  # the bundled kernels' sources, not the package
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def layer(module: str) -> str:
    """The layer `module` belongs to: its subpackage, its own name at the top level, or the package."""
    parts = module.split(".")
    return PACKAGE_NODE if len(parts) == 1 else parts[1]


def imports(module: str) -> Iterator[tuple[str, int]]:
    """(package module imported, line) for every import in `module`, wherever it stands."""
    path = MODULES[module]
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(anchor[: len(anchor) - node.level + 1] + ([base] if base else []))
            # `from package import submodule` imports the submodule; `from package import name` the package
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            if target == PACKAGE_NODE or target.startswith(PACKAGE_NODE + "."):
                yield target, node.lineno


def edges() -> dict[tuple[str, str], list[str]]:
    """(layer, layer it imports) -> the imports that make the edge, as `module:line -> target`."""
    found: dict[tuple[str, str], list[str]] = {}
    for module in sorted(MODULES):
        for target, line in imports(module):
            source, dest = layer(module), layer(target)
            seen = found.setdefault((source, dest), []) if source != dest else None
            if seen is not None and f"{module}:{line} -> {target}" not in seen:
                seen.append(f"{module}:{line} -> {target}")
    return found


def rules() -> dict[str, set[str]]:
    """Each layer's "May import:" line, read from its docstring (a subpackage's `__init__`)."""
    found = {}
    for module, path in MODULES.items():
        if module != PACKAGE_NODE and path.name != "__init__.py" and module.count(".") > 1:
            continue  # a module inside a subpackage: its package's rule holds
        node = layer(module)
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        lines = _RULE.findall(docstring)
        where = path.relative_to(PACKAGE.parent)
        assert len(lines) == 1, f"{where}: {len(lines)} 'May import:' lines in its docstring, want 1"
        names = {name.strip(" .`") for name in lines[0].split(",")}
        found[node] = set() if names == {"nothing"} else names
    return found


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` (its nodes in order, the first again at the end), or None."""
    done: set[str] = set()

    def visit(node: str, stack: list[str]) -> list[str] | None:
        if node in stack:
            return [*stack[stack.index(node) :], node]
        if node in done:
            return None
        for child in sorted(graph.get(node, ())):
            if (found := visit(child, [*stack, node])) is not None:
                return found
        done.add(node)
        return None

    for start in sorted(graph):
        if (found := visit(start, [])) is not None:
            return found
    return None


def test_every_layer_states_its_rule() -> None:
    stated = rules()
    layers = {layer(module) for module in MODULES}
    assert set(stated) == layers
    unknown = {node: names - layers for node, names in stated.items() if names - layers}
    assert unknown == {}, f"rules naming no layer: {unknown}"


def test_the_layers_import_one_way() -> None:
    """The graph of layers is acyclic; a cycle is printed with the imports that make it."""
    found = edges()
    graph: dict[str, set[str]] = {}
    for source, dest in found:
        graph.setdefault(source, set()).add(dest)
    loop = cycle(graph)
    if loop is not None:
        steps = [f"{a} -> {b}: {'; '.join(found[(a, b)][:3])}" for a, b in itertools.pairwise(loop)]
        raise AssertionError("import cycle " + " -> ".join(loop) + "\n" + "\n".join(steps))


def test_the_stated_rules_are_layers() -> None:
    """The rules themselves draw no circle: whatever the code does within them stays one-way."""
    assert cycle(rules()) is None, cycle(rules())


def test_every_import_obeys_its_layers_rule() -> None:
    stated = rules()
    broken = [
        f"{line}  ({source} may import: {', '.join(sorted(stated[source])) or 'nothing'})"
        for (source, dest), lines in edges().items()
        if dest not in stated[source]
        for line in lines
    ]
    assert broken == [], "imports a layer's 'May import:' line does not allow:\n" + "\n".join(broken)


def test_the_views_import_only_the_face() -> None:
    """Views reach `Explorer`, the results and this machine through the face's modules: what they
    need from below becomes an Explorer method or a name those modules re-export."""
    outside = [
        f"{module}:{line} -> {target}"
        for module in sorted(MODULES)
        if layer(module) == "views"
        for target, line in imports(module)
        if target not in FACE and layer(target) != "views"
    ]
    assert outside == [], "views importing below the face:\n" + "\n".join(outside)


def test_the_face_modules_are_the_views_only_way_down() -> None:
    """The views' rule and the face agree: the views may import exactly the face's layers."""
    assert rules()["views"] == {layer(module) for module in FACE}
    assert all(module in MODULES for module in FACE)


def test_the_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The reader is a real check: a lazy import, one made for types only, a relative one and a
    package-level `from kernel_explorer import X` are all seen."""
    source = """
from typing import TYPE_CHECKING
from .records import ResultLog
if TYPE_CHECKING:
    from kernel_explorer.switching.board import Switchboard
def later():
    import kernel_explorer.views.cli
    from kernel_explorer import Explorer, machine
"""
    probe = "kernel_explorer.measure.__layers_probe__"
    MODULES[probe] = tmp_path / "probe.py"
    MODULES[probe].write_text(source)
    try:
        seen = {target for target, _ in imports(probe)}
    finally:
        del MODULES[probe]
    assert seen == {
        "kernel_explorer.measure.records",
        "kernel_explorer.switching.board",
        "kernel_explorer.views.cli",
        "kernel_explorer",
        "kernel_explorer.machine",
    }


def test_no_module_imports_itself_back() -> None:
    """Within the layers too: no module reaches itself through its imports (types included)."""
    graph = {
        module: {target for target, _ in imports(module) if target in MODULES and target != module}
        for module in MODULES
    }
    loop = cycle(graph)
    assert loop is None, "module import cycle: " + " -> ".join(loop or ())
