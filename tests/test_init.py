"""The package's public face: a few names a user types, each importable and documented; every error
exported; a cheap import that changes nothing. (The import graph is tests/test_layers.py's.)"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import yaml

import kernel_explorer

PACKAGE = Path(kernel_explorer.__file__).parent
ROOT = PACKAGE.parent
#: the most names `__all__` may hold besides `__version__`: what a user types, not all that exists
MOST = 25
EXTENSION_HOOKS = {"load_ipython_extension", "unload_ipython_extension"}


def _names() -> list[str]:
    return [name for name in kernel_explorer.__all__ if name != "__version__"]


def test_all_is_small_and_every_name_imports() -> None:
    names = _names()
    assert len(names) <= MOST, f"{len(names)} names in kernel_explorer.__all__, at most {MOST}"
    assert len(set(names)) == len(names)
    for name in names:
        done = subprocess.run(
            [sys.executable, "-c", f"from kernel_explorer import {name}"], capture_output=True, text=True
        )
        assert done.returncode == 0, f"from kernel_explorer import {name}: {done.stderr.strip()}"


def test_the_package_shows_exactly_its_face() -> None:
    """What a user sees on `kernel_explorer.` is `__all__` (the IPython hooks and subpackages aside)."""
    shown = {
        name
        for name, value in vars(kernel_explorer).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    }
    assert shown - EXTENSION_HOOKS == set(_names())


def _documented_on_the_api_page() -> set[str] | None:
    """The names `docs/api/kernel_explorer.md` renders: None for all of `__all__` (a `::: kernel_explorer`
    block without a `members:` list), else the listed members."""
    page = (ROOT / "docs" / "api" / "kernel_explorer.md").read_text()
    block = re.search(r"^::: kernel_explorer\n((?:[ \t]+.*\n?)*)", page, re.MULTILINE)
    assert block is not None, "docs/api/kernel_explorer.md renders no `::: kernel_explorer`"
    options = (yaml.safe_load(block.group(1)) or {}).get("options", {}) if block.group(1).strip() else {}
    members = options.get("members")
    return None if members in (None, True) else set(members)


def test_every_public_name_is_documented() -> None:
    """Each name has a docstring of its own and appears in the API reference (mkdocs.yml's nav)."""
    nav = (ROOT / "mkdocs.yml").read_text()
    assert "api/kernel_explorer.md" in nav
    rendered = _documented_on_the_api_page()
    for name in _names():
        value = getattr(kernel_explorer, name)
        assert (inspect.getdoc(value) or "").strip(), f"kernel_explorer.{name} has no docstring"
        assert rendered is None or name in rendered, f"kernel_explorer.{name} is not on the API page"


def _classes(path: Path) -> list[ast.ClassDef]:
    return [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)]


def test_every_error_lives_in_errors_py_and_is_exported() -> None:
    """An error a user can act on is a `KernelExplorerError`, defined in errors.py, exported by name;
    the toolkit's warnings (`KernelExplorerWarning`) live there too."""
    from kernel_explorer import errors

    defined = {c.name for c in _classes(PACKAGE / "errors.py")}
    assert "KernelExplorerError" in defined
    elsewhere = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "errors.py" or "hub" in path.relative_to(PACKAGE).parts:
            continue
        for node in _classes(path):
            bases = {ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases}
            if bases & defined:
                elsewhere.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert elsewhere == [], "errors defined outside kernel_explorer/errors.py"
    kinds = (errors.KernelExplorerError, errors.KernelExplorerWarning)  # errors, and the warnings beside them
    for name in defined:
        assert issubclass(getattr(errors, name), kinds), name
    raised = {name for name in defined if issubclass(getattr(errors, name), errors.KernelExplorerError)}
    assert raised <= set(_names()), f"errors not exported: {sorted(raised - set(_names()))}"
    # the warning a user meets first is on the face; every warning filters by its root, in errors
    assert "NoisyMachineWarning" in _names()


def test_every_type_a_public_explorer_method_returns_is_importable_by_name() -> None:
    """A user can name (and type-hint) whatever `Explorer` hands back: from `kernel_explorer.explorer`
    (or the face), without reaching below it."""
    from kernel_explorer import explorer
    from kernel_explorer.explorer import Explorer

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
        "Path",
    }
    builtins.add("Mode")  # kernels' own
    public = set(explorer.__all__) | set(_names())
    missing = {t: sorted(m) for t, m in returned.items() if t not in builtins and t not in public}
    assert missing == {}, f"returned by Explorer but not in kernel_explorer.explorer.__all__: {missing}"
    assert {"RunHandle", "CapturedInputs", "Inventory", "RunningNow"} <= returned.keys()
    assert all(hasattr(explorer, name) for name in explorer.__all__)


def test_import_is_cheap() -> None:
    code = (
        "import sys, kernel_explorer; "
        "print(sorted(m for m in ('torch', 'transformers', 'kernels', 'plotly', 'ipywidgets') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_import_leaves_logging_as_it_was() -> None:
    """No filter, handler or level is set on any logger because the package was imported (the
    Transformers filter comes with the first Explorer or loaded model). A module the package imports
    may name its own logger (the standard library's concurrent.futures does): left unconfigured."""
    code = """if True:
        import logging

        def state():
            loggers = {"": logging.getLogger(), **logging.Logger.manager.loggerDict}
            return {
                name: (getattr(lg, "level", 0), list(getattr(lg, "filters", [])),
                       list(getattr(lg, "handlers", [])), getattr(lg, "disabled", False))
                for name, lg in loggers.items()
            }

        before = state()
        import kernel_explorer, kernel_explorer.explorer, kernel_explorer.machine, kernel_explorer.records
        after = state()
        changed = [name for name in before if before[name] != after[name]]
        configured = [name for name in set(after) - set(before) if after[name] != (0, [], [], False)]
        print(changed, configured, "transformers.modeling_flash_attention_utils" in after)
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[] [] False", done.stdout


def test_the_transformers_filter_comes_with_the_explorer() -> None:
    code = """if True:
        import logging
        name = "transformers.modeling_flash_attention_utils"
        from kernel_explorer import Explorer
        from kernel_explorer.loading import tiny_llama
        print(name in logging.Logger.manager.loggerDict and bool(logging.getLogger(name).filters))
        Explorer(tiny_llama(), include_transformers=False)
        print(bool(logging.getLogger(name).filters))
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"], done.stdout + done.stderr


def test_every_subpackage_is_packaged() -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packaged = set(config["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in PACKAGE.rglob("__init__.py")
        if "hub" not in p.relative_to(PACKAGE).parts
    }
    assert found <= packaged  # a plain (non-editable) install, as Binder makes, must carry them all
