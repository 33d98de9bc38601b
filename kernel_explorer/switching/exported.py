"""What a door says it runs now, as plain data an exported module can be written from.

Each door answers `Door.export()` with a `DoorExport`: a layer door its `LayerPlan` (the instances
that run a kernel now, grouped by candidate and mode, read from the model's forwards, not from
what was asked for), an extension door also the class `extend` marked, the attention door the
implementation the model runs, the experts door its experts implementation; and each says in words
what a `kernels` mapping cannot express for it. `export.plan` gathers them without asking which
kind of door it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.repositories import hub_coordinates, local_path

if TYPE_CHECKING:
    from kernels import Mode

    from kernel_explorer.inspect.running import RunningNow


@dataclass(frozen=True)
class Repository:
    """Where a kernel comes from: a Hub repository (id with version or revision) or a local folder."""

    layer_class: str  # the class (or function) in the repository's `layers`
    source: str  # bundled, peer, user, registered, transformers
    hub_id: str | None = None
    version: int | None = None
    revision: str | None = None
    folder: str | None = None  # a local build: only valid on the machine that exported
    trusted: bool = False  # the user opted in to this repository's code (trust_remote_code)


@dataclass(frozen=True)
class LayerChoice:
    """One candidate in one mode for some or all instances of one kernel layer."""

    layer: str
    kind: str  # "module" or "function" (a function is one object per process in Transformers)
    label: str  # the explorer's candidate label
    repository: Repository
    entry_mode: str  # the mapping key: "FALLBACK", "INFERENCE", "TRAINING|TORCH_COMPILE", ...
    mode: str  # what kernelize runs with
    code_path: str | None  # a code path pinned while on ("avx2"); None: the kernel's own choice
    instances: tuple[str, ...]  # where this choice runs a kernel now


@dataclass(frozen=True)
class LayerPlan:
    """A kernel layer as switched now: its choices (most instances first) and the instances on PyTorch."""

    layer: str
    kind: str
    choices: tuple[LayerChoice, ...]
    pytorch: tuple[str, ...]  # instances of the layer that run PyTorch now
    total: int

    @property
    def main(self) -> LayerChoice:
        return self.choices[0]

    @property
    def whole(self) -> bool:
        """Whether one mapping entry says it all: one choice, every instance on."""
        return len(self.choices) == 1 and not self.pytorch


@dataclass(frozen=True)
class Extension:
    """Instances `extend` named: their own class and the kernel layer name they carry."""

    layer: str
    base_module: str
    base_name: str
    instances: tuple[str, ...]


@dataclass(frozen=True)
class AttentionPlan:
    """The attention implementation the model runs now."""

    implementation: str  # "sdpa", "eager", or a Hub string "org/repo[@rev][:fn]"
    folder: str | None = None  # a local repository (entered through kernels' LOCAL_KERNELS)
    code_path: str | None = None
    label: str = ""
    #: the user trusted a Hub repository outside kernels-community: Transformers loads it only with
    #: `allow_all_kernels=True`, which the exported module then passes (never otherwise)
    allow_all_kernels: bool = False


@dataclass(frozen=True)
class ExpertsPlan:
    """The MoE experts implementation the model runs now (what set_experts_implementation takes)."""

    implementation: str  # "grouped_mm", "batched_mm", "eager", or a Hub kernel's name ("deepgemm")
    chosen: bool  # switched in the explorer (False: the one the model came with)
    repository: str = ""  # a Hub kernel's repository, as Transformers names it


@dataclass(frozen=True)
class DoorExport:
    """One door's part of an export: what it runs now, and what a mapping cannot say about it."""

    layers: tuple[LayerPlan, ...] = ()
    extensions: tuple[Extension, ...] = ()
    attention: AttentionPlan | None = None
    experts: ExpertsPlan | None = None
    notes: tuple[str, ...] = ()


def flags(mode: Mode) -> str:
    """`Mode` as the names of its flags joined by '|' ("INFERENCE|TORCH_COMPILE", "FALLBACK")."""
    from kernels import Mode

    if mode == Mode.FALLBACK:
        return "FALLBACK"
    names = [n for n in ("INFERENCE", "TRAINING", "TORCH_COMPILE") if getattr(Mode, n) in mode]
    return "|".join(names) or "FALLBACK"


def repository(candidate: Any) -> Repository:
    """Where `candidate` comes from, as the export names it."""
    repo = candidate.repository
    layer_class = str(getattr(repo, "layer_name", candidate.layer_name))
    hub = hub_coordinates(repo)
    if hub is not None:
        trusted = hub.trust_remote_code is True or hub.repo_id in (hub.trust_remote_code or ())
        return Repository(
            layer_class, candidate.source, hub.repo_id, hub.version, hub.revision, trusted=trusted
        )
    folder = local_path(repo)
    return Repository(layer_class, candidate.source, folder=None if folder is None else str(folder.resolve()))


def layer_plan(
    name: str,
    kind: str,
    instances: tuple[str, ...],
    state: dict[Any, Any],
    running: Iterable[RunningNow],
) -> LayerPlan | None:
    """The plan of layer `name` from its switches (`state`) and what its instances run now; None
    when no instance runs a kernel."""
    on_kernel = {now.instance for now in running if now.is_kernel}
    by_choice: dict[tuple[str, str], list[str]] = {}
    chosen: dict[tuple[str, str], tuple[Any, Any]] = {}
    for path in instances:
        switched = state.get((name, path))
        if switched is None or path not in on_kernel:
            continue
        candidate, mode = switched
        key = (candidate.label, flags(mode))
        by_choice.setdefault(key, []).append(path)
        chosen[key] = (candidate, mode)
    if not by_choice:
        return None
    choices = []
    for key, paths in sorted(by_choice.items(), key=lambda item: -len(item[1])):
        candidate, mode = chosen[key]
        choices.append(
            LayerChoice(
                layer=name,
                kind=kind,
                label=candidate.label,
                repository=repository(candidate),
                entry_mode=flags(candidate.entry.mode),
                mode=flags(mode),
                code_path=candidate.path,
                instances=tuple(paths),
            )
        )
    on = {p for c in choices for p in c.instances}
    pytorch = tuple(p for p in instances if p not in on)
    return LayerPlan(name, kind, tuple(choices), pytorch, len(instances))


def some(paths: tuple[str, ...], shown: int = 4) -> str:
    """The first `shown` of `paths`, and how many more: instances named in a note."""
    more = f", ... ({len(paths) - shown} more)" if len(paths) > shown else ""
    return ", ".join(paths[:shown]) + more
