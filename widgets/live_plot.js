// One live plot that owns its plotly.js figure and applies the deltas Python sends (views/live_plot.py).
//
// Python never resends a trace that only grew: it sends "extend" ops with the points added since the
// last redraw. Here every op only changes the figure's data held in this view (an extended trace is cut
// to its budget, so the page never holds more than that per trace), and one Plotly.react draws what
// changed: at most one draw waiting per plot, however many messages came meanwhile. On a
// loaded machine plotly's own per-call redraws queued up behind each other (the page's memory grew and a
// click waited tens of seconds behind them); now the work per second is bounded whatever the run's
// length. The figure is drawn once the element has a width, so it fits the cell from its first draw.
//
// Every live plot on the page draws through one pacer: one draw at a time, and after a draw that
// took t ms the page has 2 t ms (at least 100) to itself before the next, so the plots take at most a
// third of the page's main thread however many there are and however slow the machine. Drawn back
// to back (four plots, a redraw each as soon as the last ended), they kept it busy on a loaded
// machine, and a click's answer waited behind them.

const pacer = (globalThis.__kxLivePlotPacer ??= { busy: false, queue: [], next: 0 });

function pump() {
  if (pacer.busy || !pacer.queue.length) return;
  const wait = pacer.next - performance.now();
  if (wait > 0) {
    pacer.busy = true;
    setTimeout(() => {
      pacer.busy = false;
      pump();
    }, wait);
    return;
  }
  const job = pacer.queue.shift();
  pacer.busy = true;
  const started = performance.now();
  job().finally(() => {
    const took = performance.now() - started;
    pacer.next = performance.now() + Math.max(100, 2 * took);
    pacer.busy = false;
    pump();
  });
}

// `job` (an async draw) runs when the pacer lets it; one already waiting is not queued twice: it
// draws the figure as it is when its turn comes
function paced(job) {
  if (!pacer.queue.includes(job)) pacer.queue.push(job);
  pump();
}

async function plotlyJs() {
  // the dashboard's first plot carries plotly.js (it sets window.Plotly); the others wait for it
  for (let i = 0; !globalThis.Plotly && i < 1200; i++) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  if (!globalThis.Plotly) throw new Error("kernel_explorer: plotly.js never came (no carrier plot on this page)");
  return globalThis.Plotly;
}

function setPath(target, dotted, value) {
  const keys = dotted.split(".");
  const last = keys.pop();
  for (const key of keys) {
    if (typeof target[key] !== "object" || target[key] === null) target[key] = {};
    target = target[key];
  }
  target[last] = value;
}

function apply(figure, op) {
  switch (op.op) {
    case "react": // a copy: every view of the model gets the same message object
      figure.data = structuredClone(op.data);
      figure.layout = structuredClone(op.layout);
      figure.config = op.config;
      break;
    case "extend":
      op.traces.forEach((index, k) => {
        const trace = figure.data[index];
        trace.x = (trace.x || []).concat(op.x[k]).slice(-op.max);
        trace.y = (trace.y || []).concat(op.y[k]).slice(-op.max);
      });
      break;
    case "restyle":
      for (const [key, values] of Object.entries(op.update)) {
        for (const index of op.traces) setPath(figure.data[index], key, values[0]);
      }
      break;
    case "relayout":
      for (const [key, value] of Object.entries(op.update)) setPath(figure.layout, key, value);
      break;
    case "add":
      figure.data.push(...structuredClone(op.traces));
      break;
    default:
      console.warn("kernel_explorer live plot: unknown op", op.op);
  }
}

function render({ model, el }) {
  el.classList.add("kx-live-plot");
  const div = document.createElement("div");
  el.appendChild(div);
  const spec = structuredClone(model.get("spec")); // each view changes its own copy
  const figure = { data: spec.data, layout: spec.layout, config: spec.config };
  let Plotly = null;
  let revision = 0;
  let width = 0;

  const drawNow = async () => {
    if (!Plotly || !width) return;
    try {
      // the data arrays change in place: a new datarevision tells plotly to redraw them
      const layout = { ...figure.layout, width, datarevision: ++revision };
      await Plotly.react(div, figure.data, layout, figure.config);
    } catch (error) {
      console.error("kernel_explorer live plot", error);
    }
  };
  const draw = () => paced(drawNow);
  const onMessage = (msg) => {
    if (msg?.type !== "ops") return;
    for (const op of msg.ops) apply(figure, op);
    draw();
  };
  model.on("msg:custom", onMessage);

  let asked = false;
  const observer = new ResizeObserver(async () => {
    const now = el.clientWidth;
    if (!now || now === width) return;
    width = now;
    if (!Plotly) Plotly = await plotlyJs();
    draw();
    if (!asked) {
      asked = true;
      model.send({ type: "view" }); // Python answers with the figure as it holds it now
    }
  });
  observer.observe(el);
  return () => {
    observer.disconnect();
    model.off("msg:custom", onMessage);
    if (Plotly) Plotly.purge(div);
  };
}

export default { render };
