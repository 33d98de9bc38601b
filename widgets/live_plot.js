// One live plot that owns its plotly.js figure and applies the deltas Python sends (views/live_plot.py).
//
// Python never resends a trace that only grew: it sends "extend" ops with the points added since the
// last redraw, and plotly.js appends them (Plotly.extendTraces, with the trace's budget as maxPoints so
// the browser never holds more than that per trace, whatever Python sends). A whole figure travels only
// when a view asks for it (a new view, a redisplay) or when a run starts. The figure is drawn once the
// element has a width, so it is sized to the cell from its first draw, and it refits when the cell does.

async function plotlyJs() {
  // the dashboard's first plot carries plotly.js (it sets window.Plotly); the others wait for it
  for (let i = 0; !globalThis.Plotly && i < 1200; i++) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  if (!globalThis.Plotly) throw new Error("kernel_explorer: plotly.js never came (no carrier plot on this page)");
  return globalThis.Plotly;
}

function apply(Plotly, div, op) {
  switch (op.op) {
    case "react":
      return Plotly.react(div, op.data, { ...op.layout, width: div.parentElement.clientWidth }, op.config);
    case "extend":
      return Plotly.extendTraces(div, { x: op.x, y: op.y }, op.traces, op.max);
    case "restyle":
      return Plotly.restyle(div, op.update, op.traces);
    case "relayout":
      return Plotly.relayout(div, op.update);
    case "add":
      return Plotly.addTraces(div, op.traces);
    default:
      console.warn("kernel_explorer live plot: unknown op", op.op);
  }
}

function render({ model, el }) {
  el.classList.add("kx-live-plot");
  const div = document.createElement("div");
  el.appendChild(div);
  let Plotly = null;
  let chain = null; // ops applied one after another (each plotly call is asynchronous)
  let pending = []; // ops that came before the first draw
  let starting = false;

  const run = (ops) => {
    for (const op of ops) chain = chain.then(() => apply(Plotly, div, op)).catch((e) => console.error(e));
  };
  const onMessage = (msg) => {
    if (msg?.type !== "ops") return;
    if (chain === null) pending.push(...msg.ops);
    else run(msg.ops);
  };
  model.on("msg:custom", onMessage);

  const start = async () => {
    starting = true;
    Plotly = await plotlyJs();
    const spec = model.get("spec");
    await Plotly.newPlot(div, spec.data, { ...spec.layout, width: el.clientWidth }, spec.config);
    chain = Promise.resolve();
    run(pending);
    pending = [];
    model.send({ type: "view" }); // Python answers with the figure as it holds it now
  };
  let width = 0;
  const observer = new ResizeObserver(() => {
    const now = el.clientWidth;
    if (!now || now === width) return;
    width = now;
    if (!starting) start();
    else if (chain !== null) chain = chain.then(() => Plotly.relayout(div, { width: now }));
  });
  observer.observe(el);
  return () => {
    observer.disconnect();
    model.off("msg:custom", onMessage);
    if (Plotly) Plotly.purge(div);
  };
}

export default { render };
