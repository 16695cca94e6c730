// The list page: one page of the tenant's runs from /ui/api/runs, filtered by status and model,
// paged with `after` (Older) and a stack of earlier cursors (Newer). The Tenant filter (for an
// operator's key: another tenant's runs) is sent as `tenant=`, kept in the page's URL and carried
// by the links to each run's page.
"use strict";

(() => {
  const { el, ms, when, status } = RR;
  const cursors = [];
  let after = "";

  async function load() {
    const params = new URLSearchParams();
    const s = document.getElementById("f-status").value;
    const m = document.getElementById("f-model").value.trim();
    const t = tenant();
    if (s) params.set("status", s);
    if (m) params.set("model", m);
    if (t) params.set("tenant", t);
    if (after) params.set("after", after);
    params.set("limit", "25");
    const message = document.getElementById("list-message");
    const body = document.getElementById("runs");
    let page;
    try {
      page = await RR.getJson("/ui/api/runs?" + params);
    } catch (e) {
      body.replaceChildren();
      message.textContent = e.status === 401 ? "No runs shown without a key." : "Could not list runs: " + e.message;
      return;
    }
    message.textContent = page.data.length ? "" : "No runs" + (s || m || t ? " match these filters." : " yet.");
    body.replaceChildren(...page.data.map((r) => row(r, t)));
    const models = document.getElementById("models");
    const known = new Set([...models.options].map((o) => o.value));
    for (const r of page.data) if (!known.has(r.model)) { models.append(el("option", { value: r.model })); known.add(r.model); }
    document.getElementById("older").disabled = !page.has_more;
    document.getElementById("older").dataset.next = page.last_id || "";
    document.getElementById("newer").disabled = cursors.length === 0;
  }

  /** The Tenant filter: empty for the key's own tenant. */
  function tenant() { return document.getElementById("f-tenant").value.trim(); }

  /** The page's URL keeps the Tenant filter (`?tenant=`), so a reload or a shared link shows it. */
  function keepInUrl(t) {
    const url = new URL(location.href);
    if (t) url.searchParams.set("tenant", t); else url.searchParams.delete("tenant");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }

  function row(r, t) {
    const u = r.usage;
    const href = "/ui/runs/" + encodeURIComponent(r.id) + (t ? "?tenant=" + encodeURIComponent(t) : "");
    return el("tr", { "data-run": r.id },
      el("td", {}, el("a", { href, class: "mono" }, r.id)),
      el("td", {}, status(r.status)),
      el("td", { class: "mono" }, r.model),
      el("td", {}, when(r.created_at)),
      el("td", { class: "num" }, ms(r.duration_ms)),
      el("td", { class: "num" }, ms(r.ttft_ms)),
      el("td", { class: "num" }, u ? u.input_tokens + " / " + u.output_tokens : "—"),
      el("td", { class: "num" }, r.tool_calls),
      el("td", { class: "error" }, r.error || ""));
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.getElementById("f-tenant").value = new URLSearchParams(location.search).get("tenant") || "";
    document.getElementById("filters").addEventListener("submit", (ev) => {
      ev.preventDefault(); cursors.length = 0; after = ""; keepInUrl(tenant()); load();
    });
    document.getElementById("older").addEventListener("click", (ev) => {
      cursors.push(after); after = ev.target.dataset.next; load();
    });
    document.getElementById("newer").addEventListener("click", () => { after = cursors.pop() || ""; load(); });
    load();
  });
})();
