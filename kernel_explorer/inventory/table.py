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
from kernel_explorer.catalog.availability import Availability, State
from kernel_explorer.catalog.door_row import DoorRow, HubLink
from kernel_explorer.catalog.door_rows import door_rows
from kernel_explorer.inspect.layer_groups import ATTENTION
from kernel_explorer.inventory.row import GIVEN_SOURCES, InventoryRow
from kernel_explorer.measure.kinds.breakdown import EMBEDDING, LINEAR, REST

if TYPE_CHECKING:
    import pandas as pd
    from kernels import Mode
    from torch import nn

    from kernel_explorer._backend.locks import KernelPin
    from kernel_explorer.catalog.candidates import Candidate, Catalog
    from kernel_explorer.measure.kinds.time.records import LayerVerdict
    from kernel_explorer.switching.board import Switchboard


# JupyterLab right-aligns table cells and fixes the layout: the candidates ran off a 1280 px page
# and "measured speedup" wrapped onto four lines. Left-aligned, wrapping long names, within the page.
# (!important: JupyterLab's own rule for output tables is more specific than a class)
_TABLE_CSS = (
    ".kx-inventory { table-layout: auto !important; width: 100%; margin: 0 !important; }"
    ".kx-inventory th, .kx-inventory td { text-align: left !important; vertical-align: top !important; }"
    ".kx-inventory td small, .kx-inventory td:last-child { overflow-wrap: anywhere; }"  # dotted names
    ".kx-inventory td:nth-child(5) { min-width: 10em; }"
)


@dataclass(frozen=True)
class Inventory:
    """Every kernel layer of a model, with candidates and current state; other layers counted."""

    rows: tuple[InventoryRow, ...]
    other_layers: tuple[tuple[str, int], ...]  # (class, instances) of modules with no kernel layer name
    device: str
    mode: str
    uncovered: tuple[tuple[str, float], ...] = ()  # (category, share) no kernel layer covers, largest first
    pins: tuple[KernelPin, ...] = ()  # the project's kernels.lock / [tool.kernels] pins, when given one
    #: Transformers' other doors (function chains, flash names, quantization, KernelConfig fusions)
    doors: tuple[DoorRow, ...] = ()

    @property
    def pins_summary(self) -> str:
        """The project's kernel pins in one line (`Explorer(..., project=path)`)."""
        return f"Project kernel pins: {', '.join(p.summary for p in self.pins)}" if self.pins else ""

    @property
    def uncovered_summary(self) -> str:
        """Where the rest of the model's time goes (from the last `breakdown()`), in one line."""
        if not self.uncovered:
            return ""
        parts = ", ".join(f"{name} {share:.0%}" for name, share in self.uncovered)
        return f"Model time no kernel layer covers (prefill, on PyTorch): {parts}"

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
            "share of model time",
            "best candidate",
            "availability",
        )
        lines: list[tuple[str, ...]] = [header]
        for row in self.rows:
            best = row.best
            lines.append(
                (
                    row.group.name,
                    row.kind,
                    str(len(row.group)),
                    row.running_summary,
                    row.measured_summary,
                    row.share_summary,
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
        for row in self.rows:
            if row.warning:  # a kernel named by the user runs although its values are wrong here
                text.append(f"  {row.group.name}: {row.warning}")
            text += [f"  {row.group.name}: {c.repo_label} [{c.source}]: {found}" for c, found in row.given]
            if row.trust_summary:  # publisher, signature, digest, lock of what `on()` would take
                text.append(f"  {row.group.name} trust of {row.trust_summary}")
            given = {c for c, _ in row.given}
            text += [
                f"  {row.group.name}: {c.repo_label} refused: {found.reason}"
                for c, found in row.refused
                if c not in given
            ]
            if row.changes_summary and row.changes_summary != row.warning:
                text.append(f"  {row.group.name}: {row.changes_summary}")
            text += [f"  {row.group.name} code path {why}" for why in row.code_paths.values() if why]
            if row.through_summary:
                text.append(f"  {row.group.name} runs its kernel through: {row.through_summary}")
            folded = [f"{len(row.here) - 1} more for {self.device}"] if len(row.here) > 1 else []
            folded += [row.elsewhere_summary] if row.elsewhere else []
            if folded:
                text.append(f"  {row.group.name}: {'; '.join(folded)}")
        if any(len(row.candidates) > 1 for row in self.rows):
            text.append("Every candidate and why it can or cannot run: .to_pandas('candidates')")
        if self.doors:
            text.append("Other doors (Transformers):")
            text += [f"  {door}" for door in self.doors]
        if self.uncovered:
            text.append(self.uncovered_summary)
        if self.pins:
            text.append(self.pins_summary)
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

        def option(candidate: Candidate, found: Availability, *, here: bool = True) -> str:
            text = f"{badge(found)} {html.escape(candidate.label)} <small>[{candidate.source}]</small>"
            if (candidate.source in GIVEN_SOURCES or found.state is State.REFUSED) and found.reason:
                text += f"<br><small>{html.escape(found.reason)}</small>"  # given by the user: why, visibly
            if here and found.trust is not None:  # one short line; every sentence on hover
                full = "\n".join(f"{name}: {value}" for name, value in found.trust.columns().items())
                short = html.escape(found.trust.short)
                text += f'<br><small class="kx-trust" title="{html.escape(full)}">{short}</small>'
            return text

        def runs_now(row: InventoryRow) -> str:
            parts = []
            for name, kernel_id, n in row.running_counts:
                text = f"{html.escape(name)} x{n}"
                if kernel_id:  # the op namespace is for whoever needs it, on hover
                    text = f'<span title="kernel id {html.escape(kernel_id)}">{text}</span>'
                parts.append(text)
            path = ""
            if row.code_path_summary:  # the path a multi-ISA kernel runs; why, on hover
                why = html.escape("\n".join(row.code_paths.values()))
                path = f'<br><small title="{why}">{html.escape(row.code_path_summary)}</small>'
            if row.through_summary:  # attention: the repository's own function, or Transformers' glue
                path += f"<br><small>through {html.escape(row.through_summary)}</small>"
            changes = f"<br><small>{html.escape(row.changes_summary)}</small>" if row.changes_summary else ""
            if row.warning:  # in the state's colour: a named kernel with wrong results runs
                colour = row.warning_state.colour
                changes = f'<br><small style="color:{colour}">{html.escape(row.warning)}</small>'
            return ", ".join(parts) + path + changes

        body = []
        for row in self.rows:
            options = "<br>".join(option(c, found) for c, found in row.here)
            if row.elsewhere:
                folded = "<br>".join(option(c, found, here=False) for c, found in row.elsewhere)
                options += (
                    f"{'<br>' if options else ''}<details><summary><small>"
                    f"{html.escape(row.elsewhere_summary)}</small></summary>{folded}</details>"
                )
            options = options or "<i>no mapping from any source</i>"
            body.append(
                "<tr>"
                f"<td><b>{html.escape(row.group.name)}</b><br><small>{html.escape(row.group.original)}</small></td>"
                f"<td>{html.escape(row.kind)}</td><td>{len(row.group)}</td>"
                f"<td>{runs_now(row)}</td>"
                f"<td>{html.escape(row.measured_summary)}</td><td>{html.escape(row.share_summary)}</td>"
                f"<td>{options}</td>"
                "</tr>"
            )
        others = _doors_html(self.doors)
        others += f"<p><small>{html.escape(self.uncovered_summary)}</small></p>" if self.uncovered else ""
        others += f"<p><small>{html.escape(self.pins_summary)}</small></p>" if self.pins else ""
        if self.other_layers:
            listed = ", ".join(f"{html.escape(name)} x{n}" for name, n in self.other_layers)
            others += (
                f"<p><small>Not kernelizable (class declares no kernel layer name): {listed}</small></p>"
            )
        return (
            f"<div><style>{_TABLE_CSS}</style>"
            f"<b>Kernel layers</b> <small>({html.escape(self.device)}, {html.escape(self.mode)})</small>"
            "<table class='kx-inventory'><thead><tr><th>layer</th><th>kind</th><th>instances</th>"
            "<th>runs now</th>"
            "<th>measured speedup [95%]</th><th>share of model time</th>"
            f"<th>candidates</th></tr></thead><tbody>{''.join(body)}</tbody></table>{others}</div>"
        )

    def to_pandas(self, level: str = "instances") -> pd.DataFrame:
        """One row per instance (`level="instances"`), per candidate (`level="candidates"`) or per
        door of Transformers' besides layers and attention (`level="doors"`)."""
        import pandas as pd

        if level == "instances":
            records: list[dict[str, Any]] = [
                {
                    "layer": row.group.name,
                    "kind": row.group.kind,
                    "added": row.group.added,
                    "instance": now.instance,
                    "original": row.group.original,
                    "runs": "kernel" if now.is_kernel else "pytorch",
                    "kernel": row.kernel_name(now) if now.is_kernel else None,
                    "kernel_id": now.kernel_id,
                    "variant": now.variant,
                    "code_path": now.code_path.path or None,
                    "code_path_reason": now.code_path.why or None,
                    "through": now.through or None,
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
                    **_trust_columns(c, found),
                }
                for row in self.rows
                for c, found in row.here + row.elsewhere
            ]
        elif level == "doors":
            records = [
                {
                    "kind": door.kind,
                    "name": door.name,
                    "runs": door.runs,
                    "reason": door.reason,
                    "repository": door.repository or None,
                    "revision": door.revision or None,
                    "instances": door.instances,
                }
                for door in self.doors
            ]
        else:
            raise ValueError(f"level must be 'instances', 'candidates' or 'doors', not {level!r}")
        return pd.DataFrame.from_records(records)


#: the trust columns of `to_pandas("candidates")`, each a sentence (`catalog/trust.py`)
TRUST_COLUMNS = ("publisher", "signature", "digest", "lock")
#: the trust cells of PyTorch's own attention (eager, sdpa): no repository, so nothing to trust
PYTORCH_TRUST = "none: PyTorch's own implementation, not a kernel repository"
#: the trust cells of a repository object that names no build (neither the Hub's nor a folder)
NO_BUILD_TRUST = "not checked: the repository names no build to check"


def _trust_columns(candidate: Candidate, found: Availability) -> dict[str, str]:
    """A candidate's trust cells, each a sentence like the rest of the frame's: where there is no
    trust to read (PyTorch's attention, a repository object naming no build) each cell says why,
    never a missing value (pandas shows NaN, which reads as a failed check)."""
    if found.trust is not None:
        return dict(found.trust.columns())
    why = PYTORCH_TRUST if getattr(candidate, "pytorch", False) else NO_BUILD_TRUST
    return dict.fromkeys(TRUST_COLUMNS, why)


def build_inventory(
    model: nn.Module,
    catalog: Catalog,
    board: Switchboard,
    *,
    mode: Mode,
    query_hub: bool = False,
    measured: dict[str, LayerVerdict] | None = None,
    shares: dict[str, float] | None = None,
    pins: tuple[KernelPin, ...] = (),
    kernel_config: Any | None = None,
) -> Inventory:
    """Snapshot the inventory of `model` (Hub candidates read "checking" unless `query_hub`); the
    Transformers `KernelConfig` the explorer was given, if any, adds its fusion rows."""
    rows = []
    running = board.running()
    for name, door in board.doors.items():
        group = door.group
        found = door.found(mode=mode, query_hub=query_hub)  # probed on this model
        now = tuple(r for r in running if r.layer_name == name)
        rows.append(
            InventoryRow(
                group, found, now, (measured or {}).get(name), board.device, (shares or {}).get(name)
            )
        )
    kernel_paths = {path for door in board.doors.values() for path in door.covered_paths()}
    others = Counter(
        type(module).__name__
        for path, module in model.named_modules()
        if path and path not in kernel_paths and not list(module.children())
    )
    plain = (LINEAR, EMBEDDING, REST, ATTENTION)  # what a breakdown names besides kernel layers
    uncovered = sorted(
        (
            # a layer profiled as a kernel layer and retracted since: its share is stale
            (name if name in plain else f"{name} (not a kernel layer now: profile again)", share)
            for name, share in (shares or {}).items()
            if name not in board.groups
        ),
        key=lambda p: -p[1],
    )
    doors = door_rows(model, board.device, hub_links=_hub_links(rows), kernel_config=kernel_config)
    return Inventory(
        tuple(rows), tuple(others.most_common()), board.device, mode_name(mode), tuple(uncovered), pins, doors
    )


def _hub_links(rows: list[InventoryRow]) -> dict[str, HubLink]:
    """What each layer row says of its Hub kernel: the one running, or why none is (its status)."""
    links = {}
    for row in rows:
        running = [row.kernel_name(now) for now in row.running if now.is_kernel]
        if running:
            links[row.group.name] = HubLink(running=", ".join(dict.fromkeys(running)))
        elif row.best is not None and row.best[1].state.usable:
            links[row.group.name] = HubLink(why_not=f"{row.best[0].label} is {row.status}, not switched on")
        else:
            links[row.group.name] = HubLink(why_not=row.status)
    return links


def _doors_html(doors: tuple[DoorRow, ...]) -> str:
    """The door rows as a folded list under the layers ("" when there are none): what runs through
    each door, and why, on hover-free lines."""
    if not doors:
        return ""
    items = "".join(
        f"<li>{html.escape(d.kind)} <b>{html.escape(d.name)}</b>: {html.escape(d.runs)}"
        f"<br><small>{html.escape(d.reason)}</small></li>"
        for d in doors
    )
    return (
        f"<details><summary><small>Other doors (Transformers): {len(doors)}</small></summary>"
        f"<ul>{items}</ul></details>"
    )
