// Gale web UI: the topology graph and its state at a glance (topology page).
// Draws /api/v1/topology/<id>/visualization as SVG: the server places the components (pure
// layout, gale.nimbus.graph_layout); this script turns cumulative counts into live rates between
// polls (as the live chart does) and colours each bolt by its capacity.
"use strict";

(function () {
  const G = window.Gale;
  const NS = "http://www.w3.org/2000/svg";
  const RATE_SPAN_MS = Math.max(6000, 3 * G.refreshMs);
  const TIMELINE_SECS = 300;

  function svgEl(tag, attrs, text) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function short(text, n) { return text.length > n ? text.slice(0, n - 1) + "…" : text; }

  // capacity 0 → green, 0.5 → amber, ≥ 1 → red (Storm UI's colouring by capacity)
  function capacityFill(c) {
    const t = Math.max(0, Math.min(1, c));
    const stops = [[0, [227, 244, 227]], [0.5, [255, 236, 179]], [1, [248, 196, 190]]];
    let i = 0;
    while (i < stops.length - 2 && t > stops[i + 1][0]) i++;
    const [t0, a] = stops[i], [t1, b] = stops[i + 1];
    const f = (t - t0) / (t1 - t0);
    return "rgb(" + a.map((v, k) => Math.round(v + (b[k] - v) * f)).join(",") + ")";
  }

  const KIND_STYLE = {
    spout: { stroke: "#3465a4", dash: null, width: 1.6 },
    "checkpoint spout": { stroke: "#75507b", dash: "5 3", width: 1.8 },
    bolt: { stroke: "#555", dash: null, width: 1.2 },
    "stateful bolt": { stroke: "#2a6f6f", dash: null, width: 1.2, double: true },
    "windowed bolt": { stroke: "#555", dash: "6 3", width: 1.4 },
    "stateful windowed bolt": { stroke: "#2a6f6f", dash: "6 3", width: 1.4, double: true },
    "shell bolt": { stroke: "#555", dash: "2 2", width: 1.6 },
    "Spark stage": { stroke: "#d35400", dash: null, width: 2.6 },
    acker: { stroke: "#999", dash: "1 2", width: 1 },
  };

  function kindStyle(node) { return KIND_STYLE[node.label] || (node.kind === "spout" ? KIND_STYLE.spout : KIND_STYLE.bolt); }

  class TopologyGraph {
    constructor(box) {
      this.box = box;
      this.samples = [];  // [{t, counts: {edgeKey: n}, spouts: {id: emitted}}]
      this.svg = svgEl("svg", { id: "graph", role: "img", "aria-label": "topology graph" });
      this.svg.dataset.draws = "0";
      box.replaceChildren(this.svg);
    }

    static edgeKey(e) { return e.source + "\u0000" + e.stream + "\u0000" + e.target; }

    // tuples/s per edge and emitted/s per spout over the last few seconds of polls
    rates(vis, atMs) {
      const cur = { t: atMs, edges: {}, nodes: {} };
      for (const e of vis.edges) cur.edges[TopologyGraph.edgeKey(e)] = e.executed || e.emitted;
      for (const n of vis.nodes) cur.nodes[n.id] = n.totals.emitted;
      this.samples.push(cur);
      while (this.samples.length > 2 && cur.t - this.samples[1].t >= RATE_SPAN_MS) this.samples.shift();
      const old = this.samples[0];
      const dt = (cur.t - old.t) / 1000;
      const out = { edges: {}, nodes: {}, known: this.samples.length > 1 && dt > 0 };
      if (!out.known) return out;
      for (const [k, v] of Object.entries(cur.edges)) out.edges[k] = Math.max(0, (v - (old.edges[k] || 0)) / dt);
      for (const [k, v] of Object.entries(cur.nodes)) out.nodes[k] = Math.max(0, (v - (old.nodes[k] || 0)) / dt);
      return out;
    }

    draw(vis, atMs, topologyId) {
      const rates = this.rates(vis, atMs);
      const W = vis.nodeWidth, H = vis.nodeHeight, legendH = 46;
      const width = Math.max(vis.width, 640), height = vis.height + legendH + 40;
      const svg = this.svg;
      svg.replaceChildren();
      svg.setAttribute("viewBox", "0 0 " + width + " " + height);
      svg.style.maxWidth = width + "px";
      svg.dataset.nodes = String(vis.nodes.length);
      svg.dataset.edges = String(vis.edges.length);
      svg.dataset.draws = String(Number(svg.dataset.draws) + 1);
      svg.dataset.ratesKnown = rates.known ? "1" : "0";
      const defs = svgEl("defs");
      const marker = svgEl("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "9",
                                       markerHeight: "9", markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" });
      marker.append(svgEl("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#7a7a80" }));
      defs.append(marker);
      svg.append(defs);
      const at = {};
      for (const n of vis.nodes) at[n.id] = n;
      const edgeLayer = svgEl("g", { class: "edges" }), labelLayer = svgEl("g", { class: "edge-labels" });
      for (const e of vis.edges) {
        const a = at[e.source], b = at[e.target];
        if (!a || !b) continue;
        const rate = rates.edges[TopologyGraph.edgeKey(e)];
        let d, lx, ly;
        if (e.back) {  // closes a cycle: drawn under the nodes, right to left
          const x1 = a.x + W / 2, y1 = a.y + H, x2 = b.x + W / 2, y2 = b.y + H, dip = Math.max(y1, y2) + 36;
          d = `M ${x1} ${y1} C ${x1} ${dip}, ${x2} ${dip}, ${x2} ${y2}`;
          lx = (x1 + x2) / 2; ly = dip - 6;
        } else {
          const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x - 2, y2 = b.y + H / 2, dx = Math.max(30, (x2 - x1) / 2);
          d = `M ${x1} ${y1} C ${x1 + dx} ${y1}, ${x2 - dx} ${y2}, ${x2} ${y2}`;
          lx = (x1 + x2) / 2; ly = (y1 + y2) / 2 - 4;
        }
        const widthPx = e.system ? 1 : rate ? Math.min(7, 1.3 + Math.log10(1 + rate)) : 1.3;
        const path = svgEl("path", { d: d, fill: "none", stroke: e.system ? "#b9a6c0" : "#8a8a90",
                                     "stroke-width": widthPx.toFixed(2), "stroke-dasharray": e.system ? "3 3" : null,
                                     "marker-end": "url(#arrow)", "data-source": e.source, "data-target": e.target,
                                     "data-stream": e.stream, "data-rate": rate === undefined ? "" : rate.toFixed(3),
                                     class: e.system ? "edge system" : "edge" });
        path.append(svgEl("title", {}, e.source + " → " + e.target + " (stream " + e.stream + ", " + e.grouping
          + " grouping): " + (rate === undefined ? "measuring…" : G.formatValue(rate) + " tuples/s")));
        edgeLayer.append(path);
        if (e.system) continue;  // the checkpoint stream: no rate label (its path's title has it)
        const label = (e.stream !== "default" ? e.stream + " · " : "") + (rate === undefined ? "…" : G.formatValue(rate) + "/s");
        labelLayer.append(svgEl("text", { x: lx, y: ly, "text-anchor": "middle", class: "edge-label",
                                          "data-source": e.source, "data-target": e.target }, label));
      }
      svg.append(edgeLayer, labelLayer);
      for (const n of vis.nodes) svg.append(this.node(n, W, H, rates, topologyId));
      this.legend(svg, vis.height + 30, width);
    }

    node(n, W, H, rates, topologyId) {
      const style = kindStyle(n);
      const a = svgEl("a", { href: "/component.html?topology_id=" + G.enc(topologyId) + "&id=" + G.enc(n.id),
                             class: "node", "data-component": n.id, "data-kind": n.label,
                             "data-capacity": n.capacity.toFixed(3), "data-backpressure": n.backpressure ? "1" : "0",
                             "data-failed": String(n.failed) });
      const g = svgEl("g", { transform: `translate(${n.x},${n.y})` });
      const spout = n.kind === "spout";
      const fill = spout ? "#e8eefc" : n.label === "acker" ? "#f4f4f6" : capacityFill(n.capacity);
      const rx = spout ? H / 2 : 7;
      if (style.double) g.append(svgEl("rect", { x: -4, y: -4, width: W + 8, height: H + 8, rx: rx + 3,
                                                  fill: "none", stroke: style.stroke, "stroke-width": 1 }));
      g.append(svgEl("rect", { width: W, height: H, rx: rx, fill: fill, stroke: n.failed ? "#c4302b" : style.stroke,
                               "stroke-width": n.failed ? 2.4 : style.width, "stroke-dasharray": style.dash }));
      const pad = spout ? 18 : 10;
      g.append(svgEl("text", { x: pad, y: 19, class: "node-name" }, short(n.id, 21)));
      g.append(svgEl("text", { x: pad, y: 35, class: "node-kind" }, n.label + " ×" + n.executors));
      let figure;
      if (spout) figure = rates.known ? G.formatValue(rates.nodes[n.id] || 0) + " emitted/s" : "measuring…";
      else figure = "capacity " + n.capacity.toFixed(2);
      g.append(svgEl("text", { x: pad, y: 50, class: "node-figure" }, figure));
      if (n.backpressure) {
        g.append(svgEl("rect", { x: W - 32, y: -9, width: 30, height: 17, rx: 8, fill: "#c4302b" }));
        g.append(svgEl("text", { x: W - 17, y: 4, "text-anchor": "middle", class: "badge" }, "BP"));
      }
      if (n.failed) {
        g.append(svgEl("text", { x: W - 8, y: H - 7, "text-anchor": "end", class: "node-failed" }, "✕ " + G.formatValue(n.failed)));
      }
      if (n.running < n.executors) {
        g.append(svgEl("text", { x: W - 8, y: 19, "text-anchor": "end", class: "node-failed" }, n.running + "/" + n.executors));
      }
      const tip = [n.id + " — " + n.label, n.executors + " executors, " + n.tasks + " tasks (" + n.running + " running)"];
      if (!spout) tip.push("capacity " + n.capacity.toFixed(3) + ", execute latency " + n.executeLatency.toFixed(3) + " ms");
      else tip.push("complete latency " + n.completeLatency.toFixed(3) + " ms");
      tip.push("acked " + n.acked + ", failed " + n.failed + " (window)");
      if (n.backpressure) tip.push("backpressure: an input queue holds more than the receive buffer (" + n.queueDepth + " queued)");
      if (n.lastError) tip.push("last error: " + n.lastError);
      a.append(svgEl("title", {}, tip.join("\n")), g);
      return a;
    }

    legend(svg, y, width) {
      const items = [["spout", "spout"], ["checkpoint spout", "checkpoint"], ["bolt", "bolt"], ["stateful bolt", "stateful"],
                     ["windowed bolt", "windowed"], ["shell bolt", "shell"], ["Spark stage", "Spark"]];
      const g = svgEl("g", { class: "legend", transform: `translate(16,${y})` });
      let x = 0;
      for (const [kind, text] of items) {
        const s = KIND_STYLE[kind];
        const spout = kind.endsWith("spout");
        if (s.double) g.append(svgEl("rect", { x: x - 3, y: -3, width: 34, height: 22, rx: 5, fill: "none", stroke: s.stroke }));
        g.append(svgEl("rect", { x: x, y: 0, width: 28, height: 16, rx: spout ? 8 : 4, fill: spout ? "#e8eefc" : "#fff",
                                 stroke: s.stroke, "stroke-width": s.width, "stroke-dasharray": s.dash }));
        g.append(svgEl("text", { x: x + 34, y: 12, class: "legend-text" }, text));
        x += 44 + text.length * 6.5;
      }
      x = 0;
      for (const c of [0, 0.5, 1]) {
        g.append(svgEl("rect", { x: x, y: 24, width: 16, height: 16, rx: 3, fill: capacityFill(c), stroke: "#bbb" }));
        x += 18;
      }
      g.append(svgEl("text", { x: x + 4, y: 36, class: "legend-text" },
        "capacity 0 → 1 · BP: backpressure · ✕ failed (10 min) · edges: tuples/s over the last "
        + RATE_SPAN_MS / 1000 + " s · click a component for its page"));
      svg.append(g);
    }
  }

  // ---------------------------------------------------------------- state at a glance

  // the checkpoint line over the last minutes: one tick per commit seen (height: its duration),
  // red marks where rollbacks grew, purple lines where the generation changed
  class CheckpointTimeline {
    constructor(box) {
      this.box = box;
      this.commits = [];  // [{t (s), txid, ms}]
      this.marks = [];    // [{t, kind: "rollback"|"generation", text}]
      this.last = null;
      this.svg = svgEl("svg", { id: "checkpoint-timeline", viewBox: "0 0 720 90", role: "img",
                                "aria-label": "checkpoint timeline" });
      box.replaceChildren(this.svg);
    }

    add(cp, nowS) {
      if (cp.lastCommitTime && (!this.last || cp.lastCommitTime !== this.last.lastCommitTime || cp.txid !== this.last.txid)) {
        this.commits.push({ t: cp.lastCommitTime, txid: cp.txid, ms: Number(cp.lastDurationMs) });
      }
      if (this.last && cp.rollbacks > this.last.rollbacks) {
        this.marks.push({ t: nowS, kind: "rollback", text: (cp.rollbacks - this.last.rollbacks) + " rollback(s)" });
      }
      if (this.last && cp.generation !== this.last.generation) {
        this.marks.push({ t: nowS, kind: "generation", text: "generation " + cp.generation });
      }
      this.last = cp;
      const from = nowS - TIMELINE_SECS;
      this.commits = this.commits.filter((c) => c.t >= from);
      this.marks = this.marks.filter((m) => m.t >= from);
      this.draw(nowS);
    }

    draw(nowS) {
      const svg = this.svg, left = 64, right = 10, top = 8, h = 56, W = 720;
      svg.replaceChildren();
      svg.dataset.commits = String(this.commits.length);
      const x = (t) => left + (W - left - right) * (1 - (nowS - t) / TIMELINE_SECS);
      svg.append(svgEl("rect", { x: left, y: top, width: W - left - right, height: h, fill: "#fafafa", stroke: "#ddd" }));
      const maxMs = Math.max(1, ...this.commits.map((c) => c.ms));
      for (const c of this.commits) {
        const bh = Math.max(3, (c.ms / maxMs) * (h - 4));
        const bar = svgEl("rect", { x: x(c.t) - 1.5, y: top + h - bh, width: 3, height: bh, fill: "#2a7d2a", class: "commit" });
        bar.append(svgEl("title", {}, "txid " + c.txid + " committed in " + c.ms.toFixed(1) + " ms at " + new Date(c.t * 1000).toLocaleTimeString()));
        svg.append(bar);
      }
      for (const m of this.marks) {
        const line = svgEl("line", { x1: x(m.t), x2: x(m.t), y1: top, y2: top + h, "stroke-width": 2,
                                     stroke: m.kind === "rollback" ? "#c4302b" : "#75507b", class: m.kind });
        line.append(svgEl("title", {}, m.text));
        svg.append(line);
      }
      svg.append(svgEl("text", { x: left - 4, y: top + 10, "text-anchor": "end", class: "legend-text" }, maxMs.toFixed(0) + " ms"));
      svg.append(svgEl("text", { x: left, y: 84, class: "legend-text" },
        "last " + TIMELINE_SECS / 60 + " min: commits (green, height = duration), rollbacks (red), generation changes (purple)"));
    }
  }

  function lagChart(node) {
    const rows = node.details.kafkaLag;
    const max = Math.max(1, ...rows.map((r) => r.lag));
    const barH = 16, W = 520, left = 150;
    const svg = svgEl("svg", { viewBox: `0 0 ${W + 90} ${rows.length * (barH + 4) + 6}`, class: "lag-chart",
                               "data-component": node.id, role: "img", "aria-label": "Kafka lag per partition" });
    rows.forEach((r, i) => {
      const y = 3 + i * (barH + 4);
      svg.append(svgEl("text", { x: left - 6, y: y + 12, "text-anchor": "end", class: "legend-text" }, short(r.partition, 24)));
      svg.append(svgEl("rect", { x: left, y: y, width: Math.max(1, (r.lag / max) * W), height: barH, rx: 2,
                                 fill: r.lag > 0 ? "#3465a4" : "#c9d6ec", "data-partition": r.partition, "data-lag": r.lag }));
      svg.append(svgEl("text", { x: left + Math.max(1, (r.lag / max) * W) + 6, y: y + 12, class: "legend-text" }, G.num(r.lag)));
    });
    return svg;
  }

  function bytes(n) {
    if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + " MiB";
    if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
    return n + " B";
  }

  function renderState(vis, topo, timeline) {
    const box = G.$("state-glance");
    const parts = [];
    const cp = topo.checkpoints;
    if (cp) {
      const age = cp.lastCommitAgeSecs === null ? "never" : cp.lastCommitAgeSecs + " s ago";
      parts.push(G.el("h3", { text: "Checkpoints" }),
        G.el("p", { id: "checkpoint-line", cls: "checkpoint-line" },
          "txid " + cp.txid + " · committed " + age + " · last took " + cp.lastDurationMs + " ms · rollbacks "
          + cp.rollbacks + " · generation " + cp.generation + " · failures " + cp.failures));
      parts.push(timeline.box);
    }
    for (const n of vis.nodes) {
      if (n.details.kafkaLag) {
        const total = n.details.kafkaLag.reduce((s, r) => s + r.lag, 0);
        parts.push(G.el("h3", { text: "Kafka lag of " + n.id + " (" + G.num(total) + " records behind)" }), lagChart(n));
      }
      if (n.details.keyGroups) {
        const id = "keygroups-" + n.id;
        parts.push(G.el("h3", { text: "Key groups of " + n.id + " (top " + n.details.keyGroups.length + " of "
          + n.details.keyGroupsReported + " by bytes)" }), G.el("div", { id: id, "data-component": n.id, cls: "keygroups" }));
      }
    }
    const section = G.$("state-box");
    section.hidden = !parts.length;
    box.replaceChildren(...parts);
    for (const n of vis.nodes) {
      if (!n.details.keyGroups) continue;
      const max = Math.max(1, ...n.details.keyGroups.map((g) => g.bytes));
      G.table("keygroups-" + n.id, [["Key group", (g) => g.keyGroup, "num"], ["Keys", (g) => G.num(g.keys), "num"],
        ["Bytes", (g) => bytes(g.bytes), "num"],
        ["", (g) => G.el("span", { cls: "bar", style: null, "data-width": String(Math.round((g.bytes / max) * 100)) })]],
        n.details.keyGroups);
      for (const bar of G.$("keygroups-" + n.id).querySelectorAll(".bar")) bar.style.width = bar.dataset.width + "%";
    }
  }

  const state = { graph: null, timeline: null };

  G.on("topology", async (topo) => {
    const vis = await G.api("GET", "/api/v1/topology/" + G.enc(topo.id) + "/visualization?window="
      + G.enc(G.params.get("window") || "600") + "&sys=" + G.enc(G.params.get("sys") || "0"));
    if (!state.graph) state.graph = new TopologyGraph(G.$("graph-box"));
    state.graph.draw(vis, Date.now(), topo.id);
    if (topo.checkpoints) {
      if (!state.timeline) state.timeline = new CheckpointTimeline(G.el("div", { id: "checkpoint-timeline-box" }));
      state.timeline.add(topo.checkpoints, Date.now() / 1000);
    }
    renderState(vis, topo, state.timeline);
  });
})();
