// Gale web UI: the log viewer (logs.html). A supervisor's log files through nimbus
// (/api/v1/supervisor/<id>/log...): pages of 64 KiB, the tail by default, search with every match
// listed (the page opens at the last one when a link carries ?search=), thread dumps as text and
// flame graphs as images. "follow" re-reads the tail at every refresh.
"use strict";

(function () {
  const G = window.Gale;
  const PAGE = 64 * 1024;
  const view = { supervisor: null, file: null, start: null, page: null, follow: false, mark: "", ready: false,
                 imageUrl: null };

  function base() { return "/api/v1/supervisor/" + G.enc(view.supervisor); }
  function setUrl() {
    const p = new URLSearchParams(location.search);
    p.set("file", view.file);
    if (view.start === null) p.delete("start"); else p.set("start", String(view.start));
    history.replaceState(null, "", "?" + p.toString());
  }

  function highlight(text, mark) {
    const pre = G.$("log-view");
    if (!mark) { pre.textContent = text; return 0; }
    const nodes = [];
    let i = 0, n = 0;
    for (;;) {
      const j = text.indexOf(mark, i);
      if (j < 0) break;
      nodes.push(document.createTextNode(text.slice(i, j)), G.el("mark", { text: mark }));
      i = j + mark.length;
      n++;
    }
    nodes.push(document.createTextNode(text.slice(i)));
    pre.replaceChildren(...nodes);
    return n;
  }

  async function showImage() {
    // a flame graph: fetched with the token, shown as an image (its scripts never run)
    const headers = {};
    if (G.token()) headers["Authorization"] = "Bearer " + G.token();
    const resp = await fetch(base() + "/log/raw?file=" + G.enc(view.file), { headers: headers, cache: "no-store" });
    if (!resp.ok) throw new Error("HTTP " + resp.status + " reading " + view.file);
    const blob = new Blob([await resp.blob()], { type: "image/svg+xml" });
    if (view.imageUrl) URL.revokeObjectURL(view.imageUrl);
    view.imageUrl = URL.createObjectURL(blob);
    const img = G.el("img", { src: view.imageUrl, alt: "flame graph " + view.file, cls: "flamegraph", id: "flamegraph" });
    G.$("log-content").replaceChildren(img);
    G.$("log-position").textContent = view.file + " (flame graph: width is time on CPU; hover is off, open the file for details)";
  }

  async function load(start) {
    if (view.file.endsWith(".svg")) return showImage();
    if (!G.$("log-view")) G.$("log-content").replaceChildren(G.el("pre", { id: "log-view" }));
    const q = "?file=" + G.enc(view.file) + "&length=" + PAGE + (start === null ? "" : "&start=" + start);
    const page = await G.api("GET", base() + "/log" + q);
    view.page = page;
    view.start = start;
    const marks = highlight(page.data, view.mark);
    const pre = G.$("log-view");
    pre.dataset.start = String(page.start);
    pre.dataset.end = String(page.end);
    pre.dataset.size = String(page.size);
    pre.dataset.marks = String(marks);
    G.$("log-position").textContent = page.file + ": bytes " + G.num(page.start) + "–" + G.num(page.end) + " of "
      + G.num(page.size) + (start === null ? " (tail)" : "");
    G.$("log-prev").disabled = page.prev === null;
    G.$("log-next").disabled = page.next === null;
    if (start === null) pre.scrollTop = pre.scrollHeight;
    else if (marks) {  // the first match in the middle of the view; the page itself does not move
      const m = pre.querySelector("mark");
      if (m) pre.scrollTop = Math.max(0, m.offsetTop - pre.clientHeight / 2);
    }
    setUrl();
  }

  async function search(text, jumpToLast) {
    view.mark = text;
    const list = G.$("search-results");
    list.replaceChildren();
    if (!text) { G.$("search-summary").textContent = ""; return; }
    const ic = G.$("log-ignore-case").checked;
    let start = 0, matches = [], rounds = 0, result = null;
    do {  // follow "next" a few times: the newest matches are what a link wants
      result = await G.api("GET", base() + "/log/search?file=" + G.enc(view.file) + "&search=" + G.enc(text)
        + "&start=" + start + "&max=100&ignore_case=" + ic);
      matches = matches.concat(result.matches);
      start = result.next;
      rounds++;
    } while (start !== null && rounds < 20);
    matches = matches.slice(-200);
    G.$("search-summary").textContent = matches.length ? matches.length + " matching lines" + (start !== null ? " (more further on)" : "")
      : "no match for “" + text + "”";
    for (const m of matches) {
      const li = G.el("li", { "data-offset": String(m.offset) }, G.num(m.offset) + ": " + m.line.slice(0, 240));
      li.addEventListener("click", () => load(Math.max(0, m.offset - PAGE / 2)));
      list.append(li);
    }
    list.dataset.matches = String(matches.length);
    if (jumpToLast && matches.length) await load(Math.max(0, matches[matches.length - 1].offset - PAGE / 2));
    else await load(view.start);
  }

  async function setup() {
    view.supervisor = G.params.get("supervisor");
    if (!view.supervisor) throw new Error("open /logs.html?supervisor=<supervisor id>&file=<file> (the UI's log links do)");
    G.$("log-supervisor").textContent = "of supervisor " + view.supervisor;
    const listing = await G.api("GET", base() + "/logs");
    const select = G.$("log-file");
    view.file = G.params.get("file") || (listing.files.find((f) => f.file === "supervisor.log") || listing.files[0] || {}).file;
    if (!view.file) throw new Error("supervisor " + view.supervisor + " has no log files yet");
    const names = listing.files.map((f) => f.file);
    if (!names.includes(view.file)) names.unshift(view.file);
    select.replaceChildren(...names.map((n) => G.el("option", { value: n, text: n })));
    select.value = view.file;
    select.addEventListener("change", () => { view.file = select.value; view.mark = ""; G.$("log-search").value = "";
                                               G.$("search-results").replaceChildren(); run(load(null)); });
    G.$("log-first").addEventListener("click", () => run(load(0)));
    G.$("log-prev").addEventListener("click", () => run(load(view.page ? view.page.prev : 0)));
    G.$("log-next").addEventListener("click", () => run(load(view.page ? view.page.next : null)));
    G.$("log-tail").addEventListener("click", () => run(load(null)));
    G.$("log-follow").addEventListener("change", (e) => { view.follow = e.target.checked; if (view.follow) run(load(null)); });
    G.$("search-form").addEventListener("submit", (e) => { e.preventDefault(); run(search(G.$("log-search").value, true)); });
    const start = G.params.get("start");
    const wanted = G.params.get("search") || "";
    G.$("log-search").value = wanted;
    if (wanted) await search(wanted, true);
    else await load(start === null ? null : Number(start));
    view.ready = true;
    document.body.dataset.logReady = "1";
  }

  function run(promise) {
    promise.then(() => G.banner(null)).catch((e) => G.banner(e.message));
  }

  G.on("logs", async () => {
    if (!view.ready) return setup();
    if (view.follow && !view.file.endsWith(".svg")) await load(null);
  });
})();
