"""Attention as a row of the inventory: the model-wide door Transformers opens for attention kernels.

A Transformers model runs the attention function its config names (`eager`, `sdpa`, or a Hub
string `org/repo[@rev][:fn]` that Transformers loads through `kernels` and wraps with its own
`flash_attention_forward`). `AttentionDoor` lists the candidates (PyTorch's two, the bundled CPU
repository, the user's repositories, Transformers' flash-attention fallbacks) with their
availability, and switches through `model.set_attn_implementation` only: the model's own forward
looks the function up at every call, so a switch is model-wide, costs well under a millisecond
once loaded, and lands between two calls of a running measurement (the switchboard's lock).

Measured like any layer: `forwards(path)` gives the function the model runs now and PyTorch's,
bound to one attention module, called on that module's captured (query, key, value, mask) inputs.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend import attention as door
from kernel_explorer._backend.hub import is_offline
from kernel_explorer._backend.mappings import MappingEntry
from kernel_explorer._backend.repositories import hub_layer_repository, local_layer_repository
from kernel_explorer.availability import Availability, State
from kernel_explorer.bundled import BUILD_HINT, BUNDLED_ATTENTION, bundled_repo_path
from kernel_explorer.catalog import Candidate
from kernel_explorer.errors import KernelExplorerError, KernelSwitchError, NoUsableKernelError
from kernel_explorer.hub_access import cached_variant_dir
from kernel_explorer.layer_groups import LayerGroup

if TYPE_CHECKING:
    from kernels import Mode
    from torch import nn

    from kernel_explorer.catalog import Catalog

#: the row's name in the inventory, and the breakdown's category for the attention computation
ATTENTION = "attention"
MODEL_WIDE = "model-wide: model.config._attn_implementation, through Transformers' AttentionInterface"
ACCEPTED = (
    "'eager', 'sdpa' (or another name registered in Transformers' AttentionInterface), "
    "a Hub repository as 'org/repo[@revision][:function]', or a local repository folder (a Path)"
)


@dataclass(frozen=True)
class AttentionCandidate(Candidate):
    """One attention implementation the model could run: PyTorch's, or a repository's."""

    implementation: str = ""  # what set_attn_implementation receives ("" for a local folder)
    folder: str | None = None  # a local repository (bundled, or the user's)
    devices: tuple[str, ...] = ()  # where Transformers says the repository has builds (() = not said)

    @property
    def pytorch(self) -> bool:
        return self.folder is None and self.hub is None

    @property
    def repo_label(self) -> str:
        if self.folder is not None:
            return f"{self.source}/{Path(self.folder).name}"
        return self.implementation

    @property
    def label(self) -> str:
        return self.repo_label


def _entry(device: str, repository: Any) -> MappingEntry:
    from kernels import Mode

    return MappingEntry(ATTENTION, device, None, Mode.FALLBACK, repository)


def _inference() -> Mode:
    from kernels import Mode

    return Mode.INFERENCE


@functools.cache
def _call_class() -> type:
    from torch import nn

    class AttentionCall(nn.Module):
        """One attention module's call of one attention function: what a measurement times."""

        def __init__(self, attention: nn.Module, function: Callable[..., Any]) -> None:
            super().__init__()
            self.attention = attention
            self.function = function

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return self.function(self.attention, *args, **kwargs)[0]

    return AttentionCall


class AttentionDoor:
    """The attention row of one model: its candidates, what runs now, and the switch.

    Callers hold the switchboard's lock around `switch`/`to_pytorch` (the switchboard does).
    """

    def __init__(self, model: nn.Module, catalog: Catalog, device: str, paths: tuple[str, ...]) -> None:
        self.model = model
        self.catalog = catalog
        self.device = device
        self.original = door.implementation(model)
        self.baseline = self.original if self.original in door.BUILTIN else "sdpa"  # "PyTorch" here
        self.group = LayerGroup(ATTENTION, "attention", MODEL_WIDE, paths)
        self._modules = {path: model.get_submodule(path) for path in paths}
        self._user: list[AttentionCandidate] = []
        self._names: dict[str, AttentionCandidate] = {}  # implementation string -> candidate
        self._kernel_ids: dict[str, str] = {}
        self._calls: dict[tuple[str, str], Any] = {}
        self.reason = ""  # why the baseline runs although a kernel was asked for
        self.mode: Any = _inference()  # of the last switch (a snapshot keeps it)
        if door.is_hub_string(self.original):
            self._names[self.original] = self._hub_candidate(self.original, "registered")

    @classmethod
    def find(cls, model: nn.Module, catalog: Catalog, device: str) -> AttentionDoor | None:
        """The door of `model`, or None when it has no attention interface (any plain nn.Module)."""
        if not door.has_attention_interface(model):
            return None
        paths = tuple(
            path
            for path, module in model.named_modules()
            if type(module).__name__.endswith("Attention") and hasattr(module, "config")
        )
        return cls(model, catalog, device, paths) if paths else None

    # -- candidates ------------------------------------------------------------------------------

    def _hub_candidate(self, name: str, source: str, devices: tuple[str, ...] = ()) -> AttentionCandidate:
        repo_id, revision, version, _ = door.parse_hub_string(name)
        repository = hub_layer_repository(repo_id, ATTENTION, version=version, revision=revision, trust=False)
        return AttentionCandidate(_entry(self.device, repository), source, name, None, devices)

    def _local_candidate(self, folder: Path, source: str) -> AttentionCandidate:
        repository = local_layer_repository(Path(folder), ATTENTION)
        return AttentionCandidate(_entry(self.device, repository), source, "", str(folder))

    def _builtin(self, name: str) -> AttentionCandidate:
        return AttentionCandidate(_entry(self.device, None), "transformers", name)

    def add(self, *repositories: str | Path) -> list[AttentionCandidate]:
        """Add the user's attention repositories (Hub strings or local folders) as candidates."""
        added = []
        for item in repositories:
            if isinstance(item, Path):
                candidate = self._local_candidate(item, "user")
            elif isinstance(item, str) and door.is_hub_string(item):
                candidate = self._hub_candidate(item, "user")
            else:
                raise KernelExplorerError(f"{item!r} is not an attention repository: use {ACCEPTED}.")
            if candidate not in self._user:
                self._user.append(candidate)
            added.append(candidate)
        return added

    def candidates(self) -> list[AttentionCandidate]:
        """Kernels first, in the catalog's source order (the user's, the one the model came with, the
        bundled one, Transformers' fallbacks), then PyTorch's implementations."""
        found: list[AttentionCandidate] = list(self._user)
        found += [c for c in self._names.values() if c.source == "registered"]
        found.append(self._local_candidate(bundled_repo_path(BUNDLED_ATTENTION), "bundled"))
        for _, repo, devices in door.flash_fallbacks():
            if all(c.implementation != repo for c in found):
                found.append(self._hub_candidate(repo, "transformers", devices))
        found += [self._builtin(name) for name in door.BUILTIN]
        return found

    def availability(
        self, candidate: AttentionCandidate, *, mode: Mode, query_hub: bool = False
    ) -> Availability:
        if candidate.pytorch:
            return Availability(State.READY, f"PyTorch, in Transformers ({candidate.implementation})")
        found = self.catalog.availability(candidate, device=self.device, mode=mode, query_hub=query_hub)
        if candidate.source == "bundled" and found.state is State.NO_BUILD:
            why = f"the bundled attention repository is not built here; {BUILD_HINT}"
            return Availability(State.NO_BUILD, why)
        if candidate.devices and self.device not in candidate.devices and found.state is not State.READY:
            listed = ", ".join(candidate.devices)
            return Availability(State.NO_BUILD, f"Transformers lists builds for {listed} only ({found})")
        return found

    def found(
        self, *, mode: Mode, query_hub: bool = False
    ) -> tuple[tuple[AttentionCandidate, Availability], ...]:
        return tuple((c, self.availability(c, mode=mode, query_hub=query_hub)) for c in self.candidates())

    def choose(self, candidate: str | Path | Candidate | None, *, mode: Mode) -> AttentionCandidate:
        """The candidate named (a label, an implementation string, a folder), or the first usable kernel."""
        if isinstance(candidate, AttentionCandidate):
            return candidate
        if candidate is None:
            options = [pair for pair in self.found(mode=mode) if not pair[0].pytorch]
            for option, found in options:
                if found.state.usable:
                    return option
            detail = "\n  ".join(f"{c.label}: {found}" for c, found in options)
            raise NoUsableKernelError(f"No attention kernel can run here ({self.device}):\n  {detail}")
        if isinstance(candidate, Path):
            return self.add(candidate)[0]
        name = str(candidate).strip()
        name = {n: repo for n, repo, _ in door.flash_fallbacks()}.get(name, name)  # as Transformers maps it
        for option in self.candidates():
            if name in (option.label, option.implementation, str(option)):
                return option
        if name in door.known_implementations():
            return self._builtin(name)
        if door.is_hub_string(name):
            return self.add(name)[0]
        raise KernelExplorerError(f"{name!r} is not an attention implementation: use {ACCEPTED}.")

    # -- switching ---------------------------------------------------------------------------------

    @staticmethod
    def _is_pytorch(name: str) -> bool:
        return not (door.is_hub_string(name) or name.startswith("flash_attention"))

    def _loadable_name(self, chosen: AttentionCandidate) -> tuple[str, bool]:
        """(the string to hand Transformers, whether to allow an untrusted publisher)."""
        if chosen.folder is not None:
            module = door.load_local(Path(chosen.folder))
            contract = door.contract_of(module)
            if contract is None:
                contracts = "; ".join(door.CONTRACT)
                raise RuntimeError(f"it exposes none of Transformers' attention contracts ({contracts})")
            name = door.local_alias(Path(chosen.folder))
            self._kernel_ids[name] = getattr(module, "__name__", name)
            return name, False
        ref = chosen.hub
        if ref is None:
            return chosen.implementation, False
        cached = cached_variant_dir(ref)
        if is_offline() and cached is not None:  # kernels' offline load fails on partial snapshots
            door.map_to_folder(ref.repo_id, cached.parent.parent)
        return chosen.implementation, ref.trusts(self.catalog.trust_remote_code)

    def switch(self, candidate: Any, *, mode: Mode, strict: bool = False) -> AttentionCandidate | None:
        """Switch the model's attention to `candidate`; on failure the model keeps its implementation.

        Raises `KernelExplorerError` for a string of no accepted form. A candidate that cannot run
        here (`NoUsableKernelError`) or fails to load (`KernelSwitchError`, also kept as the
        candidate's "failed to load" reason) raises with `strict`; otherwise the reason is kept in
        `reason` (what the row's "runs now" says) and None returned.
        """
        chosen = self.choose(candidate, mode=mode) if candidate is not None else None
        try:
            chosen = chosen or self.choose(None, mode=mode)  # none usable: NoUsableKernelError
            found = self.availability(chosen, mode=mode, query_hub=True)
            if not found.state.usable:
                raise NoUsableKernelError(f"{chosen.label} cannot run here: {found}")
            self._check_training(chosen, mode)
            try:
                name, trust = self._loadable_name(chosen)
                door.set_implementation(self.model, name, allow_all_kernels=trust)
            except Exception as error:
                reason = f"{type(error).__name__}: {error}".strip().splitlines()[0]
                self.catalog.record_failure(chosen, reason)
                raise KernelSwitchError(f"{chosen.label} failed to load: {reason}") from error
        except (NoUsableKernelError, KernelSwitchError) as error:
            self.reason = str(error).splitlines()[0]
            if strict:
                raise
            return None
        self._names[name] = chosen
        self.reason, self.mode = "", mode
        return chosen

    def _check_training(self, chosen: AttentionCandidate, mode: Mode) -> None:
        """A local attention repository that declares `has_backward = False` (as kernels' layer
        classes do) refuses training modes: the model keeps its attention, and the row says why."""
        from kernels import Mode

        if chosen.folder is None or Mode.TRAINING not in mode:
            return
        if getattr(door.load_local(Path(chosen.folder)), "has_backward", True) is False:
            why = "the kernel does not support training (has_backward = False)"
            self.catalog.record_unsupported(chosen, mode, why)
            self.to_pytorch()  # as kernelize keeps PyTorch for a layer without backward
            raise NoUsableKernelError(f"{chosen.label} does not support training")

    def to_pytorch(self) -> None:
        """Back to PyTorch's implementation the model had (or sdpa, when it came with a kernel).

        A failed switch's reason goes too: after `off` or `reset` nothing was asked for."""
        self.reason = ""
        if door.implementation(self.model) != self.baseline:
            door.set_implementation(self.model, self.baseline)

    def switched(self) -> AttentionCandidate | None:
        """The candidate running now when it is not the baseline (what a snapshot keeps)."""
        now = door.implementation(self.model)
        if now == self.baseline:
            return None
        return self._names.get(now) or self._builtin(now)

    # -- reading -----------------------------------------------------------------------------------

    def now(self) -> tuple[str | None, str | None, str, str]:
        """(kernel id or None for PyTorch, variant, implementation's name, reason): what a
        `RunningNow` of every attention module says (attention is model-wide)."""
        now = door.implementation(self.model)
        if self._is_pytorch(now):
            return None, None, now, self.reason
        chosen = self._names.get(now)
        return self._kernel_ids.get(now, now), "-", chosen.label if chosen is not None else now, ""

    def _call(self, path: str, name: str) -> Any:
        key = (path, name)
        if key not in self._calls:
            module = self._modules[path]
            self._calls[key] = _call_class()(module, door.attention_function(module, name)).forward
        return self._calls[key]

    def forwards(self, path: str) -> tuple[Any, Any, bool]:
        """(what `path` runs now, PyTorch's, whether the former is a kernel), as the switchboard's."""
        now = door.implementation(self.model)
        return self._call(path, now), self._call(path, self.baseline), not self._is_pytorch(now)

    @contextlib.contextmanager
    def capturing(self, keep: Callable[[tuple[str, str], tuple, dict], None]) -> Iterator[None]:
        """For the block, each attention call hands (query, key, value, mask) and its keywords to
        `keep`, then runs PyTorch's implementation (so the capture's forward is PyTorch's)."""
        paths = {id(module): path for path, module in self._modules.items()}

        def record(module: nn.Module, args: tuple, kwargs: dict) -> None:
            if id(module) in paths:
                keep((ATTENTION, paths[id(module)]), args, kwargs)

        before = door.implementation(self.model)
        with door.capturing(record, lambda module: door.attention_function(module, self.baseline)) as name:
            door.set_implementation(self.model, name)
            try:
                yield
            finally:
                door.set_implementation(self.model, before)
