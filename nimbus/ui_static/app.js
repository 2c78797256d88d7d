// Gale web UI: renders Storm's REST API (/api/v1/...) and refreshes it in place.
// No framework and no external resources. Every value reaches the page through textContent.
"use strict";

(function () {
  const params = new URLSearchParams(location.search);
  const REFRESH_MS = Math.max(500, (Number(params.get("refresh")) || 3) * 1000);
  const WINDOWS = [["600", "10m"], ["10800", "3h"], ["86400", "1d"], [":all-time", "all time"]];
  const state = { refreshes: 0, busy: false, chart: null, topology: null };

  // ------------------------------------------------------------------ HTTP

  function token() { return sessionStorage.getItem("gale.token") || ""; }

  async function api(method, path, body) {
    const headers = { "Accept": "application/json" };
    if (token()) headers["Authorization"] = "Bearer " + token();
    const init = { method: method, headers: headers, cache: "no-store" };
    if (body !== undefined || method !== "GET") {
      // nimbus refuses actions without this content type (no cross-site form can send it)
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body === undefined ? {} : body);
    }
    const resp = await fetch(path, init);
    let data = null;
    try { data = await resp.json(); } catch (e) { data = null; }
    if (!resp.ok) {
      const err = new Error((data && data.error) || ("HTTP " + resp.status + " from nimbus"));
      err.status = resp.status;
      throw err;
    }
    return data;
  }

  // ------------------------------------------------------------------ DOM helpers

  function el(tag, attrs) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === "text") node.textContent = String(v);
      else if (k === "cls") node.className = v;
      else node.setAttribute(k, v);
    }
    for (let i = 2; i < arguments.length; i++) {
      const child = arguments[i];
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function link(href, text) { return el("a", { href: href, text: text }); }
  function $(id) { return document.getElementById(id); }
  function enc(s) { return encodeURIComponent(s); }
  function num(n) { return n === null || n === undefined ? "" : Number(n).toLocaleString("en-US"); }
  function firstLine(text) {
    const lines = String(text || "").trim().split("\n");
    return lines[lines.length - 1] || "";
  }
  function when(secs) { return secs ? new Date(secs * 1000).toLocaleString() : ""; }

  // columns: [title, value(row) -> string|Node, className?]
  function table(id, columns, rows, emptyText) {
    const t = el("table", { "data-rows": rows.length });
    const head = el("tr");
    for (const [title] of columns) head.append(el("th", { text: title }));
    t.append(el("thead", {}, head));
    const body = el("tbody");
    for (const row of rows) {
      const tr = el("tr");
      for (const [title, value, cls] of columns) {
        const v = value(row);
        const td = el("td", { "data-col": title, cls: typeof cls === "function" ? cls(row) : cls });
        td.append(v instanceof Node ? v : document.createTextNode(v === undefined || v === null ? "" : String(v)));
        tr.append(td);
      }
      body.append(tr);
    }
    if (!rows.length) body.append(el("tr", {}, el("td", { colspan: columns.length, cls: "muted", text: emptyText || "none" })));
    t.append(body);
    $(id).replaceChildren(t);
  }

  function keyValues(id, pairs) {
    table(id, pairs.map(([title, value]) => [title, () => value]), [{}]);
  }

  function banner(message) {
    const b = $("banner");
    if (message) { b.textContent = message; b.hidden = false; } else { b.hidden = true; }
  }

  function windowLinks(current) {
    const box = $("windows");
    if (!box) return;
    const nodes = [el("span", { cls: "muted", text: "window: " })];
    for (const [w, label] of WINDOWS) {
      const p = new URLSearchParams(location.search);
      p.set("window", w);
      nodes.push(w === current ? el("strong", { text: label }) : link("?" + p.toString(), label), " ");
    }
    box.replaceChildren(...nodes);
  }

  function setHints(hint) {
    for (const n of document.querySelectorAll(".window-hint")) n.textContent = "(" + hint + ")";
  }

  // ------------------------------------------------------------------ live chart

  class LiveChart {
    constructor(box) {
      this.points = [];
      this.raw = [];
      this.max = 90;
      const ns = "http://www.w3.org/2000/svg";
      this.ns = ns;
      this.svg = document.createElementNS(ns, "svg");
      this.svg.setAttribute("id", "chart");
      this.svg.setAttribute("viewBox", "0 0 720 280");
      this.svg.setAttribute("role", "img");
      this.svg.setAttribute("aria-label", "tuples per second and complete latency");
      this.svg.dataset.points = "0";
      box.replaceChildren(this.svg);
      this.series = [
        { key: "acked", label: "acked/s", color: "#2a7d2a", panel: 0 },
        { key: "emitted", label: "emitted/s", color: "#3465a4", panel: 0 },
        { key: "failed", label: "failed/s", color: "#c4302b", panel: 0 },
        { key: "latency", label: "complete latency ms", color: "#9a6a00", panel: 1 },
      ];
      this.panels = [{ top: 24, height: 150 }, { top: 200, height: 60 }];
      this.draw();
    }

    // totals: the :all-time topologyStats entry (cumulative counts, weighted mean latency). Rates
    // are taken over the last few seconds of samples: workers report their counters every few
    // seconds, so the change between two consecutive polls alternates between 0 and a burst.
    add(totals, atMs) {
      const cur = { t: atMs, emitted: totals.emitted, acked: totals.acked, failed: totals.failed,
                    latency: Number(totals.completeLatency) };
      const span = Math.max(6000, 3 * REFRESH_MS);
      this.raw.push(cur);
      while (this.raw.length > 2 && cur.t - this.raw[1].t >= span) this.raw.shift();
      const old = this.raw[0];
      const dt = (cur.t - old.t) / 1000;
      if (this.raw.length > 1 && dt > 0) {
        const rate = (k) => Math.max(0, (cur[k] - old[k]) / dt);
        const dA = cur.acked - old.acked;
        let latency = null;
        if (dA > 0) latency = Math.max(0, (cur.latency * cur.acked - old.latency * old.acked) / dA);
        this.points.push({ t: cur.t, emitted: rate("emitted"), acked: rate("acked"), failed: rate("failed"),
                           latency: latency });
        if (this.points.length > this.max) this.points.shift();
      }
      this.draw();
    }

    draw() {
      const ns = this.ns, svg = this.svg, W = 720, left = 56, right = 12;
      svg.replaceChildren();
      svg.dataset.points = String(this.points.length);
      const last = this.points[this.points.length - 1];
      svg.dataset.lastAckedRate = last ? last.acked.toFixed(3) : "";
      const text = (x, y, s, color, anchor) => {
        const t = document.createElementNS(ns, "text");
        t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("font-size", "11");
        t.setAttribute("fill", color || "#555"); if (anchor) t.setAttribute("text-anchor", anchor);
        t.textContent = s; svg.append(t);
      };
      let lx = left;
      for (const s of this.series) { text(lx, 12, "■ " + s.label, s.color); lx += 150; }
      this.panels.forEach((panel, i) => {
        const series = this.series.filter((s) => s.panel === i);
        let max = 0;
        for (const p of this.points) for (const s of series) if (p[s.key] !== null) max = Math.max(max, p[s.key]);
        max = max > 0 ? max * 1.1 : 1;
        const frame = document.createElementNS(ns, "rect");
        frame.setAttribute("x", left); frame.setAttribute("y", panel.top);
        frame.setAttribute("width", W - left - right); frame.setAttribute("height", panel.height);
        frame.setAttribute("fill", "#fafafa"); frame.setAttribute("stroke", "#ccc");
        svg.append(frame);
        text(left - 4, panel.top + 10, formatValue(max), "#555", "end");
        text(left - 4, panel.top + panel.height, "0", "#555", "end");
        const step = (W - left - right) / Math.max(1, this.max - 1);
        for (const s of series) {
          let d = "";
          this.points.forEach((p, j) => {
            if (p[s.key] === null) return;
            const x = left + j * step;
            const y = panel.top + panel.height - (p[s.key] / max) * panel.height;
            d += (d ? " L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
          });
          if (!d) continue;
          const path = document.createElementNS(ns, "path");
          path.setAttribute("d", d); path.setAttribute("fill", "none");
          path.setAttribute("stroke", s.color); path.setAttribute("stroke-width", "2");
          path.setAttribute("data-series", s.key);
          svg.append(path);
        }
      });
      text(W - right, 278, this.points.length ? "last " + this.points.length + " samples, every "
           + (REFRESH_MS / 1000) + " s" : "waiting for samples…", "#777", "end");
    }
  }

  function formatValue(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return v >= 10 ? v.toFixed(0) : v.toFixed(2);
  }

  // ------------------------------------------------------------------ actions

  const ACTIONS = {
    activate: { label: "Activate", enabled: (s) => s === "INACTIVE", text: "Activate the spouts of" },
    deactivate: { label: "Deactivate", enabled: (s) => s === "ACTIVE", text: "Deactivate the spouts of" },
    rebalance: { label: "Rebalance", enabled: (s) => s === "ACTIVE" || s === "INACTIVE",
                 text: "Pause the spouts, then re-plan", wait: true, workers: true },
    kill: { label: "Kill", enabled: (s) => s !== "KILLED", text: "Kill (spouts stop now, workers go after the wait)",
            wait: true },
  };

  // the buttons are made once and only their state changes on refresh, so a click is never lost
  // to a re-render; the dialog acts on the latest topology seen
  function renderActions(topo) {
    state.topology = topo;
    const box = $("actions");
    if (!box.children.length) {
      box.replaceChildren(...Object.entries(ACTIONS).map(([name, a]) => {
        const b = el("button", { type: "button", id: "action-" + name, "data-action": name,
                                 cls: name === "kill" ? "danger" : "" }, a.label);
        b.addEventListener("click", () => confirmAction(name, state.topology));
        return b;
      }));
    }
    for (const [name, a] of Object.entries(ACTIONS)) $("action-" + name).disabled = !a.enabled(topo.status);
  }

  function confirmAction(name, topo) {
    const a = ACTIONS[name];
    const dialog = $("confirm");
    $("confirm-title").textContent = a.label + " " + topo.name + "?";
    $("confirm-text").textContent = a.text + " " + topo.name + " (" + topo.id + ").";
    const fields = [];
    if (a.wait) {
      fields.push(el("label", {}, "Wait (seconds) ",
        el("input", { type: "number", id: "confirm-wait", min: "0", max: "86400", value: String(topo.msgTimeout) })));
    }
    if (a.workers) {
      fields.push(el("label", {}, " Workers ",
        el("input", { type: "number", id: "confirm-workers", min: "1", max: "10000", value: String(topo.workersTotal || 1) })));
      // per component: Storm's executor count, and Gale's task count (keyed state moves with it)
      const comps = (topo.spouts || []).map((c) => [c.spoutId, c]).concat((topo.bolts || []).map((c) => [c.boltId, c]));
      const count = (id, value) => el("input", { type: "number", id: id, min: "1", max: "100000", value: String(value),
                                                 "data-initial": String(value) });
      fields.push(el("table", { id: "confirm-components" },
        el("tr", {}, el("th", { text: "Component" }), el("th", { text: "Executors" }), el("th", { text: "Tasks" })),
        ...comps.map(([id, c]) => el("tr", { "data-component": id }, el("td", { text: id }),
          el("td", {}, count("confirm-executors-" + id, c.executors)), el("td", {}, count("confirm-tasks-" + id, c.tasks))))));
    }
    $("confirm-fields").replaceChildren(...fields);
    $("confirm-error").hidden = true;
    $("token-row").hidden = !token();
    $("token-input").value = token();
    $("confirm-ok").onclick = () => runAction(name, topo);
    $("confirm-cancel").onclick = () => dialog.close();
    dialog.showModal();
  }

  async function runAction(name, topo) {
    const errBox = $("confirm-error");
    const tokenValue = $("token-input").value;
    if (tokenValue) sessionStorage.setItem("gale.token", tokenValue);
    let path = "/api/v1/topology/" + enc(topo.id) + "/" + name;
    let body;
    if (ACTIONS[name].wait) {
      const wait = Number($("confirm-wait").value);
      if (!Number.isInteger(wait) || wait < 0) { errBox.textContent = "wait must be a whole number of seconds ≥ 0"; errBox.hidden = false; return; }
      path += "/" + wait;
    }
    if (name === "rebalance") {
      const workers = Number($("confirm-workers").value);
      if (!Number.isInteger(workers) || workers < 1) { errBox.textContent = "workers must be a whole number ≥ 1"; errBox.hidden = false; return; }
      const options = { numWorkers: workers, executors: {}, tasks: {} };
      for (const row of document.querySelectorAll("#confirm-components tr[data-component]")) {
        const id = row.getAttribute("data-component");
        for (const [kind, input] of [["executors", $("confirm-executors-" + id)], ["tasks", $("confirm-tasks-" + id)]]) {
          const v = Number(input.value);
          if (!Number.isInteger(v) || v < 1) { errBox.textContent = kind + " of " + id + " must be a whole number ≥ 1"; errBox.hidden = false; return; }
          if (String(v) !== input.getAttribute("data-initial")) options[kind][id] = v;  // only what changed
        }
      }
      body = { rebalanceOptions: options };
    }
    $("confirm-ok").disabled = true;
    try {
      const result = await api("POST", path, body);
      $("confirm").close();
      $("action-result").textContent = result.topologyOperation + " " + result.topologyId + ": " + result.status
        + " at " + new Date().toLocaleTimeString();
      refresh();
    } catch (e) {
      errBox.textContent = e.message;
      errBox.hidden = false;
      if (e.status === 401) $("token-row").hidden = false;
    } finally {
      $("confirm-ok").disabled = false;
    }
  }

  // ------------------------------------------------------------------ pages

  function errorCell(row) {
    if (!row.lastError) return "";
    return el("span", { title: row.lastError }, firstLine(row.lastError));
  }

  function errorPlace(row) { return row.errorHost ? row.errorHost + ":" + row.errorPort : ""; }

  function capacityClass(row) { return Number(row.capacity) > 0.8 ? "num warn" : "num"; }

  function badge(status) { return el("span", { cls: "status", "data-status": status, text: status }); }

  function supervisorLink(id, text) { return id ? link("/supervisor.html?id=" + enc(id), text || id) : ""; }

  // a worker's or executor's log in the log viewer (logs.html), else its path on its host
  function logCell(row, pathField, linkField) {
    const path = row[pathField] || "";
    const href = row[linkField || "logViewerLink"];
    return href ? el("a", { href: href, cls: "log-link" }, el("code", { text: path || "log" })) : el("code", { text: path });
  }

  // what the other scripts (graph.js, debug.js, logs.js) add to a page: hooks[page] run after it rendered
  const hooks = {};
  window.Gale = {
    api: api, el: el, link: link, $: $, enc: enc, num: num, when: when, firstLine: firstLine, table: table,
    keyValues: keyValues, formatValue: formatValue, banner: banner, token: token, params: params,
    refreshMs: REFRESH_MS, logCell: logCell, supervisorLink: supervisorLink,
    on(page, hook) { (hooks[page] = hooks[page] || []).push(hook); },
    refresh() { return refresh(); },
  };

  async function runHooks(page, data) {
    for (const hook of hooks[page] || []) await hook(data);
  }

  const pages = {
    async cluster() {
      const [cluster, nimbuses, topologies, supervisors] = await Promise.all([
        api("GET", "/api/v1/cluster/summary"), api("GET", "/api/v1/nimbus/summary"),
        api("GET", "/api/v1/topology/summary"), api("GET", "/api/v1/supervisor/summary")]);
      keyValues("cluster-summary", [["Version", cluster.stormVersion], ["Supervisors", cluster.supervisors],
        ["Topologies", cluster.topologies], ["Slots", cluster.slotsTotal], ["Used slots", cluster.slotsUsed],
        ["Free slots", cluster.slotsFree], ["Executors", num(cluster.executorsTotal)], ["Tasks", num(cluster.tasksTotal)]]);
      table("nimbus-summary", [["Host", (n) => n.host], ["Port", (n) => n.port], ["Status", (n) => n.status],
        ["Version", (n) => n.version], ["Uptime", (n) => n.nimbusUpTime]], nimbuses.nimbuses);
      table("topology-summary", [
        ["Name", (t) => link("/topology.html?id=" + enc(t.id), t.name)], ["Id", (t) => t.id],
        ["Status", (t) => badge(t.status)], ["Uptime", (t) => t.uptime], ["Workers", (t) => t.workersTotal, "num"],
        ["Executors", (t) => t.executorsTotal, "num"], ["Tasks", (t) => t.tasksTotal, "num"],
        ["Replication", (t) => t.replicationCount, "num"]], topologies.topologies, "no topologies");
      table("supervisor-summary", [
        ["Id", (s) => supervisorLink(s.id)], ["Host", (s) => s.host], ["Uptime", (s) => s.uptime],
        ["Slots", (s) => s.slotsTotal, "num"], ["Used slots", (s) => s.slotsUsed, "num"],
        ["Free slots", (s) => s.slotsFree, "num"], ["Metrics port", (s) => s.metricsPort, "num"],
        ["Version", (s) => s.version]], supervisors.supervisors, "no live supervisors");
    },

    async topology() {
      const id = params.get("id");
      if (!id) throw new Error("no topology id: open /topology.html?id=<topology id>");
      const windowParam = params.get("window") || ":all-time";
      const sys = params.get("sys") || "0";
      const topo = await api("GET", "/api/v1/topology/" + enc(id) + "?window=" + enc(windowParam) + "&sys=" + enc(sys));
      document.title = topo.name + " · Gale";
      $("topology-name").textContent = topo.name;
      const status = $("topology-status");
      status.textContent = topo.status;
      status.dataset.status = topo.status;
      keyValues("topology-summary", [["Name", topo.name], ["Id", topo.id], ["Owner", topo.owner], ["Status", topo.status],
        ["Uptime", topo.uptime], ["Workers", topo.workersTotal], ["Executors", topo.executorsTotal],
        ["Running executors", topo.executorsRunning], ["Tasks", topo.tasksTotal],
        ["Message timeout (s)", topo.msgTimeout], ["Replication", topo.replicationCount]]);
      const cp = topo.checkpoints;
      $("checkpoints-box").hidden = !cp;
      if (cp) {
        keyValues("topology-checkpoints", [["Last committed txid", cp.txid], ["Checkpoints committed", num(cp.committed)],
          ["Last commit", cp.lastCommitAgeSecs === null ? "never" : cp.lastCommitAgeSecs + " s ago"],
          ["Last duration (ms)", cp.lastDurationMs], ["Failures", num(cp.failures)],
          ["State bytes written", num(cp.stateBytesWritten)]]);
      }
      renderActions(topo);
      windowLinks(windowParam);
      setHints(topo.windowHint);
      table("topology-stats", [["Window", (w) => w.windowPretty], ["Emitted", (w) => num(w.emitted), "num"],
        ["Transferred", (w) => num(w.transferred), "num"], ["Complete latency (ms)", (w) => w.completeLatency, "num"],
        ["Acked", (w) => num(w.acked), "num"], ["Failed", (w) => num(w.failed), "num"]], topo.topologyStats);
      if (!state.chart) state.chart = new LiveChart($("chart-box"));
      const allTime = topo.topologyStats.find((w) => w.window === ":all-time");
      if (allTime) state.chart.add(allTime, Date.now());
      const compLink = (cid) => link("/component.html?topology_id=" + enc(topo.id) + "&id=" + enc(cid), cid);
      table("spouts", [["Id", (s) => compLink(s.spoutId)], ["Executors", (s) => s.executors, "num"],
        ["Tasks", (s) => s.tasks, "num"], ["Emitted", (s) => num(s.emitted), "num"],
        ["Transferred", (s) => num(s.transferred), "num"], ["Complete latency (ms)", (s) => s.completeLatency, "num"],
        ["Acked", (s) => num(s.acked), "num"], ["Failed", (s) => num(s.failed), "num"],
        ["Error host:port", errorPlace], ["Last error", errorCell, "error"]], topo.spouts);
      table("bolts", [["Id", (b) => compLink(b.boltId)], ["Executors", (b) => b.executors, "num"],
        ["Tasks", (b) => b.tasks, "num"], ["Emitted", (b) => num(b.emitted), "num"],
        ["Transferred", (b) => num(b.transferred), "num"], ["Capacity (last 10m)", (b) => b.capacity, capacityClass],
        ["Execute latency (ms)", (b) => b.executeLatency, "num"], ["Executed", (b) => num(b.executed), "num"],
        ["Process latency (ms)", (b) => b.processLatency, "num"], ["Acked", (b) => num(b.acked), "num"],
        ["Failed", (b) => num(b.failed), "num"], ["Error host:port", errorPlace], ["Last error", errorCell, "error"]],
        topo.bolts);
      table("workers", [["Host", (w) => w.host], ["Port", (w) => w.port, "num"],
        ["Supervisor", (w) => supervisorLink(w.supervisorId)], ["Uptime", (w) => w.running ? w.uptime : "not running"],
        ["Executors", (w) => w.executorsTotal, "num"],
        ["Components", (w) => Object.entries(w.componentNumTasks).map(([c, n]) => c + " ×" + n).join(", ")],
        ["PID", (w) => w.pid], ["Worker log", (w) => logCell(w, "workerLogPath")]], topo.workers);
      const errors = topo.spouts.map((s) => [s.spoutId, s]).concat(topo.bolts.map((b) => [b.boltId, b]))
        .filter(([, r]) => r.lastError);
      table("errors", [["Component", ([c]) => compLink(c)], ["Time", ([, r]) => when(r.errorTime)],
        ["Host:port", ([, r]) => errorPlace(r)], ["Log", ([, r]) => logCell(r, "errorWorkerLogLink", "errorLogViewerLink")],
        ["Error", ([, r]) => el("details", {}, el("summary", { text: firstLine(r.lastError) }), el("pre", { text: r.lastError }))]],
        errors, "no errors");
      table("topology-config", [["Key", ([k]) => k], ["Value", ([, v]) => JSON.stringify(v)]],
        Object.entries(topo.configuration || {}));
      await runHooks("topology", topo);
    },

    async component() {
      const tid = params.get("topology_id"), cid = params.get("id");
      if (!tid || !cid) throw new Error("open /component.html?topology_id=<topology id>&id=<component>");
      const windowParam = params.get("window") || ":all-time";
      const c = await api("GET", "/api/v1/topology/" + enc(tid) + "/component/" + enc(cid) + "?window=" + enc(windowParam)
        + "&sys=" + enc(params.get("sys") || "0"));
      document.title = c.id + " · " + c.name + " · Gale";
      $("component-name").textContent = c.id;
      keyValues("component-summary", [["Id", c.id], ["Topology", link("/topology.html?id=" + enc(c.topologyId), c.name)],
        ["Type", c.componentType], ["Executors", c.executors], ["Tasks", c.tasks], ["Topology status", c.topologyStatus]]);
      windowLinks(windowParam);
      setHints(c.windowHint);
      if (c.componentType === "spout") {
        table("component-stats", [["Window", (w) => w.windowPretty], ["Emitted", (w) => num(w.emitted), "num"],
          ["Transferred", (w) => num(w.transferred), "num"], ["Complete latency (ms)", (w) => w.completeLatency, "num"],
          ["Acked", (w) => num(w.acked), "num"], ["Failed", (w) => num(w.failed), "num"]], c.spoutSummary);
        $("input-section").hidden = true;
      } else {
        table("component-stats", [["Window", (w) => w.windowPretty], ["Emitted", (w) => num(w.emitted), "num"],
          ["Transferred", (w) => num(w.transferred), "num"], ["Execute latency (ms)", (w) => w.executeLatency, "num"],
          ["Executed", (w) => num(w.executed), "num"], ["Process latency (ms)", (w) => w.processLatency, "num"],
          ["Acked", (w) => num(w.acked), "num"], ["Failed", (w) => num(w.failed), "num"],
          ["Capacity", (w) => w.capacity, capacityClass]], c.boltStats);
        table("input-stats", [["Component", (i) => i.component], ["Stream", (i) => i.stream],
          ["Execute latency (ms)", (i) => i.executeLatency, "num"], ["Executed", (i) => num(i.executed), "num"],
          ["Process latency (ms)", (i) => i.processLatency, "num"], ["Acked", (i) => num(i.acked), "num"],
          ["Failed", (i) => num(i.failed), "num"]], c.inputStats || []);
      }
      table("output-stats", [["Stream", (o) => o.stream], ["Emitted", (o) => num(o.emitted), "num"],
        ["Transferred", (o) => num(o.transferred), "num"]], c.outputStats, "no output");
      const common = [["Id", (e) => e.id], ["Host:port", (e) => e.host ? e.host + ":" + e.port : "unassigned"],
        ["Supervisor", (e) => supervisorLink(e.supervisorId)], ["Uptime", (e) => e.running ? e.uptime : "not running"],
        ["Emitted", (e) => num(e.emitted), "num"], ["Transferred", (e) => num(e.transferred), "num"]];
      const specific = c.componentType === "spout"
        ? [["Complete latency (ms)", (e) => e.completeLatency, "num"], ["Acked", (e) => num(e.acked), "num"],
           ["Failed", (e) => num(e.failed), "num"], ["Pending", (e) => num(e.pending), "num"]]
        : [["Capacity", (e) => e.capacity, capacityClass], ["Execute latency (ms)", (e) => e.executeLatency, "num"],
           ["Executed", (e) => num(e.executed), "num"], ["Process latency (ms)", (e) => e.processLatency, "num"],
           ["Acked", (e) => num(e.acked), "num"], ["Failed", (e) => num(e.failed), "num"]];
      table("executors", common.concat(specific, [["Queue", (e) => num(e.queueDepth), "num"],
        ["Worker log", (e) => logCell(e, "workerLogPath")]]), c.executorStats);
      table("errors", [["Time", (e) => when(e.errorTime)], ["Host:port", (e) => e.errorHost + ":" + e.errorPort],
        ["Log", (e) => logCell(e, "errorWorkerLogLink", "errorLogViewerLink")],
        ["Error", (e) => el("details", {}, el("summary", { text: firstLine(e.error) }), el("pre", { text: e.error }))]],
        c.componentErrors, "no errors");
      await runHooks("component", c);
    },

    async supervisor() {
      const id = params.get("id"), host = params.get("host");
      if (!id && !host) throw new Error("open /supervisor.html?id=<supervisor id> (or ?host=<host>)");
      const q = id ? "id=" + enc(id) : "host=" + enc(host);
      const data = await api("GET", "/api/v1/supervisor?" + q);
      $("supervisor-name").textContent = id || host;
      table("supervisor-summary", [["Id", (s) => s.id], ["Host", (s) => s.host], ["Uptime", (s) => s.uptime],
        ["Slots", (s) => s.slotsTotal, "num"], ["Used slots", (s) => s.slotsUsed, "num"],
        ["Free slots", (s) => s.slotsFree, "num"], ["Ports", (s) => s.ports.join(", ")],
        ["Used ports", (s) => s.usedPorts.join(", ")], ["Metrics port", (s) => s.metricsPort, "num"],
        ["Version", (s) => s.version]], data.supervisors);
      table("workers", [["Topology", (w) => link("/topology.html?id=" + enc(w.topologyId), w.topologyName)],
        ["Port", (w) => w.port, "num"], ["Uptime", (w) => w.running ? w.uptime : "not running"],
        ["Executors", (w) => w.executorsTotal, "num"],
        ["Components", (w) => Object.entries(w.componentNumTasks).map(([c, n]) => c + " ×" + n).join(", ")],
        ["Emitted", (w) => num(w.stats && w.stats.emitted), "num"], ["Acked", (w) => num(w.stats && w.stats.acked), "num"],
        ["PID", (w) => w.pid], ["Worker log", (w) => logCell(w, "workerLogPath")]], data.workers, "no workers");
      await runHooks("supervisor", data);
    },
  };

  pages.logs = async function () { await runHooks("logs", null); };

  async function refresh() {
    if (state.busy) return;
    state.busy = true;
    try {
      await pages[document.body.dataset.page]();
      banner(null);
      state.refreshes += 1;
      document.body.dataset.refreshes = String(state.refreshes);
      $("updated").textContent = "updated " + new Date().toLocaleTimeString() + " · every " + REFRESH_MS / 1000 + " s";
    } catch (e) {
      banner(e.message + (e.status === 401 ? " (set the API token with an action's dialog)" : "") + " — retrying");
    } finally {
      state.busy = false;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    refresh();
    setInterval(refresh, REFRESH_MS);
  });
})();
