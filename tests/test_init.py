"""The package's public face: `__all__` pinned, cheap import, no import cycles (types included)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import kernel_explorer

PACKAGE = Path(kernel_explorer.__file__).parent

PUBLIC = {
    "Accelerator", "Availability", "BuiltRepo", "CacheDirError", "Candidate", "CapturedInputs",
    "Compatibility", "CpuInfo", "DefaultModelMissingError", "Explorer", "HardwareSnapshot",
    "IncompatibleVersionsError", "Inventory",
    "InventoryRow", "KernelExplorerError", "KernelSwitchError", "LayerDeterminism", "LayerDivergence",
    "LayerGroup", "LayerLatency", "ModelAgreement", "ModelDecode", "ModelPrefill", "ModelThroughput",
    "NoUsableKernelError", "NoisyMachineWarning", "Record", "ResultLog", "RunEvent", "RunHandle",
    "RunningNow", "State", "Verdict", "CandidateVariants", "VariantsReport",
    "__version__", "build_hub", "check_compatibility", "detect_hardware", "find_kernel_layers",
    "load_default_model", "load_model", "tiny_gpt2", "tiny_llama",
}  # fmt: skip


def test_all_is_the_public_surface() -> None:
    assert set(kernel_explorer.__all__) == PUBLIC
    assert all(hasattr(kernel_explorer, name) for name in kernel_explorer.__all__)
    public_attributes = {
        name
        for name, value in vars(kernel_explorer).items()
        if not name.startswith("_") and not isinstance(value, type(kernel_explorer))
    }
    extension_hooks = {"load_ipython_extension", "unload_ipython_extension"}
    assert public_attributes - extension_hooks == PUBLIC - {"__version__"}


def test_what_explorer_returns_is_public() -> None:
    from kernel_explorer import Explorer

    hints = {
        Explorer.compare: "RunHandle",
        Explorer.running: "RunningNow",
        Explorer.inventory: "Inventory",
        Explorer.captured_inputs: "CapturedInputs",
    }
    for method, name in hints.items():
        assert name in str(method.__annotations__["return"])
    assert "RunHandle" in PUBLIC and "ResultLog" in PUBLIC and "Record" in PUBLIC


def test_every_type_a_public_explorer_method_returns_is_exported() -> None:
    """A user can name (and type-hint) whatever `Explorer` hands back without a private import."""
    import inspect
    import re

    from kernel_explorer import Explorer

    returned: dict[str, set[str]] = {}
    for name in (n for n in dir(Explorer) if not n.startswith("_")):
        member = inspect.getattr_static(Explorer, name)
        function = getattr(member, "fget", None) or getattr(member, "func", None) or member
        annotation = getattr(getattr(function, "__func__", function), "__annotations__", {}).get("return")
        if annotation is None:
            continue
        for word in re.findall(r"[A-Za-z_][\w.]*", str(annotation)):
            returned.setdefault(word.rsplit(".", 1)[-1], set()).add(name)
    builtins = {
        "list",
        "dict",
        "tuple",
        "str",
        "int",
        "float",
        "bool",
        "None",
        "Iterator",
        "Callable",
        "Mode",  # kernels' own
        "Path",
    }
    exported = set(kernel_explorer.__all__)
    missing = {t: sorted(m) for t, m in returned.items() if t not in builtins and t not in exported}
    assert missing == {}, f"returned by Explorer but not in kernel_explorer.__all__: {missing}"
    assert {"RunHandle", "CapturedInputs", "Inventory", "RunningNow"} <= returned.keys()


def test_import_is_cheap() -> None:
    code = (
        "import sys, kernel_explorer; "
        "print(sorted(m for m in ('torch', 'transformers', 'kernels', 'plotly', 'ipywidgets') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str) -> set[str]:
    """Package modules `path` imports anywhere: functions and `TYPE_CHECKING` blocks included, since
    an import made only for a type is still a dependency a reader must follow."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(name.split(".")[: -node.level] + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}")
                found.add(base)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {m for m in found if m.startswith("kernel_explorer.")}


def test_no_import_cycles() -> None:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "hub" not in p.relative_to(PACKAGE).parts}
    graph = {
        name: {m for m in _imports(path, name) if m in modules and m != name}
        for name, path in modules.items()
        if name != "kernel_explorer"  # the package face imports everything it re-exports
    }
    cycles = []

    def visit(node: str, stack: list[str], done: set[str]) -> None:
        if node in stack:
            cycles.append(" -> ".join([*stack[stack.index(node) :], node]))
            return
        if node in done:
            return
        for child in sorted(graph.get(node, ())):
            visit(child, [*stack, node], done)
        done.add(node)

    finished: set[str] = set()
    for start in sorted(graph):
        visit(start, [], finished)
    assert cycles == []


def test_nothing_below_the_explorer_imports_the_views() -> None:
    views = (
        "kernel_explorer.views",
        "kernel_explorer.views.magics",
        "kernel_explorer.views.cli",
        "kernel_explorer.views.report",
        "kernel_explorer.__main__",  # `python -m kernel_explorer`: the CLI's door
    )
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        if name.startswith(views) or name == "kernel_explorer" or "hub" in path.relative_to(PACKAGE).parts:
            continue
        imported = _imports(path, name)
        below_explorer_import_views = [m for m in imported if m.startswith(views)]
        if name == "kernel_explorer.explorer":  # report() writes through report.py, lazily
            below_explorer_import_views = [m for m in below_explorer_import_views if "report" not in m]
        assert below_explorer_import_views == [], name


def test_every_subpackage_is_packaged() -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    packaged = set(config["tool"]["setuptools"]["packages"])
    found = {
        _module_name(p) for p in PACKAGE.rglob("__init__.py") if "hub" not in p.relative_to(PACKAGE).parts
    }
    assert found <= packaged  # a plain (non-editable) install, as Binder makes, must carry them all
