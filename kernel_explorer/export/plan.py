"""What is switched on now, read from the switchboard as plain data an exported module can be written from.

The switchboard knows, per instance, the candidate and mode switched on; the model's forwards say
what really runs (a kernel that raised, or declined an instance, left PyTorch there). The plan keeps
only instances that run a kernel now, grouped by layer, candidate and mode, and says in words what
a `kernels` mapping cannot express (a choice for some instances, or a second candidate in one layer)
and what the export does about it, so nobody ships something else than they think.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend import attention_interface
from kernel_explorer._backend.repositories import hub_coordinates, local_path
from kernel_explorer.inspect.layer_groups import ATTENTION, EXPERTS

if TYPE_CHECKING:
    from kernels import Mode

    from kernel_explorer.switching.board import Switchboard


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
class ExportPlan:
    """Everything an exported module applies, and the notes it must say aloud."""

    model_class: str
    device: str
    dtype: str
    layers: tuple[LayerPlan, ...]
    extensions: tuple[Extension, ...]
    attention: AttentionPlan | None
    notes: tuple[str, ...] = field(default=())
    experts: ExpertsPlan | None = None  # None: the model has no MoE experts interface


def _flags(mode: Mode) -> str:
    """`Mode` as the names of its flags joined by '|' ("INFERENCE|TORCH_COMPILE", "FALLBACK")."""
    from kernels import Mode

    if mode == Mode.FALLBACK:
        return "FALLBACK"
    names = [n for n in ("INFERENCE", "TRAINING", "TORCH_COMPILE") if getattr(Mode, n) in mode]
    return "|".join(names) or "FALLBACK"


def _repository(candidate: Any) -> Repository:
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


def _attention(board: Switchboard) -> AttentionPlan | None:
    door = board.attention
    if door is None:
        return None
    now = door.switched()
    implementation = attention_interface.implementation(board.model)
    if now is None or getattr(now, "pytorch", False):
        return AttentionPlan(implementation)
    folder = getattr(now, "folder", None)
    ref = getattr(now, "hub", None)
    return AttentionPlan(
        now.implementation if folder is None else "",
        folder=None if folder is None else str(folder),
        code_path=now.path,
        label=now.label,
        allow_all_kernels=ref is not None and ref.trusts(board.catalog.trust_remote_code),
    )


def _experts(board: Switchboard) -> ExpertsPlan | None:
    door = board.experts
    if door is None:
        return None
    switched = door.switched()
    repository = switched.repo if switched is not None else ""
    return ExpertsPlan(door.implementation(), switched is not None, repository)


def _extensions(board: Switchboard) -> tuple[Extension, ...]:
    found = []
    for name, group in board.groups.items():
        if not group.added:
            continue
        module, _, qualname = group.original.rpartition(".")
        found.append(Extension(name, module, qualname, tuple(group.instances)))
    return tuple(found)


def _layer(board: Switchboard, name: str, state: dict[Any, Any]) -> LayerPlan | None:
    group = board.groups[name]
    running = {now.instance: now for now in board.running(name)}
    by_choice: dict[tuple[str, str], list[str]] = {}
    chosen: dict[tuple[str, str], tuple[Any, Any]] = {}
    for path in group.instances:
        switched = state.get((name, path))
        if switched is None or not running[path].is_kernel:
            continue
        candidate, mode = switched
        key = (candidate.label, _flags(mode))
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
                kind=group.kind,
                label=candidate.label,
                repository=_repository(candidate),
                entry_mode=_flags(candidate.entry.mode),
                mode=_flags(mode),
                code_path=candidate.path,
                instances=tuple(paths),
            )
        )
    on = {p for c in choices for p in c.instances}
    pytorch = tuple(p for p in group.instances if p not in on)
    return LayerPlan(name, group.kind, tuple(choices), pytorch, len(group.instances))


def _notes(layers: tuple[LayerPlan, ...], attention: AttentionPlan | None) -> tuple[str, ...]:
    notes = []
    for plan in layers:
        if plan.whole:
            continue
        if plan.kind == "function":
            ran = sum(len(c.instances) for c in plan.choices)
            notes.append(
                f"{plan.layer}: the explorer ran {plan.main.label} for {ran}"
                f" of {plan.total} holders ({_some(plan.main.instances)}); Transformers keeps one function "
                f"object per process, so a mapping cannot choose holders: the export runs "
                f"{plan.main.label} for all {plan.total}"
            )
            continue
        if plan.pytorch:
            notes.append(
                f"{plan.layer}: {plan.total - len(plan.pytorch)} of {plan.total} instances ran a kernel; a "
                f"mapping names a layer, not instances, so the export kernelizes the model and then puts "
                f"PyTorch back on the {len(plan.pytorch)} others ({_some(plan.pytorch)}) by kernelizing each "
                "of them with an empty mapping"
            )
        for other in plan.choices[1:]:
            notes.append(
                f"{plan.layer}: {len(other.instances)} instances ran {other.label} in mode {other.mode} "
                f"({_some(other.instances)}), beside {plan.main.label} on the rest; a mapping holds one "
                "repository per layer and mode, so the export kernelizes those instances one by one with "
                "a mapping of their own"
            )
    modes = Counter(c.mode for plan in layers for c in plan.choices)
    if len(modes) > 1:
        notes.append(
            "layers ran in different modes (" + ", ".join(sorted(modes)) + "): the export kernelizes in the "
            "most common one, then each instance of another mode alone"
        )
    if attention is not None and attention.folder is not None:
        notes.append(
            f"attention runs a local repository ({attention.folder}): the export maps a Hub-shaped name to "
            "that folder through kernels' LOCAL_KERNELS variable; on another machine, build it there and "
            "change the folder"
        )
    return tuple(notes)


def _some(paths: tuple[str, ...], shown: int = 4) -> str:
    more = f", ... ({len(paths) - shown} more)" if len(paths) > shown else ""
    return ", ".join(paths[:shown]) + more


def export_plan(board: Switchboard) -> ExportPlan:
    """The plan of what runs now on `board`'s model (read under the switchboard's lock)."""
    with board.lock:
        state = board.snapshot()
        layers = tuple(
            plan
            for name in board.groups
            if name not in (ATTENTION, EXPERTS) and (plan := _layer(board, name, state)) is not None
        )
        attention = _attention(board)
        experts = _experts(board)
        extensions = _extensions(board)
    model = board.model
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    return ExportPlan(
        model_class=f"{type(model).__module__}.{type(model).__qualname__}",
        device=board.device,
        dtype="float32" if dtype is None else str(dtype).removeprefix("torch."),
        layers=layers,
        extensions=extensions,
        attention=attention,
        notes=_notes(layers, attention),
        experts=experts,
    )
