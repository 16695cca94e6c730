// The viewer's shared script: the relay key (tab session storage, sent as a bearer), JSON and
// SSE over fetch, safe DOM building, and the timeline that folds Responses events into item cards.
"use strict";

const RR = (() => {
  const KEY = "responses-relay-key";

  /** Creates an element: attributes (on* handlers as functions), then children (strings are text). */
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (k === "class") e.className = v;
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function key() { return sessionStorage.getItem(KEY) || ""; }

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    if (key()) h["Authorization"] = "Bearer " + key();
    return h;
  }

  /** Thrown for an HTTP error: `status` and the OpenAI error envelope's message. */
  class HttpError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function check(r) {
    if (r.ok) return r;
    let message = r.status + " " + r.statusText;
    try { const body = await r.json(); if (body && body.error) message = body.error.message; } catch (_) { /* not JSON */ }
    if (r.status === 401) askForKey(message);
    throw new HttpError(r.status, message);
  }

  async function getJson(path) { return (await check(await fetch(path, { headers: headers() }))).json(); }
  async function getText(path) { return (await check(await fetch(path, { headers: headers() }))).text(); }

  /** Shows the key form (every page has one): a relay with keys answers 401 without one. */
  function askForKey(message) {
    const form = document.getElementById("key-form");
    if (!form || !form.hidden) return;
    form.hidden = false;
    document.getElementById("key-why").textContent = key()
      ? "The relay refused this key: " + message
      : "This relay needs a key. Its runs are shown to the key's tenant only.";
    document.getElementById("key-input").focus();
  }

  function setupKeyForm() {
    const form = document.getElementById("key-form");
    if (!form) return;
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(KEY, document.getElementById("key-input").value.trim());
      location.reload();
    });
    const forget = document.getElementById("key-forget");
    if (forget) {
      forget.hidden = !key();
      forget.addEventListener("click", () => { sessionStorage.removeItem(KEY); location.reload(); });
    }
  }

  /** Reads an SSE body from `response`, calling onEvent(type, data) per event, until it ends. */
  async function readSse(response, onEvent) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const frame = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        let type = "message", data = "";
        for (const line of frame.split("\n")) {
          if (line.startsWith("event: ")) type = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        if (data === "[DONE]") return;
        if (data) onEvent(type, JSON.parse(data));
      }
    }
  }

  /** `logs export` JSON Lines as [{offset_ms, event}]. */
  function parseJsonl(text) {
    return text.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
  }

  function ms(v) {
    if (v === null || v === undefined) return "—";
    return v < 1000 ? v + " ms" : (v / 1000).toFixed(2) + " s";
  }
  function when(unix) { return unix ? new Date(unix * 1000).toLocaleString() : "—"; }
  /** JSON (or a JSON string) for reading: on one line when short, indented when not. */
  function pretty(s) {
    let v = s;
    if (typeof s === "string") { try { v = JSON.parse(s); } catch (_) { return s; } }
    const line = JSON.stringify(v);
    return line.length <= 80 ? line : JSON.stringify(v, null, 2);
  }
  function status(s) { return el("span", { class: "status status-" + s }, s); }

  const TERMINAL = ["response.completed", "response.incomplete", "response.failed"];

  /**
   * A run's items as cards in `list` (an <ol>), kept up to date event by event: items come from
   * `output_item.added`/`.done`, text and arguments grow with their deltas, each item's time from
   * added to done is its duration. `onItem(item)` is told of each item once done.
   */
  class Timeline {
    constructor(list, onItem) {
      this.list = list; this.onItem = onItem || (() => {});
      this.reset();
    }
    reset() {
      this.items = []; this.cards = []; this.times = []; this.response = null;
      this.lastSeq = -1; this.lastOffset = 0; this.list.replaceChildren();
    }
    /** Applies one event at `offset` ms from the run's start. */
    apply(event, offset) {
      this.lastSeq = event.sequence_number ?? this.lastSeq;
      this.lastOffset = offset;
      const t = event.type;
      if (event.response) this.response = event.response;
      const i = event.output_index;
      if (t === "response.output_item.added") {
        this.items[i] = structuredClone(event.item);
        this.times[i] = { added: offset, done: null };
      } else if (t === "response.output_item.done") {
        this.items[i] = event.item;
        if (this.times[i]) this.times[i].done = offset;
        this.onItem(event.item);
      } else if (i !== undefined && this.items[i]) {
        this.grow(this.items[i], event);
      } else {
        return;
      }
      this.render(i);
    }
    grow(item, e) {
      const t = e.type;
      if (t === "response.output_text.delta" || t === "response.refusal.delta") {
        item.content = item.content || [];
        const part = item.content[e.content_index] || (item.content[e.content_index] = { type: "output_text", text: "" });
        part.text = (part.text || "") + e.delta;
      } else if (t.endsWith("arguments.delta")) {
        item.arguments = (item.arguments || "") + e.delta;
      } else if (t.startsWith("response.reasoning") && t.endsWith(".delta")) {
        item.content = item.content || [];
        const idx = e.content_index ?? e.summary_index ?? 0;
        const part = item.content[idx] || (item.content[idx] = { type: "reasoning_text", text: "" });
        part.text = (part.text || "") + e.delta;
      } else if (t.endsWith(".failed")) {
        item.status = "failed";
      } else if (t.endsWith(".completed")) {
        item.status = "completed";
      }
    }
    render(i) {
      const c = card(this.items[i], this.times[i]);
      if (this.cards[i]) this.cards[i].replaceWith(c);
      else this.list.append(c);
      this.cards[i] = c;
    }
  }

  function textOf(item) {
    if (typeof item.content === "string") return item.content;
    return (item.content || []).map((p) => p.text ?? p.refusal ?? (p.type ? "[" + p.type + "]" : "")).join("");
  }

  function field(name, value, asCode) {
    if (value === null || value === undefined || value === "") return null;
    return el("div", { class: "field-row" }, el("span", { class: "muted" }, name + ": "),
      asCode ? el("pre", {}, value) : el("span", {}, value));
  }

  /** One item's card. */
  function card(item, times) {
    const took = times && times.done !== null ? times.done - times.added : null;
    const failed = item.status === "failed" || item.error;
    const head = el("h3", {}, el("span", { class: "kind" }, item.type),
      item.status ? status(item.status) : null,
      took !== null ? el("span", { class: "muted" }, "took " + ms(took)) : null);
    const body = [];
    switch (item.type) {
      case "message":
        head.append(el("span", {}, item.role || ""));
        body.push(el("div", { class: "text" }, textOf(item)));
        break;
      case "reasoning":
        body.push(el("div", { class: "text muted" },
          textOf(item) || (item.summary || []).map((s) => s.text).join("\n") || "(no text)"));
        break;
      case "function_call":
        head.append(el("strong", {}, item.name));
        body.push(field("call_id", item.call_id), field("arguments", pretty(item.arguments || ""), true));
        break;
      case "custom_tool_call":
        head.append(el("strong", {}, item.name));
        body.push(field("call_id", item.call_id), field("input", item.input || "", true));
        break;
      case "mcp_list_tools":
        head.append(el("strong", {}, item.server_label));
        if (item.error) body.push(el("div", { class: "error" }, "error: " + errorText(item.error)));
        body.push(el("ul", { class: "tools" }, (item.tools || []).map((t) =>
          el("li", {}, el("code", {}, t.name), t.description ? " — " + t.description : ""))));
        break;
      case "mcp_call":
        head.append(el("strong", {}, item.server_label + " · " + item.name));
        body.push(field("arguments", pretty(item.arguments || ""), true));
        if (item.error) body.push(el("div", { class: "error" }, "error: " + errorText(item.error)));
        body.push(field("output", item.output, true), field("approval_request_id", item.approval_request_id));
        break;
      case "mcp_approval_request":
        head.append(el("strong", {}, item.server_label + " · " + item.name));
        body.push(field("arguments", pretty(item.arguments || ""), true));
        break;
      case "mcp_approval_response":
        head.append(el("strong", { class: item.approve ? "status-completed" : "status-failed" }, item.approve ? "approved" : "denied"));
        body.push(field("approval_request_id", item.approval_request_id), field("reason", item.reason));
        break;
      case "function_call_output":
      case "custom_tool_call_output":
        body.push(field("call_id", item.call_id), field("output", typeof item.output === "string" ? item.output : JSON.stringify(item.output), true));
        break;
      case "tool_search_call":
        body.push(field("arguments", pretty(item.arguments ?? ""), true));
        break;
      case "tool_search_output":
        body.push(el("ul", {}, (item.tools || []).flatMap((ns) => (ns.tools || [ns]).map((f) =>
          el("li", {}, el("code", {}, (ns.name && ns.tools ? ns.name + "." : "") + f.name))))));
        break;
      default:
        body.push(el("pre", {}, JSON.stringify(item, null, 2)));
    }
    return el("li", { class: "card " + item.type + (failed ? " failed" : ""), "data-item": item.id || "" }, head, body);
  }

  function errorText(e) {
    if (typeof e === "string") return e;
    return [e.type, e.code !== undefined ? "code " + e.code : null, e.message, e.content ? JSON.stringify(e.content) : null]
      .filter((x) => x !== null && x !== undefined).join(" · ");
  }

  document.addEventListener("DOMContentLoaded", setupKeyForm);

  return { el, key, headers, getJson, getText, check, readSse, parseJsonl, ms, when, pretty, status,
    Timeline, card, TERMINAL, HttpError };
})();
