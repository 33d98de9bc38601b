"""An `ExportPlan` written as one Python module that needs only Transformers, `kernels` and torch.

The module is what a user would write by hand, written right: a `kernels` mapping with repository
ids and versions (or local folders, said so), `kernelize` inside `use_kernel_mapping(...,
inherit_mapping=False)` so that only the chosen layers change (Transformers' `set_use_kernels`
would also register its own default mapping, which on a GPU switches layers nobody chose), the
classes `extend` marked named again through `replace_kernel_forward_from_hub`, the attention
implementation through `set_attn_implementation`, the MoE experts implementation through
`set_experts_implementation`, and a pinned code path through the kernel's own `set_isa`. It never
imports kernel_explorer: it runs in a job, on a machine without it.
"""

from __future__ import annotations

import datetime
import json
import re
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernel_explorer.export.plan import AttentionPlan, ExpertsPlan, ExportPlan, LayerChoice, Repository


def _q(text: str | None) -> str:
    """A string literal in double quotes, as ruff format writes it (JSON's escapes are Python's)."""
    return json.dumps(text)


def _mode(flags: str) -> str:
    return " | ".join(f"Mode.{flag}" for flag in flags.split("|"))


def _repository(repo: Repository, indent: str = "") -> str:
    """The repository object's constructor call, one argument a line (indented by `indent`)."""
    if repo.hub_id is not None:
        where = (
            f"version={repo.version}" if repo.version is not None else f"revision={_q(str(repo.revision))}"
        )
        call, arguments = "LayerRepository", [_q(repo.hub_id), f"layer_name={_q(repo.layer_class)}", where]
        if repo.trusted:  # opted in in the explorer: without it, kernels refuses an unverified publisher
            arguments.append("trust_remote_code=True")
    else:
        call = "LocalLayerRepository"
        arguments = [f"repo_path=Path({_q(str(repo.folder))})", f"layer_name={_q(repo.layer_class)}"]
    inner = "".join(f"\n{indent}{argument}," for argument in arguments)
    return f"{call}({inner}\n{indent[:-4]})"


def _where(repo: Repository) -> str:
    if repo.hub_id is not None:
        return "Hub repository"
    if repo.source == "bundled":
        return "local folder: kernel_explorer's bundled CPU build on the exporting machine"
    return f"local folder ({repo.source} build on the exporting machine)"


def _dict(name: str, items: list[str]) -> list[str]:
    """`NAME = {...}` with one item a line, or `NAME = {}`: as ruff format writes it."""
    return [f"{name} = {{", *items, "}"] if items else [f"{name} = {{}}"]


def _mapping(choices: list[LayerChoice], indent: str) -> str:
    if not choices:
        return "{}"
    lines = ["{"]
    for choice in choices:
        lines += [
            f"    # {choice.label}",
            f"    # {_where(choice.repository)}",
            f"    {_q(choice.layer)}: {{",
            "        DEVICE: {",
            f"            {_mode(choice.entry_mode)}: {_repository(choice.repository, '                ')},",
            "        },",
            "    },",
        ]
    lines.append("}")
    return ("\n" + indent).join(lines)


def _paths(paths: tuple[str, ...], indent: str) -> str:
    inner = "".join(f"\n{indent}    {_q(p)}," for p in paths)
    return f"[{inner}\n{indent}]" if paths else "[]"


def _loader(repo: Repository) -> str:
    if repo.hub_id is not None and repo.version is not None:
        return f"get_kernel({_q(repo.hub_id)}, version={repo.version})"
    if repo.hub_id is not None and repo.revision is not None:  # kernels takes a version or a revision
        return f"get_kernel({_q(repo.hub_id)}, revision={_q(repo.revision)})"
    if repo.hub_id is None and repo.folder is not None:
        return f"get_local_kernel(Path({_q(repo.folder)}))"
    raise ValueError(
        f"{repo.layer_class} ({repo.source}) names neither a Hub version or revision nor a local folder: "
        "export a candidate from the Hub or from a folder."
    )


def _attention_lines(attention: AttentionPlan | None) -> list[str]:
    """ATTENTION (what set_attn_implementation receives), its local folder and its pinned code path."""
    if attention is None:
        return [
            "ATTENTION = None  # the model has no Transformers attention interface",
            "ATTENTION_FOLDER = None",
            "ALLOW_ALL_KERNELS = False",
            "ATTENTION_CODE_PATH = None",
        ]
    if attention.folder is not None:
        folder = attention.folder.rstrip("/").split("/")[-1]
        alias = "kernel-explorer-local/" + "".join(
            ch if ch.isalnum() or ch in "._-" else "-" for ch in folder
        )
        lines = [
            f"# attention: {attention.label}, a local folder (kernels resolves the name by LOCAL_KERNELS)",
            f"ATTENTION = {_q(alias)}",
            f"ATTENTION_FOLDER = {_q(attention.folder)}",
        ]
        loader = f"get_local_kernel(Path({_q(attention.folder)}))"
    else:
        what = "a Hub repository" if "/" in attention.implementation else "PyTorch's"
        lines = [
            f"# attention: {what} ({attention.label or attention.implementation})",
            f"ATTENTION = {_q(attention.implementation)}",
            "ATTENTION_FOLDER = None",
        ]
        repo, _, revision = attention.implementation.partition(":")[0].partition("@")
        loader = f"get_kernel({_q(repo)}" + (f", revision={_q(revision)})" if revision else ")")
    if attention.allow_all_kernels:
        lines.append("ALLOW_ALL_KERNELS = True  # you trusted this repository's publisher in the explorer")
    else:
        lines.append("ALLOW_ALL_KERNELS = False")
    if attention.code_path is None:
        return [*lines, "ATTENTION_CODE_PATH = None"]
    return [*lines, f"ATTENTION_CODE_PATH = (lambda: {loader}, {_q(attention.code_path)})"]


def _experts_lines(experts: ExpertsPlan | None) -> list[str]:
    """EXPERTS: what set_experts_implementation receives (None: the model has no experts interface).
    Written also when it is the model's own: from_pretrained gives its default (grouped_mm), not
    necessarily what the model was loaded with in the explorer."""
    if experts is None:
        return ["EXPERTS = None  # the model has no MoE experts implementation to set"]
    if experts.repository:
        what = f"a Hub kernel Transformers loads from {experts.repository} at the first call"
    elif experts.chosen:
        what = "Transformers' PyTorch implementation chosen in the explorer"
    else:
        what = "the implementation the model ran in the explorer (its own)"
    return [f"# MoE experts: {what}", f"EXPERTS = {_q(experts.implementation)}"]


def render(plan: ExportPlan, *, source: str = "kernel_explorer") -> str:
    """The module's text (ruff-clean Python)."""
    main_choices = [layer.main for layer in plan.layers]
    modes = [c.mode for layer in plan.layers for c in layer.choices]
    mode = max(set(modes), key=modes.count) if modes else "INFERENCE"
    per_instance = [  # (choice, its instances) kernelized one by one
        (c, c.instances)
        for layer in plan.layers
        for i, c in enumerate(layer.choices)
        if c.kind == "module" and (i > 0 or c.mode != mode)
    ]
    pytorch = {
        layer.layer: layer.pytorch for layer in plan.layers if layer.kind == "module" and layer.pytorch
    }
    pins = {
        (c.repository, c.code_path) for layer in plan.layers for c in layer.choices if c.code_path is not None
    }
    today = datetime.date.today().isoformat()
    notes = "".join(
        f"\n{textwrap.fill(note, 96, initial_indent='- ', subsequent_indent='  ')}" for note in plan.notes
    )
    lines = [
        f'"""Kernels chosen in {source} on {today}, for a freshly loaded model.',
        "",
        f"Model: {plan.model_class} ({plan.dtype}, {plan.device}).",
        "",
        "Applies them to a freshly loaded model with Transformers' and `kernels`' public API only:",
        "",
        "    model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPE)",
        "    switched = apply(model)",
        "",
        "or, from a shell, `python THIS_FILE MODEL_FOLDER_OR_ID` loads the model, applies them and prints",
        "which layers switched. Local folders below are builds on the machine that exported; build the",
        "same repositories on another machine and change the folders there. Each multi-path kernel",
        "chooses its code path per machine unless a path is pinned below.",
    ]
    if plan.notes:
        lines += ["", "What a mapping cannot say, and what this module does instead:" + notes]
    lines += [
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import contextlib",
        "import logging",
        "import os",
        "import sys",
        "from pathlib import Path",
        "",
        "import torch",
        "from kernels import (",
        _IMPORTS,
        ")",
        "",
        f"DEVICE = {_q(plan.device)}",
        f"DTYPE = torch.{plan.dtype}",
        f"MODE = {_mode(mode)}",
        "",
        "# one entry per layer: the repository, and the mode it is registered for",
        f"MAPPING = {_mapping(main_choices, '')}",
        "",
    ]
    lines += [
        "# layers the model does not mark (the explorer's `extend`): these instances get a subclass of their",
        "# own class that carries the layer name (marking the class itself would make every instance of it,",
        "# in every model of the process, a kernel layer)",
        *_dict("EXTENDED", [f"    {_q(e.layer)}: {_paths(e.instances, '    ')}," for e in plan.extensions]),
        "",
        "# instances of a mapped layer that ran PyTorch in the explorer: put back after kernelize",
        *_dict("PYTORCH", [f"    {_q(name)}: {_paths(paths, '    ')}," for name, paths in pytorch.items()]),
        "",
        "# instances that ran another candidate or mode than their layer's entry above: one by one",
        "PER_INSTANCE = [" if per_instance else "PER_INSTANCE = []",
    ]
    for choice, paths in per_instance:
        lines += [
            "    (",
            f"        {_mapping([choice], '        ')},",
            f"        {_mode(choice.mode)},",
            f"        {_paths(paths, '        ')},",
            "    ),",
        ]
    lines += ["]", ""] if per_instance else [""]
    lines += ["# code paths pinned in the explorer (the kernel's own set_isa; unpinned kernels choose here)"]
    lines += ["CODE_PATHS = [" if pins else "CODE_PATHS = []"]
    lines += [f"    (lambda: {_loader(repo)}, {_q(path)})," for repo, path in sorted(pins, key=str)]
    lines += ["]", ""] if pins else [""]
    lines += _attention_lines(plan.attention)
    lines += ["", *_experts_lines(plan.experts), "", ""]
    lines += _FUNCTIONS.splitlines()
    text = "\n".join(lines) + "\n"
    body = text.split(_IMPORTS, 1)[1]
    used = [name for name in _KERNELS_NAMES if re.search(rf"\b{name}\b", body)]
    if "Path(" not in body:
        text = text.replace("from pathlib import Path\n", "")
    return text.replace(_IMPORTS, "\n".join(f"    {name}," for name in used))


#: what the module may take from kernels (only those it uses are imported)
_KERNELS_NAMES = (
    "LayerRepository",
    "LocalLayerRepository",
    "Mode",
    "get_kernel",
    "get_local_kernel",
    "kernelize",
    "replace_kernel_forward_from_hub",
    "use_kernel_mapping",
)
_IMPORTS = "    # kernels-imports"


_FUNCTIONS = '''\
@contextlib.contextmanager
def _quiet_kernels():
    """kernelize warns once per kernel layer without a mapping entry: those run PyTorch, as chosen."""
    logger = logging.getLogger("kernels")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _mark(model: torch.nn.Module, layer_name: str, paths: list[str]) -> None:
    """Give `paths` a subclass of their class named `layer_name` through replace_kernel_forward_from_hub."""
    made: dict[type, type] = {}
    for path in paths:
        module = model.get_submodule(path)
        base = type(module)
        if base not in made:
            namespace = {"__module__": __name__, "__qualname__": f"{base.__qualname__}_as_{layer_name}"}
            made[base] = type(base)(base.__name__, (base,), namespace)
            replace_kernel_forward_from_hub(made[base], layer_name)
        module.__class__ = made[base]


def apply(model: torch.nn.Module) -> dict[str, list[str]]:
    """Switch `model` to the kernels chosen in the explorer; returns {layer: instances on a kernel}."""
    for layer_name, paths in EXTENDED.items():
        _mark(model, layer_name, paths)
    with _quiet_kernels():
        with use_kernel_mapping(MAPPING, inherit_mapping=False):
            kernelize(model, mode=MODE, device=DEVICE)
        for mapping, mode, paths in PER_INSTANCE:
            with use_kernel_mapping(mapping, inherit_mapping=False):
                for path in paths:
                    kernelize(model.get_submodule(path), mode=mode, device=DEVICE)
        with use_kernel_mapping({}, inherit_mapping=False):
            for paths in PYTORCH.values():
                for path in paths:
                    kernelize(model.get_submodule(path), mode=MODE, device=DEVICE)
    for load, path in CODE_PATHS:
        load().set_isa(path)
    if ATTENTION is not None:
        if ATTENTION_FOLDER is not None:
            entries = [e for e in os.environ.get("LOCAL_KERNELS", "").split(":") if e]
            os.environ["LOCAL_KERNELS"] = ":".join([*entries, f"{ATTENTION}={ATTENTION_FOLDER}"])
        model.set_attn_implementation(ATTENTION, allow_all_kernels=ALLOW_ALL_KERNELS)
        if ATTENTION_CODE_PATH is not None:
            load, path = ATTENTION_CODE_PATH
            load().set_isa(path)
    if EXPERTS is not None:
        model.set_experts_implementation(EXPERTS)
    return switched(model)


def switched(model: torch.nn.Module) -> dict[str, list[str]]:
    """{layer name: instances on a kernel}: kernels' own answer (`get_kernelized_layers`, kernels
    0.18+: layers and the functions each holder carries), else the forwards kernelize replaced."""
    try:
        from kernels import get_kernelized_layers
    except ImportError:  # kernels 0.17: function layers are one object shared by their holders
        get_kernelized_layers = None
    found: dict[str, list[str]] = {}
    if get_kernelized_layers is not None:
        kernelized = get_kernelized_layers(model)
        for path, layer in kernelized.layers.items():
            found.setdefault(str(type(layer.module).kernel_layer_name), []).append(path)
        for (path, _), func in kernelized.funcs.items():
            found.setdefault(str(type(func.module).kernel_layer_name), []).append(path)
        return found
    for path, module in model.named_modules():
        name = getattr(type(module), "kernel_layer_name", None)
        forward = vars(module).get("forward")  # kernelize sets it on the instance (PyTorch's, too)
        if name is not None and getattr(forward, "__func__", None) not in (None, type(module).forward):
            found.setdefault(str(name), []).append(path)
    return found


def main(argv: list[str] | None = None) -> int:
    import argparse

    from transformers import AutoModelForCausalLM

    parser = argparse.ArgumentParser(description="Load a model, switch it to the exported kernels.")
    parser.add_argument("model", help="a model folder (save_pretrained) or a Hub id")
    args = parser.parse_args(argv)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=DTYPE).to(DEVICE)
    for layer_name, paths in apply(model).items():
        print(f"{layer_name}: {len(paths)} instances on a kernel")
    for layer_name in MAPPING:
        if layer_name not in switched(model):
            print(f"{layer_name}: kernelized (a function layer: one object shared by its holders)")
    if ATTENTION is not None:
        print(f"attention: {ATTENTION}")
    if EXPERTS is not None:
        print(f"experts: {EXPERTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())'''
