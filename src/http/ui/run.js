// The run page: reads the run's log from /ui/api/runs/{id}/log, shows its timeline, usage and
// raw events (runs of deltas folded with a count), tails the public stream while the run goes
// on, replays the log at a chosen speed, and downloads what `logs export` writes; its chain (the
// runs it follows and a steered run's successors) links the runs around it. With `?tenant=`
// in the page's URL (an operator's key reading another tenant's run), every read names it and goes
// through /ui/api/, the public API's routes being the key's own tenant's.
"use strict";

(() => {
  const { el, ms, when, status } = RR;
  const id = decodeURIComponent(location.pathname.split("/").pop());
  const tenant = new URLSearchParams(location.search).get("tenant") || "";

  /** `path` with the page's `tenant=` added to its query (unchanged without one). */
  function scoped(path) {
    if (!tenant) return path;
    return path + (path.includes("?") ? "&" : "?") + "tenant=" + encodeURIComponent(tenant);
  }
  /** A run page's address, carrying the page's tenant. */
  function runPage(runId) { return scoped("/ui/runs/" + encodeURIComponent(runId)); }
  let log = [];           // [{offset_ms, event}] as exported, then as tailed
  let timeline, replayTimer = null;

  function summary(r, entries) {
    const end = entries.find((e) => RR.TERMINAL.includes(e.event.type));
    const first = entries.find((e) => e.event.type.endsWith(".delta"));
    const calls = (r.output || []).filter((o) => o.type.endsWith("_call")).length;
    const err = r.error ? r.error.code + ": " + r.error.message
      : r.incomplete_details ? "incomplete: " + r.incomplete_details.reason : "";
    const rows = [["Status", status(r.status)], ["Model", r.model], ["Created", when(r.created_at)],
      ["Duration", end ? ms(end.offset_ms) : "running"], ["First token", ms(first ? first.offset_ms : null)],
      ["Tool calls", String(calls)], ["Events", String(entries.length)], ["Error", err || "—"]];
    if (r.previous_response_id) rows.push(["Previous", el("a", { href: runPage(r.previous_response_id) }, r.previous_response_id)]);
    const steers = entries.filter((e) => e.event.type === "response.steer.accepted");
    if (steers.length) rows.push(["Steered", steers.map((e) => e.event.steer.id + " at " + ms(e.offset_ms)).join(", ")]);
    rows.push(["Chain", el("span", { id: "chain" }, chainShown || "—")]);
    document.getElementById("summary").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { class: k === "Error" && err ? "error" : "" }, v)]));
  }

  let chainShown = null;  // the chain's links, once read

  /** The run's chain: the runs it follows (previous_response_id, back to the first) and the
   *  runs that follow it (a steered run's successor and theirs, found among the latest runs),
   *  each a link with its status, this run in bold. */
  async function chain() {
    const get = (runId) => RR.getJson(scoped("/ui/api/runs/" + encodeURIComponent(runId)));
    const before = [];
    let prev = (await get(id)).previous_response_id;
    while (prev && before.length < 20) {
      const run = await get(prev).catch(() => null);
      if (!run) break;
      before.unshift(run);
      prev = run.previous_response_id;
    }
    const recent = (await RR.getJson(scoped("/ui/api/runs?limit=100"))).data;
    const after = [];
    let last = id;
    for (let next; after.length < 20 && (next = recent.find((x) => x.previous_response_id === last)); last = next.id) after.push(next);
    if (!before.length && !after.length) return;
    const link = (run) => el("a", { href: runPage(run.id), "data-chain": run.id }, run.id + " (" + run.status
      + (run.error === "incomplete: steered" ? ", steered" : "") + ")");
    const parts = [...before.map(link), el("strong", { "data-chain": id }, id), ...after.map(link)];
    chainShown = el("span", { class: "chain" }, ...parts.flatMap((p, i) => i ? [" → ", p] : [p]));
    document.getElementById("chain").replaceChildren(chainShown);
  }

  let turnUsage = null;   // each model turn's usage, once the store kept it (the run ended)

  /** The run's usage: a row per model turn (kept by the store at the run's end), then the total. */
  function usage(r) {
    const u = r && r.usage;
    const box = document.getElementById("usage");
    if (!u) { box.textContent = "No usage reported yet."; return; }
    const cells = (x) => {
      const d = x.output_tokens_details || {}, c = x.input_tokens_details || {};
      return [x.input_tokens, c.cached_tokens ?? 0, x.output_tokens, d.reasoning_tokens ?? 0, x.total_tokens]
        .map((v) => el("td", { class: "num" }, v));
    };
    const rows = (turnUsage || []).map((t, i) => el("tr", { "data-turn": i + 1 }, el("th", { scope: "row" }, "Turn " + (i + 1)), cells(t)));
    rows.push(el("tr", { class: "total" }, el("th", { scope: "row" }, "Run"), cells(u)));
    box.replaceChildren(el("table", {},
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, ""),
        ["Input", "cached", "Output", "reasoning", "Total"].map((h) => el("th", { scope: "col", class: "num" }, h)))),
      el("tbody", {}, rows)),
      turnUsage ? "" : el("p", { class: "muted" }, "Per model turn once the run has ended (the event log carries only the sum)."));
  }

  /** Raw events: consecutive deltas of one item and kind fold into one row with a count. */
  function renderEvents() {
    const rows = [];
    for (const e of log) {
      const ev = e.event, last = rows[rows.length - 1];
      if (last && ev.type.endsWith(".delta") && last.type === ev.type && last.item === ev.item_id) {
        last.entries.push(e);
        continue;
      }
      rows.push({ type: ev.type, item: ev.item_id, entries: [e] });
    }
    document.getElementById("events").replaceChildren(...rows.map((r) => {
      const first = r.entries[0], n = r.entries.length;
      const seq = n > 1 ? first.event.sequence_number + "–" + r.entries[n - 1].event.sequence_number : String(first.event.sequence_number);
      const details = el("details", {}, el("summary", {}, n > 1 ? "show " + n + " events" : "show"));
      details.addEventListener("toggle", () => {
        if (!details.open || details.childElementCount > 1) return;
        const payload = n > 1 ? { deltas: r.entries.map((x) => x.event.delta).join(""), count: n } : first.event;
        details.append(el("pre", {}, JSON.stringify(payload, null, 2)));
      }, { once: false });
      return el("tr", { "data-type": r.type },
        el("td", { class: "num mono" }, seq), el("td", { class: "num" }, ms(first.offset_ms)),
        el("td", { class: "mono" }, r.type, n > 1 ? el("span", { class: "muted", "data-count": n }, " ×" + n) : ""),
        el("td", {}, details));
    }));
  }

  function showAll() {
    timeline.reset();
    for (const e of log) timeline.apply(e.event, e.offset_ms);
    refresh();
  }

  function refresh() {
    const r = timeline.response;
    if (r) { summary(r, log); usage(r); }
    renderEvents();
  }

  /** A refresh at most every 100 ms while events stream in (the raw table is rebuilt whole). */
  let refreshTimer = null;
  function refreshSoon() {
    if (refreshTimer === null) refreshTimer = setTimeout(() => { refreshTimer = null; refresh(); }, 100);
  }

  function finished() { return log.some((e) => RR.TERMINAL.includes(e.event.type)); }

  /** Tails the public stream after the last event this page has, while the run goes on. */
  async function tail() {
    const live = document.getElementById("live");
    live.hidden = false;
    const base = log.length ? log[log.length - 1].offset_ms : 0, started = Date.now();
    const after = log.length ? log[log.length - 1].event.sequence_number : -1;
    const from = after >= 0 ? "starting_after=" + after : "";
    const url = tenant ? scoped("/ui/api/runs/" + encodeURIComponent(id) + "/stream" + (from ? "?" + from : ""))
      : "/v1/responses/" + encodeURIComponent(id) + "?stream=true" + (from ? "&" + from : "");
    try {
      const r = await RR.check(await fetch(url, { headers: RR.headers() }));
      await RR.readSse(r, (_type, event) => {
        const entry = { offset_ms: base + (Date.now() - started), event };
        log.push(entry);
        if (replayTimer === null) { timeline.apply(event, entry.offset_ms); refreshSoon(); }
      });
    } catch (e) {
      document.getElementById("run-message").textContent = "The live stream stopped: " + e.message;
    }
    refresh();
    live.hidden = true;
  }

  function stopReplay() {
    if (replayTimer !== null) clearTimeout(replayTimer);
    replayTimer = null;
    document.getElementById("replay-stop").disabled = true;
    document.getElementById("replay-start").disabled = false;
  }

  /** Replays the log into the timeline at `speed` times its recorded pace. */
  function replay(speed) {
    stopReplay();
    timeline.reset();
    document.getElementById("replay-stop").disabled = false;
    document.getElementById("replay-start").disabled = true;
    const t0 = performance.now();
    let i = 0;
    const step = () => {
      const now = (performance.now() - t0) * speed;
      while (i < log.length && log[i].offset_ms <= now) { timeline.apply(log[i].event, log[i].offset_ms); i++; }
      if (i >= log.length) { stopReplay(); showAll(); return; }
      replayTimer = setTimeout(step, Math.max(0, (log[i].offset_ms - now) / speed));
    };
    step();
  }

  /** The run's input items (the public input_items list), oldest first (none for a recording),
   *  and its model turns' usage. */
  async function input(retries) {
    const run = await RR.getJson(scoped("/ui/api/runs/" + encodeURIComponent(id)));
    if (run.turns) { turnUsage = run.turns; usage(timeline.response); }
    // The store keeps the turns just after the run's end is shown: ask again shortly.
    else if (run.input_items && finished() && retries > 0) setTimeout(() => input(retries - 1).catch(() => {}), 250);
    if (!run.input_items) return; // a recording served by `replay FILE` keeps no input
    const page = await RR.getJson(run.input_items + (run.input_items.includes("?") ? "&" : "?") + "order=asc&limit=100");
    document.getElementById("input").replaceChildren(...page.data.map((item) => RR.card(item)));
    document.getElementById("input-section").hidden = page.data.length === 0;
  }

  async function download() {
    const text = await RR.getText(scoped("/ui/api/runs/" + encodeURIComponent(id) + "/log"));
    const url = URL.createObjectURL(new Blob([text], { type: "application/jsonl" }));
    const a = el("a", { href: url, download: id + ".jsonl" });
    document.body.append(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }

  document.addEventListener("DOMContentLoaded", async () => {
    document.getElementById("run-id").textContent = id;
    if (tenant) {
      // Back to the list of the same tenant's runs.
      document.querySelector("nav a[href='/ui/']").href = "/ui/?tenant=" + encodeURIComponent(tenant);
      document.getElementById("run-tenant").textContent = "tenant " + tenant;
      document.getElementById("run-tenant").hidden = false;
    }
    document.title = id + " · responses-relay";
    timeline = new RR.Timeline(document.getElementById("timeline"));
    document.getElementById("replay").addEventListener("submit", (ev) => {
      ev.preventDefault(); replay(Number(document.getElementById("speed").value));
    });
    document.getElementById("replay-stop").addEventListener("click", () => { stopReplay(); showAll(); });
    document.getElementById("download").addEventListener("click", download);
    try {
      log = RR.parseJsonl(await RR.getText(scoped("/ui/api/runs/" + encodeURIComponent(id) + "/log")));
    } catch (e) {
      document.getElementById("run-message").textContent = e.status === 401 ? "No run shown without a key." : e.message;
      return;
    }
    showAll();
    input(4).catch((e) => { document.getElementById("run-message").textContent = "Could not read the run's input: " + e.message; });
    chain().catch(() => {});
    if (!finished()) tail().then(() => input(4)).catch(() => {});
  });
})();
