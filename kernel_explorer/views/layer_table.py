"""The layer table: ONE anywidget for every layer and instance (its front end: widgets/layer_table.js)."""

from __future__ import annotations

import contextlib
from importlib import resources
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from kernel_explorer.availability import State

if TYPE_CHECKING:
    from kernel_explorer.explorer import Explorer


def _asset(name: str) -> str:
    return resources.files("kernel_explorer.widgets").joinpath(name).read_text()


def _state_css() -> str:
    """Badge colours per state, from the one table in `availability` (the CSS file has the rest)."""
    return "\n".join(
        f".kx-layer-table .kx-state-{state.key} {{ background: {state.colour}; }}" for state in State
    )


def table_rows(explorer: Explorer) -> list[dict[str, Any]]:
    """The table's state: per layer name its switch, badge, candidate, instances and what runs."""
    inventory = explorer.inventory()
    rows = []
    for row in inventory.rows:
        best = row.best
        instances = [
            {
                "path": now.instance,
                "on": now.is_kernel,
                "runs": row.kernel_name(now),  # a person's name; the op id is for the tooltip
                "reason": now.reason or (f"kernel id {now.kernel_id}" if now.kernel_id else ""),
            }
            for now in row.running
        ]
        rows.append(
            {
                "name": row.group.name,
                "original": row.group.original,
                "added": row.group.added,  # named with Explorer.extend, not by the model
                "count": len(row.group),
                "on_count": sum(i["on"] for i in instances),
                "usable": bool(best and best[1].state.usable),
                "state": best[1].state.value if best else "no mapping",
                "state_key": best[1].state.key if best else State.NO_MAPPING.key,
                "reason": best[1].details if best else "no mapping from any source",
                "candidate": best[0].label if best else "",
                "runs": row.running_summary,
                "runs_title": ", ".join(f"kernel id {kid}" for _, kid, _ in row.running_counts if kid),
                "instances": instances,
            }
        )
    return rows


class LayerTable(anywidget.AnyWidget):
    """Switches for every kernel layer; clicks switch through the explorer, then the rows refresh."""

    _esm = _asset("layer_table.js")
    _css = _asset("layer_table.css") + "\n" + _state_css()
    rows = traitlets.List([]).tag(sync=True)

    def __init__(self, explorer: Explorer, on_error: Any = None, output: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.explorer = explorer
        self.on_error = on_error
        self.output = output  # an Output widget: progress bars of downloads a switch starts show there
        self.on_msg(self._handle_message)
        # any switch of the model, from Python, a magic, a run or another view, redraws the rows
        self._unsubscribe = explorer.switchboard.subscribe(self.refresh)
        self.refresh()

    def close(self) -> None:
        self._unsubscribe()
        super().close()

    def refresh(self) -> None:
        self.rows = table_rows(self.explorer)

    def _handle_message(self, widget: Any, content: dict[str, Any], buffers: Any) -> None:
        # Caught inside the Output context: in a kernel, Output swallows exceptions (it prints them).
        with self.output if self.output is not None else contextlib.nullcontext():
            try:
                self._toggle(content)
            except Exception as error:  # shown in the dashboard's status line, not lost in the log
                if self.on_error is not None:
                    self.on_error(f"{content.get('layer')}: {type(error).__name__}: {error}")
            finally:
                self.refresh()

    def _toggle(self, content: dict[str, Any]) -> None:
        if content.get("type") == "toggle":
            instances = [content["instance"]] if content.get("instance") else None
            if content.get("on"):
                self.explorer.on(content["layer"], instances)
            else:
                self.explorer.off(content["layer"], instances)
