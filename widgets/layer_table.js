// The layer table: one anywidget for all layers (a switch per layer name, expandable instances
// with their own switches, an availability badge with the reason on hover, what runs now).
// State comes from Python in `rows`; clicks go back as messages, Python switches and sends new rows.
// A badge's class is its state's key (`kx-state-ready`, ...); the colours come from Python.

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function render({ model, el: root }) {
  const open = new Set();
  // the clicks in flight, by layer (each a number Python's "done" echoes): their row reads
  // "switching…"; a layer is busy while any of its clicks is unanswered
  const busy = new Map();
  let sent = 0;
  root.classList.add("kx-layer-table");

  // -- the link to the kernel (widgets/link_watch.js turns the whole dashboard off; here a click in
  // flight ends with "not delivered" instead of "switching…" forever) --
  let unlinked = false;
  const undelivered = new Set(); // layers whose click was in flight when the kernel went

  function linkLost(click) {
    if (unlinked) return;
    unlinked = true;
    for (const layer of busy.keys()) undelivered.add(layer);
    busy.clear();
    draw();
    root.dispatchEvent(new CustomEvent("kx-link-lost", { bubbles: true, detail: { why: "undelivered", click } }));
  }
  const onLinkLost = (event) => {
    if (event.target !== root && event.target.contains?.(root)) linkLost(false);
  };
  document.addEventListener("kx-link-lost", onLinkLost);

  function send(layer, message) {
    if (unlinked) return;
    const n = ++sent;
    if (!busy.has(layer)) busy.set(layer, new Set());
    busy.get(layer).add(n);
    draw();
    // the kernel says "idle" after every message it takes; one that took this click without
    // answering its "done" does not know this table any more (restarted where this page did not
    // hear). The click's own answer, by number: a second click on the layer, sent after the first's
    // "done" but before its "idle", is not the first one unanswered.
    const status = (reply) => {
      if (reply?.content?.execution_state !== "idle") return;
      // "done" came first if it came; the link watch's ping (asked twice) is the quicker judge, this
      // one only the last word, so a page too loaded to have handled its "done" is not called dead
      setTimeout(() => busy.get(layer)?.has(n) && linkLost(true), 1000);
    };
    try {
      model.send({ layer, ...message, n, sent_ms: Date.now() }, { iopub: { status } }); // sent_ms: Python times the way over
    } catch {
      linkLost(true); // JupyterLab's "Cannot send": the comm went with the kernel
    }
  }

  function toggle(layer, on, instance) {
    const message = { type: "toggle", on };
    if (instance !== undefined) message.instance = instance;
    send(layer, message);
  }

  // Python answers every message with "done" (also when nothing changed): the row is free again
  model.on("msg:custom", (message) => {
    if (message && message.type === "done") {
      const clicks = busy.get(message.layer);
      clicks?.delete(message.n);
      if (!clicks?.size || message.n === undefined) busy.delete(message.layer);
      draw();
    }
  });

  function picker(row) {
    // one candidate: its name; several: a choice, the unusable ones shown with why, not choosable
    if ((row.candidates || []).length < 2) return el("div", { class: "kx-candidate", text: row.candidate });
    const select = el("select", { class: "kx-candidate-pick", "data-layer": row.name, title: `${row.candidate}: the kernel this layer runs, or switches to` });
    // grouped by device: each kernel once per device, this machine's first; one that cannot be chosen
    // on several devices for one reason comes once, its devices together ("cuda, rocm, xpu")
    // (layer_table.picker_candidates)
    const groups = new Map();
    for (const option of row.candidates) {
      const device = option.device || "";
      if (!groups.has(device)) {
        const group = el("optgroup", { label: device ? `${device.includes(",") ? "devices" : "device"}: ${device}` : "" });
        groups.set(device, group);
        select.append(group);
      }
      const item = el("option", { value: option.label, text: option.usable ? option.short : `${option.short} (${option.state})`, title: [option.reason, option.trust].filter(Boolean).join("\n") });
      item.disabled = !option.usable;
      item.selected = option.label === row.candidate;
      groups.get(device).append(item);
    }
    select.disabled = busy.has(row.name);
    select.addEventListener("change", () => send(row.name, { type: "choose", candidate: select.value }));
    return select;
  }

  function draw() {
    const rows = model.get("rows") || [];
    const table = el("table", { class: "kx-table" });
    // the columns' widths, fixed (layer_table.css: table-layout fixed): the same on every render
    table.append(el("colgroup", {}, el("col", { style: "width: 2.5em" }), el("col", { style: "width: 22%" }),
      el("col", { style: "width: 6em" }), el("col", { style: "width: 40%" }), el("col", {})));
    table.append(el("thead", {}, el("tr", {},
      el("th", { text: "on" }), el("th", { text: "layer" }), el("th", { text: "instances" }),
      el("th", { text: "available" }), el("th", { text: "runs now" }))));
    const body = el("tbody");
    // the user's own candidates (a peer, an attention repository), each with its state and reason
    const given = (row) => (row.given || []).map((option) => el("div", { class: "kx-given", title: option.reason },
      el("span", { class: `kx-badge kx-state-${option.state_key}`, text: option.state }),
      el("small", { text: ` ${option.short} [${option.source}]: ${option.reason.split("\n")[0]}` })));
    // the picked candidate's publisher, signature, digest and lock; each sentence on hover
    const trust = (row) => (row.trust ? [el("div", { class: "kx-trust", title: row.trust_title || "" }, el("small", { text: row.trust }))] : []);
    // a kernel the user named runs although its values are wrong here: said in that state's colour
    const runsCell = (row, working) => {
      const text = working ? "switching…" : undelivered.has(row.name) ? "not delivered: the kernel is gone" : row.runs;
      const cell = el("td", { class: "kx-runs", "data-layer": row.name, text, title: row.runs_title || "" });
      if (row.warning && !working) {
        cell.append(el("div", {}, el("span", { class: `kx-badge kx-state-${row.warning_key}`, title: row.warning, text: "wrong results here" })));
      }
      return cell;
    };
    for (const row of rows) {
      const switchBox = el("input", { type: "checkbox", class: "kx-layer-switch", "data-layer": row.name });
      switchBox.checked = row.on_count > 0 && row.on_count === row.count;
      switchBox.indeterminate = row.on_count > 0 && row.on_count < row.count;
      const working = busy.has(row.name);
      switchBox.disabled = working || (!row.usable && row.on_count === 0);
      switchBox.addEventListener("change", () => toggle(row.name, switchBox.checked));
      const expand = el("button", { class: "kx-expand", "data-layer": row.name, text: open.has(row.name) ? "▾" : "▸" });
      expand.addEventListener("click", () => {
        open.has(row.name) ? open.delete(row.name) : open.add(row.name);
        draw();
      });
      const badge = el("span", { class: `kx-badge kx-state-${row.state_key}`, title: row.reason, text: row.state });
      body.append(el("tr", { class: working ? "kx-row kx-busy" : "kx-row", "data-layer": row.name },
        el("td", {}, switchBox),
        el("td", {}, expand, el("b", { text: ` ${row.name}` }), el("div", { class: "kx-original", text: row.added ? `${row.original} (added by you)` : row.original })),
        el("td", { text: `${row.on_count}/${row.count}` }),
        el("td", {}, badge, picker(row), ...trust(row), ...given(row)),
        runsCell(row, working)));
      if (open.has(row.name)) {
        for (const instance of row.instances) {
          const box = el("input", { type: "checkbox", class: "kx-instance-switch", "data-layer": row.name, "data-instance": instance.path });
          box.checked = instance.on;
          box.disabled = working;
          box.addEventListener("change", () => toggle(row.name, box.checked, instance.path));
          body.append(el("tr", { class: "kx-instance" },
            el("td", {}, box), el("td", { colspan: "3", text: instance.path }),
            el("td", { text: instance.runs, title: instance.reason || "" })));
        }
      }
    }
    table.append(body);
    if (unlinked) for (const control of table.querySelectorAll("input, select, button")) control.disabled = true;
    root.replaceChildren(table);
  }

  model.on("change:rows", draw);
  draw();
  const stopWatching = () => document.removeEventListener("kx-link-lost", onLinkLost);

  // (the live plots fit their boxes themselves: widgets/live_plot.js watches each one's size; a
  // window "resize" sent from here every second relaid out the whole page)
  return stopWatching;
}

export default { render };
