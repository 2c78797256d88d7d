// Gale web UI: debugging actions (Storm UI's profiling and debugging, dynamic log level, event
// inspector). Topology and supervisor pages: per worker, its log, a thread dump and a CPU profile
// (py-spy flame graph); topology page: timed log levels and sampling for every component;
// component page: sampling of that component and the sampled tuples. Every action needs the API
// token when nimbus has one (asked for here, kept for the browser session).
"use strict";

(function () {
  const G = window.Gale;
  const built = {};

  function tokenField() {
    const input = G.el("input", { type: "password", id: "debug-token", autocomplete: "off", placeholder: "API token (if set)" });
    input.value = G.token();
    input.addEventListener("change", () => sessionStorage.setItem("gale.token", input.value));
    return G.el("label", {}, "API token ", input);
  }

  function output(id) { return G.el("div", { id: id, cls: "debug-output", hidden: "" }); }

  function show(id, ...nodes) {
    const box = G.$(id);
    box.replaceChildren(...nodes);
    box.hidden = false;
  }

  async function act(statusId, label, fn) {
    const status = G.$(statusId);
    status.textContent = label + "…";
    status.className = "muted";
    try {
      const result = await fn();
      status.textContent = "";
      return result;
    } catch (e) {
      status.textContent = e.message + (e.status === 401 ? " — enter the API token" : "");
      status.className = "error";
      return null;
    }
  }

  async function svgImage(supervisor, file) {
    const headers = {};
    if (G.token()) headers["Authorization"] = "Bearer " + G.token();
    const resp = await fetch("/api/v1/supervisor/" + G.enc(supervisor) + "/log/raw?file=" + G.enc(file),
                             { headers: headers, cache: "no-store" });
    if (!resp.ok) throw new Error("HTTP " + resp.status + " reading the flame graph");
    const url = URL.createObjectURL(new Blob([await resp.blob()], { type: "image/svg+xml" }));
    return G.el("img", { src: url, alt: "flame graph", cls: "flamegraph", id: "flamegraph" });
  }

  function logsHref(supervisor, file) {
    return "/logs.html?supervisor=" + G.enc(supervisor) + "&file=" + G.enc(file);
  }

  // ---------------------------------------------------------------- workers: dump, profile, logs

  function workerActions(workers) {
    const secs = () => Math.round(Number(G.$("profile-secs").value) || 10);
    G.table("worker-actions", [
      ["Worker", (w) => w.host + ":" + w.port], ["Supervisor", (w) => G.supervisorLink(w.supervisorId)],
      ["Topology", (w) => w.topologyName || ""],
      ["Components", (w) => Object.keys(w.componentNumTasks || {}).join(", ")], ["PID", (w) => w.pid],
      ["Actions", (w) => {
        if (!w.running) return "not running";
        const box = G.el("span", { cls: "row-actions" });
        const logs = G.link(logsHref(w.supervisorId, w.logFile || ""), "Logs");
        const dump = G.el("button", { type: "button", "data-action": "threaddump", "data-port": String(w.port) }, "Thread dump");
        const prof = G.el("button", { type: "button", "data-action": "profile", "data-port": String(w.port) }, "Profile");
        dump.addEventListener("click", () => threadDump(w));
        prof.addEventListener("click", () => profile(w, secs()));
        box.append(logs, " ", dump, prof);
        return box;
      }]], workers, "no workers");
  }

  async function threadDump(w) {
    const r = await act("worker-status", "taking a thread dump of " + w.host + ":" + w.port, () =>
      G.api("POST", "/api/v1/supervisor/" + G.enc(w.supervisorId) + "/workers/" + w.port + "/threaddump", {}));
    if (!r) return;
    show("worker-output", G.el("p", {}, "Thread dump of worker " + w.host + ":" + w.port + " (pid " + r.pid + ", "
      + r.threads + " threads), saved as ", G.link(logsHref(r.supervisor, r.file), r.file)),
      G.el("pre", { id: "threaddump-text", text: r.text }));
  }

  async function profile(w, secs) {
    const r = await act("worker-status", "profiling " + w.host + ":" + w.port + " for " + secs + " s", () =>
      G.api("POST", "/api/v1/supervisor/" + G.enc(w.supervisorId) + "/workers/" + w.port + "/profile",
            { duration_secs: secs, rate: 100 }));
    if (!r) return;
    const img = await act("worker-status", "loading the flame graph", () => svgImage(r.supervisor, r.file));
    show("worker-output", G.el("p", {}, "CPU profile of worker " + w.host + ":" + w.port + " (pid " + r.pid + "): "
      + r.samples + " samples over " + r.durationSecs + " s, saved as ", G.link(logsHref(r.supervisor, r.file), r.file)),
      img || "");
  }

  function buildWorkerBox(box) {
    box.append(G.el("div", { cls: "debug-box" }, tokenField(),
      G.el("label", {}, "Profile for ", G.el("input", { type: "number", id: "profile-secs", min: "1", max: "60", value: "10" }),
           " s (py-spy, 100 samples/s)"),
      G.el("span", { id: "worker-status", cls: "muted" })),
      G.el("div", { id: "worker-actions" }), output("worker-output"));
  }

  // ---------------------------------------------------------------- log levels (topology)

  function buildLogLevels(box, topo) {
    const level = G.el("select", { id: "loglevel-level" },
      ...["DEBUG", "INFO", "WARNING", "ERROR"].map((l) => G.el("option", { value: l, text: l })));
    const comps = (topo.spouts || []).map((s) => s.spoutId).concat((topo.bolts || []).map((b) => b.boltId));
    const scope = G.el("select", { id: "loglevel-component" }, G.el("option", { value: "", text: "all workers" }),
      ...comps.map((c) => G.el("option", { value: c, text: "workers running " + c })));
    const set = G.el("button", { type: "button", id: "loglevel-set" }, "Set");
    set.addEventListener("click", () => setLevel(topo.id));
    box.append(G.el("div", { cls: "debug-box" },
      G.el("label", {}, "Logger ", G.el("input", { type: "text", id: "loglevel-logger", value: "ROOT", size: "18" })),
      G.el("label", {}, "level ", level), G.el("label", {}, "for ", G.el("input", { type: "number", id: "loglevel-timeout",
        min: "1", max: "86400", value: "300" }), " s on "), scope, set, G.el("span", { id: "loglevel-status", cls: "muted" })),
      G.el("div", { id: "loglevels" }));
  }

  async function setLevel(tid, logger, clear) {
    const name = logger || G.$("loglevel-logger").value.trim();
    const entry = clear ? { target_level: "", timeout: 0 } : {
      target_level: G.$("loglevel-level").value, timeout: Math.round(Number(G.$("loglevel-timeout").value)),
      components: G.$("loglevel-component").value ? [G.$("loglevel-component").value] : [] };
    const r = await act("loglevel-status", "setting " + name, () =>
      G.api("POST", "/api/v1/topology/" + G.enc(tid) + "/logconfig", { namedLoggerLevels: { [name]: entry } }));
    if (r) renderLevels(tid, r);
  }

  function renderLevels(tid, config) {
    const rows = Object.entries(config.namedLoggerLevels || {});
    G.table("loglevels", [["Logger", ([n]) => n], ["Level", ([, e]) => e.target_level],
      ["Workers", ([, e]) => e.components.length ? "running " + e.components.join(", ") : "all"],
      ["Reverts in", ([, e]) => e.timeout + " s", "num"],
      ["", ([n]) => { const b = G.el("button", { type: "button", "data-logger": n }, "Clear");
                      b.addEventListener("click", () => setLevel(tid, n, true)); return b; }]], rows, "no log levels set");
  }

  // ---------------------------------------------------------------- sampling

  function buildSampling(box, path, what) {
    const enable = G.el("button", { type: "button", id: "sampling-enable" }, "Enable");
    const disable = G.el("button", { type: "button", id: "sampling-disable" }, "Disable");
    const pct = G.el("input", { type: "number", id: "sampling-pct", min: "0.01", max: "100", step: "any", value: "10" });
    enable.addEventListener("click", () => setSampling(path, "enable", pct.value));
    disable.addEventListener("click", () => setSampling(path, "disable", "0"));
    box.append(G.el("div", { cls: "debug-box" }, G.el("span", { id: "sampling-state" }),
      G.el("label", {}, "Sample ", pct, " % of " + what + " emits "), enable, disable,
      G.el("span", { id: "sampling-status", cls: "muted" })));
  }

  async function setSampling(path, action, pct) {
    const r = await act("sampling-status", action + " sampling", () => G.api("POST", path + "/debug/" + action + "/" + G.enc(pct), {}));
    if (r) G.refresh();
  }

  function samplingState(debug, pct) {
    const s = G.$("sampling-state");
    s.textContent = debug ? "sampling " + pct + " % of emits" : "sampling off";
    s.dataset.sampling = debug ? String(pct) : "0";
  }

  function renderEvents(result) {
    const events = result.events.slice().reverse();
    G.table("sampled-events", [["Time", (e) => new Date(e.ts * 1000).toLocaleTimeString()], ["Stream", (e) => e.stream],
      ["Values", (e) => e.fields.map((f, i) => f + "=" + JSON.stringify(e.values[i])).join("  ")],
      ["Worker", (e) => e.host + ":" + e.port]], events,
      result.sampling ? "no tuple sampled yet" : "sampling is off: enable it to see the tuples this component emits");
    G.$("sampled-events").dataset.events = String(events.length);
  }

  // ---------------------------------------------------------------- pages

  G.on("topology", async (topo) => {
    if (!built.topology) {
      const box = G.$("debug-box");
      box.append(G.el("h3", { text: "Workers" }));
      buildWorkerBox(box);
      box.append(G.el("h3", { text: "Log levels (for a time, then back)" }));
      buildLogLevels(box, topo);
      box.append(G.el("h3", { text: "Event sampling (every component)" }));
      buildSampling(box, "/api/v1/topology/" + G.enc(topo.id), "every component's");
      built.topology = true;
    }
    workerActions(topo.workers.map((w) => Object.assign({ topologyName: topo.name }, w)));
    samplingState(topo.debug, topo.samplingPct);
    renderLevels(topo.id, await G.api("GET", "/api/v1/topology/" + G.enc(topo.id) + "/logconfig"));
  });

  G.on("supervisor", async (data) => {
    if (!built.supervisor) {
      buildWorkerBox(G.$("debug-box"));
      built.supervisor = true;
    }
    workerActions(data.workers);
    const id = data.supervisors.length ? data.supervisors[0].id : null;
    if (id) G.$("supervisor-log-link").href = logsHref(id, "supervisor.log");
  });

  G.on("component", async (c) => {
    const path = "/api/v1/topology/" + G.enc(c.topologyId) + "/component/" + G.enc(c.id);
    if (!built.component) {
      const box = G.$("sampling-box");
      buildSampling(box, path, "this component's");
      box.append(G.el("div", { id: "sampled-events" }));
      built.component = true;
    }
    samplingState(c.debug, c.samplingPct);
    renderEvents(await G.api("GET", path + "/events?limit=50"));
  });
})();
