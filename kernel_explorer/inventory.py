"""The inventory as a table: each kernel layer of a model, its candidates here, what runs now.

Built from the three parts that know each fact (the layer groups, the catalog, the switchboard),
it is a frozen snapshot that renders as text, as HTML (in a notebook), and exports to pandas.
"""

from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.modes import mode_name
from kernel_explorer.availability import Availability
from kernel_explorer.catalog import first_usable

if TYPE_CHECKING:
    import pandas as pd
    from kernels import Mode
    from torch import nn

    from kernel_explorer.catalog import Candidate, Catalog
    from kernel_explorer.layer_groups import LayerGroup
    from kernel_explorer.records import LayerVerdict
    from kernel_explorer.switchboard import RunningNow, Switchboard


@dataclass(frozen=True)
class InventoryRow:
    """One kernel layer name of the model."""

    group: LayerGroup
    candidates: tuple[tuple[Candidate, Availability], ...]
    running: tuple[RunningNow, ...]
    measured: LayerVerdict | None = None  # the last comparison's verdict, when there was one

    @property
    def measured_summary(self) -> str:
        """The last comparison in one phrase (`3.21x [3.10, 3.35] faster`), or "not measured"."""
        return "not measured" if self.measured is None else self.measured.summary

    @property
    def best(self) -> tuple[Candidate, Availability] | None:
        """The candidate the explorer would switch on: the first usable one, else the first one."""
        usable = first_usable(self.candidates)
        if usable is not None:
            return usable
        return self.candidates[0] if self.candidates else None

    @property
    def status(self) -> str:
        """One phrase: the best candidate's state, or why there is none."""
        best = self.best
        if best is None:
            return "no mapping from any source"
        return str(best[1])

    @property
    def running_summary(self) -> str:
        counts = Counter("PyTorch" if not r.is_kernel else f"kernel {r.kernel_id}" for r in self.running)
        return ", ".join(f"{what} x{n}" for what, n in counts.most_common())


@dataclass(frozen=True)
class Inventory:
    """Every kernel layer of a model, with candidates and current state; other layers counted."""

    rows: tuple[InventoryRow, ...]
    other_layers: tuple[tuple[str, int], ...]  # (class, instances) of modules with no kernel layer name
    device: str
    mode: str

    def row(self, name: str) -> InventoryRow:
        for row in self.rows:
            if row.group.name == name:
                return row
        raise KeyError(name)

    def __str__(self) -> str:
        header = (
            "layer",
            "kind",
            "n",
            "runs now",
            "measured speedup [95%]",
            "best candidate",
            "availability",
        )
        lines = [header]
        for row in self.rows:
            best = row.best
            lines.append(
                (
                    row.group.name,
                    row.group.kind,
                    str(len(row.group)),
                    row.running_summary,
                    row.measured_summary,
                    best[0].label if best else "-",
                    row.status,
                )
            )
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        text = [f"Kernel layers ({self.device}, {self.mode}):"]
        text += [
            "  " + "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
            for line in lines
        ]
        if self.other_layers:
            others = ", ".join(f"{name} x{n}" for name, n in self.other_layers[:8])
            more = f" and {len(self.other_layers) - 8} more classes" if len(self.other_layers) > 8 else ""
            text.append(f"Not kernelizable (class declares no kernel layer name): {others}{more}")
        return "\n".join(text)

    def _repr_html_(self) -> str:
        def badge(found: Availability) -> str:
            colour = found.state.colour
            return (
                f'<span title="{html.escape(found.details)}" style="background:{colour};color:#fff;'
                f'border-radius:4px;padding:0 4px;white-space:nowrap">{html.escape(found.state.value)}</span>'
            )

        body = []
        for row in self.rows:
            options = (
                "<br>".join(
                    f"{badge(found)} {html.escape(c.label)} <small>[{c.source}]</small>"
                    for c, found in row.candidates
                )
                or "<i>no mapping from any source</i>"
            )
            body.append(
                "<tr>"
                f"<td><b>{html.escape(row.group.name)}</b><br><small>{html.escape(row.group.original)}</small></td>"
                f"<td>{row.group.kind}</td><td>{len(row.group)}</td>"
                f"<td>{html.escape(row.running_summary)}</td>"
                f"<td>{html.escape(row.measured_summary)}</td><td>{options}</td>"
                "</tr>"
            )
        others = ""
        if self.other_layers:
            listed = ", ".join(f"{html.escape(name)} x{n}" for name, n in self.other_layers)
            others = f"<p><small>Not kernelizable (class declares no kernel layer name): {listed}</small></p>"
        return (
            f"<div><b>Kernel layers</b> <small>({html.escape(self.device)}, {html.escape(self.mode)})</small>"
            "<table><thead><tr><th>layer</th><th>kind</th><th>instances</th><th>runs now</th>"
            "<th>measured speedup [95%]</th>"
            f"<th>candidates</th></tr></thead><tbody>{''.join(body)}</tbody></table>{others}</div>"
        )

    def to_pandas(self, level: str = "instances") -> pd.DataFrame:
        """One row per instance (`level="instances"`) or per candidate (`level="candidates"`)."""
        import pandas as pd

        if level == "instances":
            records: list[dict[str, Any]] = [
                {
                    "layer": row.group.name,
                    "kind": row.group.kind,
                    "instance": now.instance,
                    "original": row.group.original,
                    "runs": "kernel" if now.is_kernel else "pytorch",
                    "kernel_id": now.kernel_id,
                    "variant": now.variant,
                    "repository": now.repository,
                    "reason": now.reason,
                }
                for row in self.rows
                for now in row.running
            ]
        elif level == "candidates":
            records = [
                {
                    "layer": row.group.name,
                    "candidate": c.label,
                    "source": c.source,
                    "device": c.device,
                    "mode": mode_name(c.entry.mode),
                    "state": found.state.value,
                    "variant": found.variant,
                    "reason": found.reason,
                    "size_bytes": found.size_bytes,
                }
                for row in self.rows
                for c, found in row.candidates
            ]
        else:
            raise ValueError(f"level must be 'instances' or 'candidates', not {level!r}")
        return pd.DataFrame.from_records(records)


def build_inventory(
    model: nn.Module,
    catalog: Catalog,
    board: Switchboard,
    *,
    mode: Mode,
    query_hub: bool = False,
    measured: dict[str, LayerVerdict] | None = None,
) -> Inventory:
    """Snapshot the inventory of `model` (Hub candidates read "checking" unless `query_hub`)."""
    rows = []
    running = board.running()
    for name, group in board.groups.items():
        found = tuple(
            (c, catalog.availability(c, device=board.device, mode=mode, query_hub=query_hub))
            for c in catalog.candidates(name)
        )
        now = tuple(r for r in running if r.layer_name == name)
        rows.append(InventoryRow(group, found, now, (measured or {}).get(name)))
    kernel_paths = {
        path for group in board.groups.values() if group.kind == "module" for path in group.instances
    }
    others = Counter(
        type(module).__name__
        for path, module in model.named_modules()
        if path and path not in kernel_paths and not list(module.children())
    )
    return Inventory(tuple(rows), tuple(others.most_common()), board.device, mode_name(mode))
