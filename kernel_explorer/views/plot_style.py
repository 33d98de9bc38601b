"""The conventions every plot shares (the live dashboard and the HTML report): verdict colours, the
dotted 1x line of a log speedup axis, one colour per layer, the same in every notebook (its first
candidate in the session takes it, a later one a shade of it), and the words a candidate is named
by. Plain data, no plotly import."""

from __future__ import annotations

import hashlib
import re
import threading
from typing import Any

FASTER_COLOUR, SLOWER_COLOUR, UNSURE_COLOUR = "#1a7f37", "#cf222e", "#6e7781"
#: a stretch where the machine, not a kernel, set the time (the throughput plot's noise bands)
WARN_COLOUR = "#bf8700"

_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _decade(exponent: int) -> str:
    """10⁻⁶: a decade as a reader writes it (plotly's own labels would be bare digits, '5' for 0.5)."""
    return "1" if exponent == 0 else "10" + str(exponent).translate(_SUPERSCRIPT)


def _plain(value: float) -> str:
    """0.5, 2, 20: a 1-2-5 tick in full, never one digit standing for a fraction."""
    return f"{value:g}"


def _minor(exponents: range, skip: tuple[int, ...]) -> dict[str, Any]:
    """Unlabelled minor ticks at 2..9 of each decade (those not labelled already)."""
    values = [m * 10.0**e for e in exponents for m in range(2, 10) if m not in skip]
    return {"tickvals": values, "ticks": "outside", "ticklen": 3, "showgrid": False}


#: a log speedup axis: 1-2-5 ticks labelled in full with their "x" (0.5x, 1x, 2x), the other
#: mantissas as unlabelled minor ticks. (1x stays in range through the 1x line, a shape on the
#: axis; `autorangeoptions.include` stopped the live plots from widening beyond it.)
_SPEEDUP_EXPONENTS = range(-3, 4)
SPEEDUP_AXIS: dict[str, Any] = {
    "type": "log",
    "title": {"text": "speedup (x, log scale)"},
    "tickvals": [m * 10.0**e for e in _SPEEDUP_EXPONENTS for m in (1, 2, 5)],
    "ticktext": [f"{_plain(m * 10.0**e)}x" for e in _SPEEDUP_EXPONENTS for m in (1, 2, 5)],
    "minor": _minor(_SPEEDUP_EXPONENTS, skip=(2, 5)),
}

#: the error plots' y axis: the error is in the layer output's own units, so no SI prefix ("100n");
#: decades labelled (10⁻⁶), the rest unlabelled minor ticks
_ERROR_EXPONENTS = range(-31, 4)  # a zero error is drawn at 1e-30
ERROR_AXIS: dict[str, Any] = {
    "type": "log",
    "title": {"text": "max abs error (output's units, log scale)"},
    "tickvals": [10.0**e for e in _ERROR_EXPONENTS],
    "ticktext": [_decade(e) for e in _ERROR_EXPONENTS],
    "minor": _minor(_ERROR_EXPONENTS, skip=()),
}

#: a layer name axis: categories, so an empty plot shows no 0-6 number line; its bottom margin
#: grows to the names when plotly turns them (in a narrow plot "rotary_pos_emb" turned was cut)
CATEGORY_AXIS: dict[str, Any] = {"type": "category", "automargin": True}

#: a plot before its first point: this note in its middle, and no negative range on a count or time
EMPTY_NOTE = "no measurement yet: press Run, or measure from a cell"


def empty_note(text: str = EMPTY_NOTE) -> dict[str, Any]:
    """The annotation an empty plot carries (`text`: what the plot shows and when it fills);
    `LivePlots` drops it with the first point."""
    return {
        "text": text,
        "name": "kx-empty",
        "xref": "paper",
        "yref": "paper",
        "x": 0.5,
        "y": 0.5,
        "showarrow": False,
        "opacity": 0.7,
    }


#: hover of an error bar: the value with its unit, and which side it belongs to
ERROR_HOVER = "%{x}: max abs error %{y:.2e} (output's units)<extra>%{fullData.name}</extra>"


def one_x_line() -> dict[str, Any]:
    """A dotted line at 1x across the plot: above it the kernel is faster, below it slower."""
    return {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "yref": "y",
        "y0": 1,
        "y1": 1,
        "line": {"dash": "dot", "color": UNSURE_COLOUR},
    }


def verdict_colour(low: float, high: float, floor: float = 0.0) -> str:
    """Green when the interval clears 1x (and the floor), red when it lies below, grey otherwise:
    the colour of `stats.speed_verdict`'s answer (the one place a verdict is decided)."""
    from kernel_explorer.records import Interval, Verdict, speed_verdict

    verdict = speed_verdict(Interval((low * high) ** 0.5, low, high, 0, 0.0), floor)
    return {Verdict.FASTER: FASTER_COLOUR, Verdict.SLOWER: SLOWER_COLOUR}.get(verdict, UNSURE_COLOUR)


#: at most this many labelled ticks on a log axis: 16 labels (0.002x ... 2000x) in a plot 110 px
#: high overlapped
MAX_TICKS = 6


def log_ticks(low: float, high: float, *, unit: str = "x", decades_only: bool = False) -> dict[str, Any]:
    """Tick values and labels for a log axis spanning [low, high]: 1-2-5 steps while they fit in
    `MAX_TICKS`, then decades, then every second (third...) decade; never more than `MAX_TICKS`.

    The labels are written in full ("0.5x", "2x") with `unit`, or as powers of ten when `unit` is ""
    (an error in the output's own units: "10⁻⁶").
    """
    import math

    low, high = max(min(low, high), 1e-30), max(high, low, 1e-30)
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    values: list[float] = []
    if not decades_only:
        values = [m * 10.0**e for e in range(first, last + 1) for m in (1, 2, 5)]
        values = [v for v in values if low <= v * 1.0001 and v <= high * 1.0001]
    if decades_only or len(values) > MAX_TICKS or len(values) < 2:
        exponents = list(range(first, last + 1))
        every = max(1, math.ceil(len(exponents) / MAX_TICKS))
        values = [10.0**e for e in exponents if e % every == 0]
        inside = [v for v in values if low <= v * 1.0001 and v <= high * 1.0001]
        if decades_only and len(inside) < 2:  # less than a decade shown: one label read nothing
            steps = [m * 10.0**e for e in range(first, last + 1) for m in (2, 5)]
            values = sorted(values + [v for v in steps if low <= v * 1.0001 and v <= high * 1.0001])
            values = values[:MAX_TICKS]

    def label(value: float) -> str:
        if unit:
            return f"{_plain(value)}{unit}"
        exponent = math.floor(math.log10(value) + 1e-9)
        mantissa = round(value / 10.0**exponent)
        return _decade(exponent) if mantissa == 1 else f"{mantissa}·{_decade(exponent)}"

    text = [label(v) for v in values]
    return {"tickmode": "array", "tickvals": values, "ticktext": text}


#: the layers' colours (never green or red: those say faster and slower); a layer takes the one its
#: name hashes to (`layer_colour`)
LAYER_PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#9467bd",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#7f7f7f",
)

_colours_lock = threading.Lock()
_layer_colours: dict[str, str] = {}
_candidate_shades: dict[tuple[str, str], int] = {}


def _slot(name: str, slots: int) -> int:
    """A place for `name` among `slots` that every process agrees on: blake2s of its UTF-8, not
    Python's `hash()`, which is salted per process (PYTHONHASHSEED)."""
    return int.from_bytes(hashlib.blake2s(name.encode(), digest_size=4).digest(), "little") % slots


def layer_colour(layer: str) -> str:
    """The layer's colour: the palette slot its name hashes to (`_slot`), so "SiLU" is the same colour
    in every notebook, whatever the order its traces are drawn in. Where a layer of this session
    (the Python process) holds that slot already, the next free slot after it: two layers drawn
    together never share a colour (a choice kept for the session, and the same for the same layers
    asked in the same order; past 8 layers, colours repeat)."""
    with _colours_lock:
        if layer not in _layer_colours:
            start, count = _slot(layer, len(LAYER_PALETTE)), len(LAYER_PALETTE)
            taken = set(_layer_colours.values())
            probed = [LAYER_PALETTE[(start + step) % count] for step in range(count)]
            _layer_colours[layer] = next((c for c in probed if c not in taken), probed[0])
        return _layer_colours[layer]


def _mix(colour: str, towards: int, share: float) -> str:
    """`colour` (#rrggbb) moved `share` of the way to black (0) or white (255)."""
    channels = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (towards - c) * share):02x}" for c in channels)


def _linear_rgb(colour: str) -> tuple[float, float, float]:
    """A #rrggbb colour's channels as linear light (sRGB's curve undone), 0 to 1: what luminance
    and CIE XYZ are sums of."""

    def linear(channel: int) -> float:
        value = channel / 255
        return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4

    red, green, blue = (linear(int(colour[i : i + 2], 16)) for i in (1, 3, 5))
    return red, green, blue


def _lab(colour: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of a #rrggbb colour: where a distance is about what an eye tells apart."""
    red, green, blue = _linear_rgb(colour)
    x = (0.4124 * red + 0.3576 * green + 0.1805 * blue) / 0.95047
    y = 0.2126 * red + 0.7152 * green + 0.0722 * blue
    z = (0.0193 * red + 0.1192 * green + 0.9505 * blue) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def shade_distance(first: str, second: str) -> float:
    """How far apart two #rrggbb colours look: CIE76 delta E (about 2: just noticeable; 25 and up:
    two markers a reader names apart at a glance)."""
    return sum((a - b) ** 2 for a, b in zip(_lab(first), _lab(second), strict=True)) ** 0.5


#: the shades of a layer's colour its candidates take: (towards black 0 or white 255, how far). At
#: most 45% (40% towards white): 70% towards white (#dfd1eb on white, 1.5:1) and 65% towards black
#: (#342442 on JupyterLab's dark theme) nearly vanished. The first is the layer's own colour
_SHADES = ((0, 0.0), (0, 0.25), (255, 0.25), (0, 0.45), (255, 0.4))
#: two candidates of one layer are at least this far apart (`shade_distance`) where the shades allow:
#: "1.27x" in the layer's colour beside "1.31x" 35% darker (delta E 20 for the blue) read as one. 22,
#: not 25: the farthest a shade of at most 45% lies from the palette's grey is 23 (the blue's 26)
MIN_SHADE_DISTANCE = 22.0


#: the pages a plot is drawn on: JupyterLab's light theme and its dark one (--jp-layout-color0)
PAGES = ("#ffffff", "#111111")
#: a candidate's shade stands at least this far off every page (WCAG contrast): the palette's yellow
#: 40% towards white read 1.5:1 on white and its brown 45% towards black 1.6:1 on the dark page, a
#: marker one looks for. 2.0 is the palette's own floor (its yellow on white); a layer's own colour
#: is always drawn
MIN_PAGE_CONTRAST = 2.0


def contrast(first: str, second: str) -> float:
    """WCAG contrast ratio of two #rrggbb colours (1 to 21)."""

    def luminance(colour: str) -> float:
        red, green, blue = _linear_rgb(colour)
        return 0.2126 * red + 0.7152 * green + 0.0722 * blue

    darker, lighter = sorted((luminance(first), luminance(second)))
    return (lighter + 0.05) / (darker + 0.05)


def _readable_shades(base: str) -> list[int]:
    """The shades of `base` (indices into `_SHADES`, its own colour left out) that stand
    `MIN_PAGE_CONTRAST` off every page; all of them where none does."""
    shades = range(1, len(_SHADES))
    found = [
        i
        for i in shades
        if all(contrast(_mix(base, *_SHADES[i]), page) >= MIN_PAGE_CONTRAST for page in PAGES)
    ]
    return found or list(shades)


def candidate_colour(layer: str, candidate: str) -> str:
    """A shade of the layer's colour for one of its candidates (`candidate`: its entry name, "SiLU ·
    bundled activation"), kept for the session. The layer's first candidate drawn in this session
    takes the layer's own colour (the common case, one candidate, reads in the layer's colour, the
    same in every notebook: `layer_colour` hashes the layer's name). A later one takes the shade its
    name hashes to among the others that read on both pages (`MIN_PAGE_CONTRAST`; the same in every
    notebook with the same candidates before it) where that is at least `MIN_SHADE_DISTANCE` from
    every shade of the layer taken, else the next shade that is (the farthest where none is). Once
    every readable shade is held, a fainter one: two candidates never share a colour while a shade
    is left (five to a layer)."""
    base = layer_colour(layer)
    with _colours_lock:
        key = (layer, candidate)
        if key not in _candidate_shades:
            held = {i for known, i in _candidate_shades.items() if known[0] == layer}
            taken = [_mix(base, *_SHADES[i]) for i in held]
            readable = _readable_shades(base)  # the shades but the layer's own colour
            start = _slot(candidate, len(readable))
            order = [readable[(start + step) % len(readable)] for step in range(len(readable))]
            faint = [i for i in range(1, len(_SHADES)) if i not in readable]

            def nearest(index: int) -> float:
                shade = _mix(base, *_SHADES[index])
                return min((shade_distance(shade, other) for other in taken), default=float("inf"))

            # the readable shades first; once each is held, a faint one rather than a repeat
            free = [i for i in order if i not in held] or [i for i in faint if i not in held] or order
            far = [index for index in free if nearest(index) >= MIN_SHADE_DISTANCE]
            chosen = far[0] if far else max(free, key=nearest)
            _candidate_shades[key] = 0 if not taken else chosen
        towards, share = _SHADES[_candidate_shades[key]]
    return _mix(base, towards, share)


#: where a candidate label's repository comes from ("bundled/activation"), the first word of it
_SOURCES = ("bundled", "peer", "user", "registered", "transformers")
#: the sign between a layer and its candidate in every legend and label
SEPARATOR = " · "
#: what an off layer reads: it ran PyTorch on both sides of its pairs (never "not measurable")
KERNEL_OFF = "kernel off"


def candidate_short(kernel_id: str | None, candidate: str | None) -> str:
    """A candidate's short name and source from what a record carries: "bundled activation",
    "peer plain-silu", "hub activation@v1" (from its label, "bundled/activation:Silu (cpu,
    inference)", a built folder's digest left out), else the kernel id; "" when neither is known."""
    label = (candidate or "").strip()
    if label:
        repo = label.split(":", 1)[0].split(" (", 1)[0].strip()
        first, slash, rest = repo.partition("/")
        if slash and first in _SOURCES:  # a built folder's name ends with its digest: "plain-silu-b13f1b83"
            return f"{first} {re.sub(r'-[0-9a-f]{8}(?=@|$)', '', rest)}"
        if slash:
            return f"hub {rest}"
        return repo
    return kernel_id or ""


def entry_name(layer: str, short: str) -> str:
    """A legend entry and a point's label: "SiLU · bundled activation", "SiLU · kernel off"."""
    return f"{layer}{SEPARATOR}{short}" if short else layer
