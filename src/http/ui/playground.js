// The playground: picks a model from /v1/models and MCP servers (registered, from
// /v1/mcp/servers, or by URL), sends each message as a streamed POST /v1/responses chained with
// previous_response_id, shows items as they arrive, and answers approval requests with buttons.
// It uses only the public API: it is a reference chat UI for the relay.
"use strict";

(() => {
  const { el } = RR;
  const byUrl = [];
  let previous = null;

  function tools() {
    const chosen = [...document.querySelectorAll("#registered input:checked")]
      .map((c) => ({ type: "mcp", server_label: c.value }));
    return chosen.concat(byUrl.map((s) => ({ type: "mcp", server_label: s.label, server_url: s.url, require_approval: s.approval })));
  }

  /** Sends one request (a message or approval answers) and streams its items into a new turn. */
  async function send(input, label) {
    const message = document.getElementById("chat-message");
    const button = document.getElementById("send");
    button.disabled = true; message.textContent = "";
    const list = el("ol", { class: "timeline" });
    const link = el("span", { class: "muted" }, "starting…");
    document.getElementById("turns").append(el("div", { class: "turn" }, el("p", {}, el("strong", {}, "You: "), label, " ", link), list));
    const approvals = [];
    const timeline = new RR.Timeline(list, (item) => { if (item.type === "mcp_approval_request") approvals.push(item); });
    const body = { model: document.getElementById("model").value, input, tools: tools(), stream: true };
    if (previous) body.previous_response_id = previous;
    const t0 = performance.now();
    try {
      const r = await RR.check(await fetch("/v1/responses", {
        method: "POST", headers: RR.headers({ "Content-Type": "application/json" }), body: JSON.stringify(body),
      }));
      await RR.readSse(r, (_type, event) => {
        if (event.type === "response.created") {
          previous = event.response.id;
          link.replaceChildren(el("a", { href: "/ui/runs/" + encodeURIComponent(previous) }, "open " + previous + " in the viewer"));
        }
        timeline.apply(event, Math.round(performance.now() - t0));
        if (event.type === "response.failed") message.textContent = "The run failed: " + (event.response.error || {}).message;
      });
    } catch (e) {
      message.textContent = e.message;
    }
    button.disabled = false;
    for (const a of approvals) list.append(approvalButtons(a));
  }

  function approvalButtons(req) {
    const answer = (approve) => () => {
      for (const b of box.querySelectorAll("button")) b.disabled = true;
      send([{ type: "mcp_approval_response", approval_request_id: req.id, approve }], (approve ? "approved " : "denied ") + req.name);
    };
    const box = el("li", { class: "row-actions", "aria-label": "Approval for " + req.name },
      el("button", { type: "button", class: "primary", onclick: answer(true) }, "Approve " + req.server_label + " · " + req.name),
      el("button", { type: "button", onclick: answer(false) }, "Deny"));
    return box;
  }

  async function setup() {
    // The model servers' models to choose from; any other name can be typed.
    try {
      const list = await RR.getJson("/v1/models");
      document.getElementById("models").replaceChildren(...list.data.map((m) => el("option", { value: m.id })));
      const model = document.getElementById("model");
      if (!model.value && list.data.length) model.value = list.data[0].id;
    } catch (e) {
      document.getElementById("chat-message").textContent = "Could not list models: " + e.message;
    }
    try {
      const servers = await RR.getJson("/v1/mcp/servers");
      document.getElementById("registered").replaceChildren(...servers.data.map((s) => el("li", {},
        el("label", {}, el("input", { type: "checkbox", value: s.label }), " ", el("code", {}, s.label),
          s.description ? " — " + s.description : ""))));
    } catch (_) { /* listed as none */ }
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.getElementById("add-server").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const s = { label: document.getElementById("srv-label").value.trim(), url: document.getElementById("srv-url").value.trim(),
        approval: document.getElementById("srv-approval").value };
      byUrl.push(s);
      const item = el("li", {}, el("code", {}, s.label), " ", s.url, " (approval: " + s.approval + ") ",
        el("button", { type: "button", onclick: () => { byUrl.splice(byUrl.indexOf(s), 1); item.remove(); } }, "Remove " + s.label));
      document.getElementById("by-url").append(item);
      ev.target.reset();
    });
    document.getElementById("ask").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const text = document.getElementById("prompt").value.trim();
      if (!text) return;
      document.getElementById("prompt").value = "";
      send(text, text);
    });
    document.getElementById("new-chat").addEventListener("click", () => {
      previous = null; document.getElementById("turns").replaceChildren();
    });
    setup();
  });
})();
