// The list page: one page of the tenant's runs from /ui/api/runs, filtered by status and model,
// paged with `after` (Older) and a stack of earlier cursors (Newer).
"use strict";

(() => {
  const { el, ms, when, status } = RR;
  const cursors = [];
  let after = "";

  async function load() {
    const params = new URLSearchParams();
    const s = document.getElementById("f-status").value;
    const m = document.getElementById("f-model").value.trim();
    if (s) params.set("status", s);
    if (m) params.set("model", m);
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
    message.textContent = page.data.length ? "" : "No runs" + (s || m ? " match these filters." : " yet.");
    body.replaceChildren(...page.data.map(row));
    const models = document.getElementById("models");
    const known = new Set([...models.options].map((o) => o.value));
    for (const r of page.data) if (!known.has(r.model)) { models.append(el("option", { value: r.model })); known.add(r.model); }
    document.getElementById("older").disabled = !page.has_more;
    document.getElementById("older").dataset.next = page.last_id || "";
    document.getElementById("newer").disabled = cursors.length === 0;
  }

  function row(r) {
    const u = r.usage;
    return el("tr", { "data-run": r.id },
      el("td", {}, el("a", { href: "/ui/runs/" + encodeURIComponent(r.id), class: "mono" }, r.id)),
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
    document.getElementById("filters").addEventListener("submit", (ev) => {
      ev.preventDefault(); cursors.length = 0; after = ""; load();
    });
    document.getElementById("older").addEventListener("click", (ev) => {
      cursors.push(after); after = ev.target.dataset.next; load();
    });
    document.getElementById("newer").addEventListener("click", () => { after = cursors.pop() || ""; load(); });
    load();
  });
})();
