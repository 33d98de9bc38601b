"""One copy of plotly.js per dashboard instead of one per figure.

Since plotly 6 a `FigureWidget` is an anywidget whose `_esm` state is the whole plotly.js bundle
(4,958,979 characters for plotly 7.1): every figure sends it to the browser when it is created, the
browser evaluates it once per figure, and `nbconvert --execute` stores it once per figure. The
dashboard's four live figures sent about 20 MB before anything was drawn, most of the seconds the
explore cell sat full.

Here the first figure of a group (`CarrierFigure`) carries the bundle, with one statement added
that also hands its exports to `globalThis` under a name derived from the bundle's hash; the others
(`LightFigure`) carry a few lines that wait for those exports and re-export them. The carrier and
its light figures must live and die together (the dashboard's plots do): a light figure whose
carrier is gone from the page waits 60 s and then says so in the browser console. When the bundle
does not end as expected (another plotly version), both classes are plain `FigureWidget`s.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any

# the bundle's last statement: its named exports and its default (anywidget's render/initialize)
_EXPORTS = re.compile(r"export\{(\w+) as FigureModel,(\w+) as FigureView,(\w+) as default\};")

_LIGHT = """let shared = globalThis.%(name)s;
for (let i = 0; !shared && i < 1200; i++) {
  await new Promise((resolve) => setTimeout(resolve, 50));
  shared = globalThis.%(name)s;
}
if (!shared) throw new Error("kernel_explorer: plotly.js never came (no carrier figure on this page)");
export const FigureModel = shared.FigureModel;
export const FigureView = shared.FigureView;
export default shared.default;
"""


@functools.cache
def figure_classes() -> tuple[type[Any], type[Any]]:
    """(carrier, light) FigureWidget classes; both plain FigureWidget when the bundle is unexpected."""
    import plotly.graph_objects as go

    bundle = str(go.FigureWidget._esm)
    found = list(_EXPORTS.finditer(bundle))
    if len(found) != 1 or bundle[found[0].end() :].lstrip().startswith("export"):
        return go.FigureWidget, go.FigureWidget
    match = found[0]
    name = "__kx_plotly_" + hashlib.sha1(bundle.encode()).hexdigest()[:12]
    model, view, default = match.groups()
    handover = f"globalThis.{name}={{FigureModel:{model},FigureView:{view},default:{default}}};"
    carrier_esm = bundle[: match.start()] + handover + bundle[match.start() :]
    carrier = type("CarrierFigure", (go.FigureWidget,), {"_esm": carrier_esm, "__module__": __name__})
    light = type("LightFigure", (go.FigureWidget,), {"_esm": _LIGHT % {"name": name}, "__module__": __name__})
    return carrier, light


def shared_figures(count: int, **kwargs: Any) -> list[Any]:
    """`count` FigureWidgets (each made with `kwargs`) that share one copy of plotly.js."""
    carrier, light = figure_classes()
    return [carrier(**kwargs) if index == 0 else light(**kwargs) for index in range(count)]
