"""The layer table: ONE anywidget for every layer and instance (its front end: widgets/layer_table.js)."""

from __future__ import annotations

import contextlib
import time
from importlib import resources
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from kernel_explorer.explorer import State, without_scope

if TYPE_CHECKING:
    from kernel_explorer.explorer import Explorer


def _asset(name: str) -> str:
    return resources.files("kernel_explorer.widgets").joinpath(name).read_text()


def _state_css() -> str:
    """Badge colours per state, from the one table in `availability` (the CSS file has the rest)."""
    return "\n".join(
        f".kx-layer-table .kx-state-{state.key} {{ background: {state.colour}; }}" for state in State
    )


def _short(label: str) -> str:
    """`bundled/quantized_linear:Q4_1Linear`: a candidate's label without its "(cpu, any mode)"."""
    return without_scope(label)


def picker_candidates(found: Any, device: str) -> list[dict[str, Any]]:
    """The row's picker: each kernel once per device (a Hub mapping lists one repository for every
    device, capability and mode: six identical "no mapping" lines), this device's first, and no
    PyTorch implementation. Picking "eager" as the attention "kernel" gave a row whose checkbox
    said off while PyTorch's eager ran, measured as a kernel against PyTorch; PyTorch is what the
    switch's off state runs, so it is not offered as a kernel. A kernel that cannot be chosen on
    several devices for one reason is one entry naming them together (`device` "cuda, rocm, xpu":
    the SiLU picker listed three alike "(no mapping for this device or mode)" lines); each entry
    that can be chosen stays one of its own."""
    kept: dict[tuple[str, str], dict[str, Any]] = {}
    for candidate, availability in found:
        if getattr(candidate, "pytorch", False):
            continue
        key = (_short(candidate.label), candidate.device)
        if key in kept and (kept[key]["usable"] or not availability.state.usable):
            continue
        kept[key] = {
            "label": candidate.label,
            "short": key[0],
            "device": candidate.device,
            "usable": availability.state.usable,
            "state": availability.state.value,
            "reason": availability.details,
            "trust": trust_lines(availability),  # publisher, signature, digest, lock: one line each
        }
    # stable: this device first
    return _devices_together(sorted(kept.values(), key=lambda option: option["device"] != device))


def _devices_together(options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`options` with the unusable entries of one kernel and state merged into the first of them: its
    devices joined ("cuda, rocm, xpu"), each distinct reason and trust line kept for the tooltip."""
    merged: list[dict[str, Any]] = []
    alike: dict[tuple[str, str], dict[str, Any]] = {}
    for option in options:
        if option["usable"]:
            merged.append(option)
            continue
        first = alike.get((option["short"], option["state"]))
        if first is None:
            alike[(option["short"], option["state"])] = first = dict(option)
            merged.append(first)
            continue
        first["device"] = f"{first['device']}, {option['device']}"
        for field in ("reason", "trust"):
            lines = [line for text in (first[field], option[field]) for line in text.split("\n") if line]
            first[field] = "\n".join(dict.fromkeys(lines))
    return merged


def running_candidate(running: Any, offered: set[str]) -> str:
    """The label of the candidate most of the row's instances run now, when the picker offers it;
    "" when they run PyTorch. The picker shows what runs: after `%kernels on SiLU --candidate peer`
    it read `bundled/activation:Silu` while "runs now" said the peer."""
    from collections import Counter

    counts = Counter(now.candidate for now in running if now.is_kernel and now.candidate in offered)
    return counts.most_common(1)[0][0] if counts else ""


def trust_lines(availability: Any) -> str:
    """A candidate's trust (`catalog/trust.py`), one sentence per line ("" when it names no build)."""
    trust = getattr(availability, "trust", None)
    return "" if trust is None else "\n".join(f"{name}: {text}" for name, text in trust.columns().items())


def table_rows(explorer: Explorer, chosen: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The table's state: per layer name its switch, badge, candidates (and the one picked),
    instances and what runs."""
    inventory = explorer.inventory()
    rows = []
    for row in inventory.rows:
        best = row.best
        options = picker_candidates(row.candidates, explorer.device)
        runs = running_candidate(row.running, {option["label"] for option in options})
        if runs and chosen is not None:  # switched from anywhere (a magic, a cell): the picker follows
            chosen[row.group.name] = runs
        picked = runs or (chosen or {}).get(row.group.name) or (best[0].label if best else "")
        # the trust cells are those of the candidate picked
        shown = next((found for c, found in row.candidates if c.label == picked), best[1] if best else None)
        trust = shown.trust if shown is not None else None
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
                "candidate": picked,
                "trust": trust.short if trust is not None else "",
                "trust_title": trust_lines(shown) if shown is not None else "",
                "candidates": options,
                "given": [  # the user's own candidates, each with its state, even when another ranks first
                    {
                        "short": _short(candidate.label),
                        "source": candidate.source,
                        "state": found.state.value,
                        "state_key": found.state.key,
                        "reason": found.details,
                    }
                    for candidate, found in row.given
                ],
                "warning": row.warning,  # a named kernel with wrong results runs: in the state's colour
                "warning_key": row.warning_state.key,
                "runs": row.running_summary,
                "runs_title": "; ".join(
                    [f"kernel id {kid}" for _, kid, _ in row.running_counts if kid]
                    + [f"code path {why}" for why in row.code_paths.values() if why]  # which ISA, and why
                    + ([f"through {row.through_summary}"] if row.through_summary else [])  # direct or glue
                    + ([row.changes_summary] if row.changes_summary else [])
                ),
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
        self.chosen: dict[str, str] = {}  # layer -> the candidate label picked in its row
        self.on_error = on_error
        self.output = output  # an Output widget: progress bars of downloads a switch starts show there
        self.on_msg(self._handle_message)
        # any switch of the model, from Python, a magic, a run or another view, redraws the rows
        self._acting = False  # a click being answered: it refreshes once, after its switches
        self.answer_seconds: list[float] = []  # per click, the kernel's share of answering it
        #: per click, from the page sending it to the kernel taking it up (the server, the socket and
        #: the kernel's queue: a kernel busy elsewhere shows here, not in `answer_seconds`)
        self.arrival_seconds: list[float] = []
        self._unsubscribe = explorer.subscribe_switches(self._on_switch)
        self.refresh()

    def close(self) -> None:
        self._unsubscribe()
        super().close()

    def refresh(self) -> None:
        self.rows = table_rows(self.explorer, self.chosen)

    def _on_switch(self) -> None:
        """A switch from anywhere redraws the rows; one this table's click made is redrawn once,
        when the click is answered (each redraw reads every instance of every row)."""
        if not self._acting:
            self.refresh()

    def _handle_message(self, widget: Any, content: dict[str, Any], buffers: Any) -> None:
        began = time.perf_counter()
        sent_ms = content.get("sent_ms")
        if isinstance(sent_ms, int | float):  # meaningful where the page runs on the kernel's machine
            self.arrival_seconds.append(max(0.0, time.time() - sent_ms / 1000))
        try:
            self._answer(content)
        finally:  # what a click cost in the kernel, from its message to the answer sent
            self.answer_seconds.append(time.perf_counter() - began)

    def _answer(self, content: dict[str, Any]) -> None:
        # Caught inside the Output context: in a kernel, Output swallows exceptions (it prints them).
        with self.output if self.output is not None else contextlib.nullcontext():
            try:
                self._acting = True
                self._act(content)
            except Exception as error:  # shown in the dashboard's status line, not lost in the log
                if self.on_error is not None:
                    self.on_error(f"{content.get('layer')}: {type(error).__name__}: {error}")
            finally:
                self._acting = False
                self.refresh()
                # the row shows "switching…" from the click until this answer (a Linear switch packs
                # weights for seconds); sent even when the rows did not change
                self.send({"type": "done", "layer": content.get("layer"), "n": content.get("n")})

    def _act(self, content: dict[str, Any]) -> None:
        layer = content.get("layer", "")
        if content.get("type") == "toggle":
            instances = [content["instance"]] if content.get("instance") else None
            if content.get("on"):
                self.explorer.on(layer, instances, candidate=self.chosen.get(layer))
            else:
                self.explorer.off(layer, instances)
        elif content.get("type") == "choose":
            self.chosen[layer] = content["candidate"]
            running = self.explorer.running(layer)
            on = [now.instance for now in running if now.is_kernel]
            if on:  # the layer runs a kernel: the instances on it take the one picked now
                instances = None if len(on) == len(running) else on  # all (attention: model-wide)
                self.explorer.on(layer, instances, candidate=content["candidate"])
