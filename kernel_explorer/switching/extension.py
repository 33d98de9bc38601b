"""Kernel layer names for layers the model does not mark: `Explorer.extend` and `Explorer.retract`.

Transformers marks RMSNorm, rotary and the activations with a kernel layer name; it marks no
`nn.Linear` (nor an MLP block), so `kernelize` never touches them. `kernels`' own way to mark a
third-party class is `replace_kernel_forward_from_hub(cls, name)`, which sets `kernel_layer_name`
on the class: done to `nn.Linear`, every Linear of every model in the process would become a kernel
layer, and `kernelize`/`use_kernels=True` elsewhere would swap them all.

So the mark goes on a subclass instead: per (instance class, layer name) one subclass that adds only
kernels' two class attributes (and `kernel_explorer_base`, the class it stands for), and the chosen
instances take it as their `__class__`. Nothing else of theirs changes (`isinstance`, repr,
parameters, state dict, `__dict__`), the base class and every other instance and model stay as they
were, and `kernelize`'s per-layer step then treats these instances exactly like a layer the model
marked: the switchboard switches them like any other row. `retract` gives the instances their class
back. (The subclass is registered in this module under a unique name, so a model holding one still
pickles and deep-copies.)
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.layer_forwards import check_layer_fits, mark_layer_class
from kernel_explorer._backend.mappings import iter_mapping
from kernel_explorer._backend.repositories import local_path
from kernel_explorer.build.bundled import extension_mappings
from kernel_explorer.catalog.hub_access import local_availability
from kernel_explorer.catalog.probe_verdict import ProbeVerdict
from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.switching import events, isolation, model_state

if TYPE_CHECKING:
    from torch import nn

    from kernel_explorer.inspect.layer_groups import LayerGroup
    from kernel_explorer.switching.board import Switchboard

# (class, layer name) -> its marked subclass: classes, made once per process (not per-model state)
_MARKED: dict[tuple[type, str], type] = {}


def marked_class(base: type[nn.Module], layer_name: str) -> type[nn.Module]:
    """The subclass of `base` that carries `layer_name` (made once per pair, through kernels)."""
    found = _MARKED.get((base, layer_name))
    if found is not None:
        return found
    stem = f"{base.__name__}_as_{re.sub(r'[^0-9A-Za-z_]', '_', layer_name)}"
    qualname, n = stem, 1
    while qualname in globals():
        n += 1
        qualname = f"{stem}_{n}"
    namespace = {
        "__module__": __name__,
        "__qualname__": qualname,
        "__doc__": f"{base.__qualname__} marked as kernel layer {layer_name!r} by kernel_explorer.",
        "kernel_explorer_base": base,
    }
    metaclass: type = type(base)  # the class's own metaclass, as a class statement would use
    marked: type[nn.Module] = metaclass(base.__name__, (base,), namespace)  # same __name__: same repr
    mark_layer_class(marked, layer_name)
    globals()[qualname] = marked
    _MARKED[(base, layer_name)] = marked
    return marked


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def resolve_class(model: nn.Module, cls: Any) -> type[nn.Module]:
    """`cls` as a module class: a class, or the name of a class the model has (`"Linear"`)."""
    from torch import nn

    if isinstance(cls, str):
        classes = {}
        for module in model.modules():
            own = type(module).__dict__.get("kernel_explorer_base") or type(module)
            classes.setdefault(own.__name__, set()).add(own)
            classes.setdefault(_qualname(own), set()).add(own)
        found = classes.get(cls, set())
        if len(found) == 1:
            return next(iter(found))
        if found:
            names = ", ".join(sorted(_qualname(c) for c in found))
            raise KernelExplorerError(f"{cls!r} names several classes here ({names}): pass the class itself.")
        near = difflib.get_close_matches(cls, [k for k in classes if "." not in k], n=3, cutoff=0.5)
        hint = f" Nearest: {', '.join(near)}." if near else ""
        raise KernelExplorerError(f"The model has no module class {cls!r}.{hint}")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise KernelExplorerError(
            f"{cls!r} is not an nn.Module subclass: "
            "pass a layer class (torch.nn.Linear) or its name ('Linear')."
        )
    return cls


def select_instances(
    model: nn.Module, cls: type[nn.Module], instances: str | Iterable[str] | None
) -> list[str]:
    """Paths of `model`'s `cls` instances matching `instances` (paths or glob patterns; None: all)."""
    paths = [path for path, module in model.named_modules() if path and isinstance(module, cls)]
    if not paths:
        raise KernelExplorerError(f"The model has no instance of {cls.__name__}.")
    if instances is None:
        return paths
    patterns = [instances] if isinstance(instances, str) else list(instances)
    chosen: list[str] = []
    for pattern in patterns:
        matched = [p for p in paths if fnmatch.fnmatchcase(p, pattern)]
        if not matched:
            raise KernelExplorerError(_no_match(model, cls, pattern, paths))
        chosen.extend(p for p in matched if p not in chosen)
    return chosen


def _no_match(model: nn.Module, cls: type, pattern: str, paths: list[str]) -> str:
    """One line: why `pattern` matches no `cls` instance, and the nearest instances."""
    others = Counter(
        type(m).__name__ for p, m in model.named_modules() if p and fnmatch.fnmatchcase(p, pattern)
    )
    near = difflib.get_close_matches(pattern, paths, n=3, cutoff=0.0)
    text = f"{pattern!r} matches no {cls.__name__} instance"
    if others:
        text += f" (it matches {', '.join(f'{n} x{k}' for n, k in others.most_common(3))})"
    return (
        f"{text}. Nearest: {', '.join(near)} (module paths or glob patterns such as 'model.layers.*.mlp.*')."
    )


def _per_device(name: str, candidates: dict[Any, Any] | None) -> dict[str, dict[Any, Any]]:
    """The user's candidates as a mapping: `{"cpu": repo}` (or `{name: {"cpu": repo}}`) -> `{name: {...}}`."""
    if candidates is None:
        return {}
    if not isinstance(candidates, dict):
        raise KernelExplorerError(
            "candidates must be a dict like {'cpu': LocalLayerRepository(...)}, "
            f"got {type(candidates).__name__}."
        )
    if set(candidates) == {name} and isinstance(candidates[name], dict):
        return {name: candidates[name]}
    return {name: candidates}


def _check_fits(entries: Iterable[Any], classes: set[type]) -> None:
    """Refuse, in one line, a local repository whose layer cannot replace these classes' forward.

    Checking loads the repository's Python: it is loaded in the trial worker first (a crash or a
    hang there is the line), and here only once it loaded there."""
    for entry in entries:
        path = local_path(entry.repository)
        if path is None or not local_availability(path).state.usable:
            continue  # Hub repositories (and unbuilt ones) are checked by kernelize when switched
        for cls in classes:
            problem = None
            if isolation.ENABLED:
                try:
                    problem = isolation.run_isolated(fit_problem, entry.repository, cls)
                except isolation.Unisolable:
                    problem = None
                if isinstance(problem, ProbeVerdict):
                    problem = problem.reason
            problem = problem or fit_problem(entry.repository, cls)
            if problem:
                what = f"{path.name}:{entry.repository.layer_name}"
                raise KernelExplorerError(f"{what} does not fit {cls.__name__}.forward: {problem}")


def fit_problem(repository: Any, cls: type[nn.Module]) -> str:
    """Why `repository`'s layer cannot replace `cls`'s forward, in one line ("": it fits)."""
    try:
        check_layer_fits(repository, cls)
    except Exception as error:
        return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return ""


def extend(
    board: Switchboard,
    name: str,
    cls: Any = None,
    instances: str | Iterable[str] | None = None,
    *,
    candidates: dict[Any, Any] | None = None,
) -> LayerGroup:
    """Give the chosen instances of `cls` the kernel layer name `name`; the model's row appears.

    Checks everything first and changes nothing on bad input: a class that is not a module, a
    pattern matching no instance, a name the model already uses, an instance already named, a
    local repository whose layer does not fit the class's forward.
    """
    if not isinstance(name, str) or not name.strip():
        raise KernelExplorerError(f"The layer name must be a non-empty string, got {name!r}.")
    cls = resolve_class(board.model, name if cls is None else cls)
    existing = board.groups.get(name)
    if existing is not None and not existing.added:
        raise KernelExplorerError(
            f"The model marks {name!r} itself ({existing.original}): switch it with on({name!r}), "
            "or give these instances another name."
        )
    if existing is not None and existing.original != _qualname(cls):
        raise KernelExplorerError(f"{name!r} already names {existing.original} instances: pick another name.")
    modules = dict(board.model.named_modules())
    paths = select_instances(board.model, cls, instances)
    for path in paths:
        own = type(modules[path])
        marked_as = getattr(own, "kernel_layer_name", name)  # kernels' class attribute, when marked
        if marked_as != name:
            what = "you named it" if "kernel_explorer_base" in own.__dict__ else "the model marks it as"
            raise KernelExplorerError(
                f"{path} is a kernel layer already ({what} {marked_as!r}): "
                f"use that row, or retract({marked_as!r}) first."
            )
    mapping = _per_device(name, candidates)
    for entry in iter_mapping(mapping):
        if not callable(getattr(entry.repository, "load", None)):
            raise KernelExplorerError(
                f"candidates[{entry.device!r}] is {type(entry.repository).__name__}, "
                "not a kernel repository: pass LayerRepository(...) or LocalLayerRepository(...)."
            )
    bases = {type(modules[p]).__dict__.get("kernel_explorer_base") or type(modules[p]) for p in paths}
    known = [c.entry for c in board.catalog.candidates(name) if c.source in ("user", "registered")]
    _check_fits([*iter_mapping(mapping), *known], bases)
    with board.lock, events.changing(board.model):
        added = [(mapping, "user"), *((m, "bundled") for m in extension_mappings(name, cls))]
        for found, source in added:
            board.catalog.add(found, source)
        model_state.of(board.model).added_mappings.setdefault(name, []).extend(added)
        for path in paths:
            module = modules[path]
            if "kernel_explorer_base" not in type(module).__dict__:
                module.__class__ = marked_class(type(module), name)
        board.rescan()
        return board.groups[name]


def retract(board: Switchboard, name: str, instances: str | list[str] | None = None) -> list[str]:
    """Switch the chosen added instances off and give them their own class back; returns their paths."""
    group = board.group(name)
    if not group.added:
        raise KernelExplorerError(
            f"{name!r} is the model's own kernel layer: only layers added with extend() can be retracted."
        )
    paths = board.select(name, instances)
    modules = dict(board.model.named_modules())
    with board.lock, events.changing(board.model):
        board.off(name, paths)
        for path in paths:
            module = modules[path]
            module.__class__ = type(module).__dict__["kernel_explorer_base"]
        board.rescan()
    return paths


def adopt(board: Switchboard) -> None:
    """Give a new switchboard's catalog the candidates `extend` added for rows its model has."""
    for name, added in model_state.of(board.model).added_mappings.items():
        if name in board.groups and board.groups[name].added:
            for found, source in added:
                board.catalog.add(found, source)
