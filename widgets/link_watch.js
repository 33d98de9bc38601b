// The dashboard's link to its kernel (views/link_watch.py). A dashboard lives in one kernel: when
// that kernel restarts, dies or drops this page, every click on the old dashboard goes nowhere.
// This view watches for it and, once it happens, turns every control of its dashboard off, dims
// the rest and shows one line saying what happened and what to do.
//
// How the page learns of it:
// - the kernel's status (the widget manager's kernel connection): "restarting" (the Kernel menu),
//   "autorestarting" (the kernel died and the server started another), "starting" (a new kernel
//   process), "dead" (shut down, or a restart that failed); its connection "disconnected";
// - ipywidgets' own signals on this widget's model: "comm_live_update" (the manager marks every
//   model of a restarting kernel as no longer live) and "comm:close" (closed from Python);
// - a restart nobody announced to this page (another tab, the REST API) whose new kernel the page
//   hears from: every message a kernel publishes carries its process's session id, so a message
//   from another session is a new kernel (the new process's "starting" status is often sent before
//   the page's connection reaches it, and then never heard; its next messages are);
// - a restart the page never hears of at all shows at the first click: each
//   click on a control of the dashboard sends this widget a ping; the kernel answers "idle" to
//   every message it takes, and a kernel that takes the ping without a pong does not know this
//   dashboard any more. A click whose message cannot even leave the page (its comm disposed:
//   JupyterLab's "Cannot send") says so at once.
// Other widgets of the dashboard that find their own message undeliverable dispatch "kx-link-lost"
// from inside it; this view hears it and does the rest. It dispatches the same event on the
// dashboard's root when it finds the link gone itself, so the layer table can end its "switching…".

const WHY = {
  restarting: "The kernel restarted",
  autorestarting: "The kernel died and was restarted",
  starting: "The kernel restarted",
  dead: "The kernel is gone (shut down, or it died)",
  disconnected: "The connection to the kernel is lost",
  closed: "This dashboard was closed in Python",
  undelivered: "The kernel was restarted without this page hearing of it",
};

const CONTROLS = "button, input, select, textarea";
const ANSWER_MS = 1000; // a click is said to be waiting (or lost) within this

function render({ model, el }) {
  el.classList.add("kx-link");
  const kernel = model.widget_manager?.kernel ?? null;
  let lostWhy = null;
  let pings = 0;
  let keepOff = null; // the observer that turns off controls drawn after the loss

  const dashboard = () => el.closest(".kx-dashboard");

  function show(text, kind) {
    const line = document.createElement("div");
    line.className = `kx-link-line kx-link-${kind}`;
    line.textContent = text;
    el.replaceChildren(line);
  }

  function switchOff(root) {
    const title = "off: this dashboard's kernel is gone";
    for (const control of root.querySelectorAll(CONTROLS)) {
      if (!control.disabled) control.disabled = true;
      control.title = title;
    }
  }

  function lost(why, click = false) {
    if (lostWhy) return;
    lostWhy = why;
    const again = model.get("again");
    const clicked = click ? " Your click was not delivered." : "";
    show(`⚠ ${WHY[why] || WHY.undelivered}: this dashboard is no longer live, its controls are off.${clicked} ${again}`, "lost");
    const root = dashboard();
    if (!root) return;
    root.classList.add("kx-unlinked");
    switchOff(root);
    // a view redrawn after this (the layer table's rows, an expanded row) brings new controls
    keepOff = new MutationObserver(() => switchOff(root));
    keepOff.observe(root, { childList: true, subtree: true });
    root.dispatchEvent(new CustomEvent("kx-link-lost", { bubbles: true, detail: { why } }));
  }

  // -- the kernel's status, as the page hears it --
  // JupyterLab reports a kernel that died as "restarting", then (a microtask later) "autorestarting":
  // a restart is told once the page has heard which it was
  const restarted = () => setTimeout(() => lost(kernel?.status === "autorestarting" ? "autorestarting" : "restarting"));
  const onStatus = (_, status) => {
    if (status === "restarting") restarted();
    else if (status in WHY) lost(status);
  };
  const onConnection = (_, status) => {
    if (status === "disconnected") lost("disconnected");
  };
  const onDisposed = () => lost("dead");
  // the first session heard is this dashboard's kernel's; another one is a new kernel process
  let session = null;
  const onIopub = (_, message) => {
    const id = message?.header?.session;
    // the server's own status messages ("restarting", "autorestarting", "dead") are in its session,
    // not a kernel's: the status handler above reads them
    const state = message?.content?.execution_state;
    if (!id || state === "restarting" || state === "autorestarting" || state === "dead") return;
    if (session === null) session = id;
    else if (id !== session) lost("starting");
  };
  kernel?.iopubMessage?.connect(onIopub);
  kernel?.statusChanged?.connect(onStatus);
  kernel?.connectionStatusChanged?.connect(onConnection);
  kernel?.disposed?.connect(onDisposed);
  if (kernel?.status === "dead") lost("dead");

  // -- ipywidgets' own signals on this model --
  model.on("comm_live_update", restarted);
  model.on("comm:close", () => lost("closed"));

  // -- a click on the dashboard: a ping that must come back --
  const pongs = new Set();
  model.on("msg:custom", (message) => {
    if (message?.type === "pong") pongs.add(message.n);
  });

  let waiting = false; // a ping out: a click's "change" and "click" ask once, not twice

  function ping(again = false) {
    if (lostWhy || (waiting && !again)) return;
    waiting = true;
    const n = ++pings;
    let taken = false;
    let settled = false;
    const settle = () => {
      settled = true;
      waiting = false;
      if (!lostWhy && el.querySelector(".kx-link-waiting")) el.replaceChildren();
    };
    const status = (message) => {
      const state = message?.content?.execution_state;
      if (state === "busy") taken = true;
      if (state !== "idle" || settled) return;
      // the pong is an earlier message of the same kernel: give the page a moment to handle it
      setTimeout(() => {
        if (pongs.delete(n) || pongs.has(n - 1)) settle();
        // one ping unanswered may be a page too busy to have handled its pong yet (a loaded
        // machine): a second one must go unanswered too before the dashboard is called dead
        else if (!again) ping(true);
        else lost("undelivered", true);
      }, 200);
    };
    try {
      model.send({ type: "ping", n }, { iopub: { status } });
    } catch {
      lost(kernel?.status === "dead" ? "dead" : "undelivered", true); // "Cannot send": the comm is gone
      return;
    }
    setTimeout(() => {
      waiting = false; // the next click asks again
      if (settled || lostWhy || pongs.has(n)) return;
      const busy = !taken && kernel?.status === "busy";
      show(
        busy
          ? "… the kernel is busy with a cell: your click waits for it to finish"
          : "… no answer from the kernel yet: your click waits (a kernel that does not answer may have to be restarted)",
        "waiting",
      );
    }, ANSWER_MS);
  }

  const onInput = (event) => {
    const root = dashboard();
    if (!root || !root.contains(event.target) || !event.target.closest?.(CONTROLS)) return;
    ping();
  };
  const onLost = (event) => {
    const root = dashboard();
    if (root && root.contains(event.target) && event.target !== root) lost(event.detail?.why || "undelivered", event.detail?.click);
  };
  document.addEventListener("click", onInput, true);
  document.addEventListener("change", onInput, true);
  document.addEventListener("kx-link-lost", onLost);

  return () => {
    kernel?.iopubMessage?.disconnect(onIopub);
    kernel?.statusChanged?.disconnect(onStatus);
    kernel?.connectionStatusChanged?.disconnect(onConnection);
    kernel?.disposed?.disconnect(onDisposed);
    document.removeEventListener("click", onInput, true);
    document.removeEventListener("change", onInput, true);
    document.removeEventListener("kx-link-lost", onLost);
    keepOff?.disconnect();
  };
}

export default { render };
