"""`Explorer`: the one object that the widgets, the magics and scripts drive.

It owns one catalog (where kernels come from), one switchboard (what runs now) and the hardware
snapshot, and hands out inventories. It works the same without Jupyter.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable, Iterator
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.modes import parse_mode
from kernel_explorer.catalog.candidates import Catalog
from kernel_explorer.catalog.kernel_config import is_kernel_config, mapping_from_kernel_config
from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.explorer_measure import Measuring
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.provenance import model_provenance
from kernel_explorer.measure.runner import Runner
from kernel_explorer.switching import model_state
from kernel_explorer.switching.board import RunningNow, Switchboard
from kernel_explorer.switching.extension import adopt

if TYPE_CHECKING:
    from pathlib import Path

    from kernels import Mode
    from torch import nn

    from kernel_explorer.catalog.candidates import Candidate
    from kernel_explorer.inspect.hardware import HardwareSnapshot
    from kernel_explorer.inspect.layer_groups import LayerGroup
    from kernel_explorer.inventory.table import Inventory


class Explorer(Measuring):
    """See, switch and measure the kernels of one model.

    Args:
        model: any `torch.nn.Module` (Transformers or not).
        tokenizer: turns the default prompt (or yours) into inputs for captures and model comparisons.
        mapping: your own kernel mapping, in the dict form `kernels.use_kernel_mapping` takes
            (`{"RMSNorm": {"cpu": LocalLayerRepository(...)}}`) or as a Transformers `KernelConfig`;
            preferred over the other sources.
        mode: default mode for switching: "inference", "training" or "torch.compile".
        device: device type to choose kernels for; default: where the model's parameters are.
        strict: raise when a kernel fails to load or run, instead of keeping PyTorch for that layer.
        trust_remote_code: Hub repository ids you trust in addition to trusted publishers.
        include_bundled / include_registered / include_transformers: which other sources to read.
        attention: your attention repositories for the attention row (see `attention_candidates`).
        peers: local kernel-builder repositories (sources or builds) offered next to the bundled
            kernels, as candidates of source "peer" (`add_peer`).
        project: a project folder whose kernel pins (`[tool.kernels]` in pyproject.toml,
            `kernels.lock`) the inventory shows.

    Example:
        ```python
        from kernel_explorer import Explorer, load_default_model

        explorer = Explorer(load_default_model())
        print(explorer.inventory())
        with explorer.using("RMSNorm"):
            ...  # every RMSNorm runs the kernel here; PyTorch again after
        ```
    """

    def __init__(
        self,
        model: nn.Module,
        mapping: dict[str, dict[Any, Any]] | Any | None = None,
        *,
        tokenizer: Any | None = None,
        mode: str | Mode = "inference",
        device: str | None = None,
        strict: bool = False,
        trust_remote_code: Iterable[str] = (),
        include_bundled: bool = True,
        include_registered: bool = True,
        include_transformers: bool = True,
        attention: Iterable[str | Path] = (),
        peers: Iterable[str | Path] = (),
        project: str | Path | None = None,
    ) -> None:
        from torch import nn

        if not isinstance(model, nn.Module):
            raise KernelExplorerError(
                f"Explorer needs a torch.nn.Module, got {type(model).__name__}. "
                "For the default model: kernel_explorer.load_default_model()."
            )
        if is_kernel_config(mapping):  # the form Transformers users write for from_pretrained
            where = device or next((p.device.type for p in model.parameters()), "cpu")
            mapping = mapping_from_kernel_config(mapping, where)
        if mapping is not None and not isinstance(mapping, dict):
            raise KernelExplorerError(
                "mapping must be a dict like {'RMSNorm': {'cpu': LocalLayerRepository(...)}}, "
                f"got {type(mapping).__name__}."
            )
        self.model = model
        self.mode = parse_mode(mode)
        self.catalog = Catalog(
            mapping,
            include_registered=include_registered,
            include_bundled=include_bundled,
            include_transformers=include_transformers,
            trust_remote_code=trust_remote_code,
        )
        self.switchboard = Switchboard(model, self.catalog, device=device, strict=strict)
        adopt(self.switchboard)  # rows an earlier explorer added keep their candidates
        self.project = project  # a folder whose kernels.lock / [tool.kernels] pins the inventory shows
        for path in peers:  # built for this CPU (cached); candidates of source "peer"
            self.add_peer(path)
        self.tokenizer = tokenizer
        self.results = ResultLog()
        self._runner = Runner(self.results, origin=lambda: model_provenance(self.switchboard))
        self._captured = None  # the layers' captured inputs (see `capture`)
        self._captured_grad = None  # the same with autograd on, for training mode
        self._capture_kwargs: dict[str, Any] | None = None
        # the model's latest explorer, weakly (the explorer holds the model: a strong reference
        # would keep both alive for ever)
        model_state.of(model).explorer = weakref.ref(self)
        self.switchboard.samples = self._sample
        if attention:
            self.attention_candidates(*attention)

    @classmethod
    def of(cls, model: nn.Module, **kwargs: Any) -> Explorer:
        """The explorer last made for `model`, or a new one (with `kwargs`) when it has none.

        What the magics use, so `%kernels explore model` twice, or after `Explorer(model)` in a
        cell, shows the same switches and results instead of a second, diverging copy.
        """
        ref = model_state.of(model).explorer
        found = ref() if ref is not None else None
        if found is not None:
            return found
        return cls(model, **kwargs)

    @cached_property
    def hardware(self) -> HardwareSnapshot:
        """The machine, and the code path each built bundled kernel runs on it (and why)."""
        from dataclasses import replace

        from kernel_explorer.inspect.hardware import detect_hardware
        from kernel_explorer.inspect.kernel_paths import bundled_kernel_paths

        return replace(detect_hardware(), kernel_paths=bundled_kernel_paths())

    @property
    def layers(self) -> list[str]:
        """Kernel layer names this model has."""
        return list(self.switchboard.groups)

    def add_peer(self, path: str | Path, layers: dict[str, str] | None = None) -> list[Candidate]:
        """Offer a local kernel-builder repository (source or built path) as a candidate of source
        "peer" for the model's layers its classes serve (or `layers`: {layer name: class})."""
        from kernel_explorer.catalog.peers import peer_mapping

        return self.catalog.add_peer(peer_mapping(path, self.layers, layers=layers))

    def inventory(self, *, query_hub: bool = False) -> Inventory:
        """The model's kernel layers, their candidates here, what runs now and the last measured speedup."""
        from kernel_explorer._backend.locks import read_pins
        from kernel_explorer.inventory.table import build_inventory

        return build_inventory(
            self.model,
            self.catalog,
            self.switchboard,
            mode=self.mode,
            query_hub=query_hub,
            measured=self.results.latest_verdicts(),
            shares=self.results.latest_shares(),
            pins=read_pins(self.project) if self.project is not None else (),
        )

    def attention_candidates(self, *repositories: str | Path) -> list[Candidate]:
        """Add attention repositories to the attention row: Hub strings `org/repo[@rev][:fn]` (loaded
        by Transformers through `kernels`) or local repository folders (a `Path`); returns them.

        Attention is model-wide: `on("attention", candidate=...)` switches every attention module.
        """
        door = self.switchboard.attention
        if door is None:
            raise KernelExplorerError(
                f"{type(self.model).__name__} has no attention interface (Transformers' "
                "set_attn_implementation), so it has no attention row to add candidates to."
            )
        return list(door.add(*repositories))

    def on(
        self,
        name: str,
        instances: str | list[str] | None = None,
        *,
        mode: str | Mode | None = None,
        candidate: str | Candidate | None = None,
        allow_changes: bool = False,
    ) -> list[RunningNow]:
        """Switch layer `name` (all instances, or those named or matched) to a kernel.

        `candidate`: a label, a source word ("bundled", "peer", ...) or a `Candidate` (default: the
        first that runs here). A kernel that changes its module (repacks weights) keeps the original
        tensors while on, to restore them exactly; `allow_changes=True` switches it even when that
        would hold more than a quarter of the memory available.
        """
        return self.switchboard.on(
            name, instances, mode=mode or self.mode, candidate=candidate, allow_changes=allow_changes
        )

    def _sample(self, name: str, path: str) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """One real call of (layer, instance) from the captured inputs, for a probe's trial call."""
        calls = self.captured_inputs().calls.get((name, path))
        return calls[0] if calls else None

    def off(self, name: str, instances: str | list[str] | None = None) -> list[RunningNow]:
        """Switch layer `name` back to PyTorch."""
        return self.switchboard.off(name, instances)

    def reset(self) -> None:
        """Every layer back to PyTorch."""
        self.switchboard.reset()

    def extend(
        self,
        name: str,
        cls: type[nn.Module] | str | None = None,
        instances: str | list[str] | None = None,
        *,
        candidates: dict[Any, Any] | None = None,
    ) -> LayerGroup:
        """Give a kernel layer name to instances the model does not mark; they become a row.

        `explorer.extend("Linear", nn.Linear, instances="model.layers.*.mlp.*")`, then
        `explorer.on("Linear")` like any layer. `cls` is a module class or its name in the model
        (default: the class named `name`); `instances` paths or glob patterns (default: all);
        `candidates` a kernel per device, as one layer of a mapping (`{"cpu": LocalLayerRepository(
        ...)}`). Bundled kernels for the class join the candidates. Only the chosen instances
        change (see `extension.py`); bad input raises one line and changes nothing.
        """
        from kernel_explorer.switching.extension import extend

        group = extend(self.switchboard, name, cls, instances, candidates=candidates)
        self._captured = self._captured_grad = None  # captured again (same inputs) with the new row
        return group

    def retract(self, name: str, instances: str | list[str] | None = None) -> list[str]:
        """Undo `extend` (all or some instances): PyTorch, and the instances' own class, again."""
        from kernel_explorer.switching.extension import retract

        return retract(self.switchboard, name, instances)

    def running(self, name: str | None = None) -> list[RunningNow]:
        """What each instance runs now."""
        return self.switchboard.running(name)

    @contextlib.contextmanager
    def using(
        self,
        *names: str,
        instances: str | list[str] | None = None,
        mode: str | Mode | None = None,
        candidate: str | Candidate | None = None,
    ) -> Iterator[list[RunningNow]]:
        """Kernels on for the block (all kernel layers when no name is given); the state before, after.

        The previous state comes back also when the block raises or is interrupted.
        """
        running: list[RunningNow] = []

        def switch_on() -> None:
            for name in names or self.layers:
                running.extend(self.on(name, instances, mode=mode, candidate=candidate))

        with self.switchboard.holding(switch_on):
            yield running

    def __repr__(self) -> str:
        on = sum(r.is_kernel for r in self.running())
        total = sum(len(g) for g in self.switchboard.groups.values())
        model = type(self.model).__name__
        return f"<Explorer {model}: {len(self.layers)} kernel layers, {on}/{total} instances on kernels>"
