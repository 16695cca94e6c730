"""Checkers for the Responses wire format, written for this suite.

- ``validate_response_resource``: the Response object's required keys and types, as the Open
  Responses compliance suite's schema demands them (PROTOCOL.md §4.4 "Schema traps").
- ``validate_event``: one stream event against the required fields of its type (§2.3).
- ``StreamChecker`` / ``check_stream``: the ordering rules of SPEC §5 and PROTOCOL §2.2, §5.4
  over a whole event list (what the strict Node accumulator enforces, re-stated).
- ``post_raw`` / ``parse_sse``: a raw HTTP client (stdlib only) for framing checks.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

# --------------------------------------------------------------------------------------------
# small type predicates


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_str(v: Any) -> bool:
    return isinstance(v, str)


def is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def is_list(v: Any) -> bool:
    return isinstance(v, list)


def is_obj(v: Any) -> bool:
    return isinstance(v, dict)


def nullable(pred):
    def check(v: Any) -> bool:
        return v is None or pred(v)

    check.__name__ = f"nullable_{pred.__name__}"
    return check


def one_of(*values):
    def check(v: Any) -> bool:
        return v in values

    check.__name__ = f"one_of{values}"
    return check


def str_or_list(v: Any) -> bool:
    return isinstance(v, (str, list))


def str_or_obj(v: Any) -> bool:
    return isinstance(v, (str, dict))


class SchemaError(AssertionError):
    pass


def _check_fields(obj: Any, spec: dict, where: str, errors: list[str]) -> None:
    if not is_obj(obj):
        errors.append(f"{where}: expected an object, got {type(obj).__name__}: {obj!r:.200}")
        return
    for key, pred in spec.items():
        if key not in obj:
            errors.append(f"{where}: missing required key '{key}'")
        elif not pred(obj[key]):
            errors.append(f"{where}.{key}: {obj[key]!r:.200} fails {getattr(pred, '__name__', pred)}")


# --------------------------------------------------------------------------------------------
# the Response resource (PROTOCOL §4.4 "Schema traps", §2.5)

RESPONSE_STATUSES = ("completed", "failed", "in_progress", "cancelled", "queued", "incomplete")
ITEM_STATUSES = ("in_progress", "completed", "incomplete")

RESPONSE_FIELDS = {
    "id": is_str,
    "object": one_of("response"),
    "created_at": is_int,
    "completed_at": nullable(is_int),
    "status": one_of(*RESPONSE_STATUSES),
    "incomplete_details": nullable(is_obj),
    "model": is_str,
    "previous_response_id": nullable(is_str),
    "instructions": nullable(str_or_list),
    "output": is_list,
    "error": nullable(is_obj),
    "tools": is_list,
    "tool_choice": str_or_obj,
    "truncation": is_str,
    "parallel_tool_calls": is_bool,
    "text": is_obj,
    "top_p": is_num,
    "presence_penalty": is_num,
    "frequency_penalty": is_num,
    "top_logprobs": is_int,
    "temperature": is_num,
    "reasoning": nullable(is_obj),
    "usage": nullable(is_obj),
    "max_output_tokens": nullable(is_int),
    "max_tool_calls": nullable(is_int),
    "store": is_bool,
    "background": is_bool,
    "service_tier": is_str,
    "metadata": nullable(is_obj),
    "safety_identifier": nullable(is_str),
    "prompt_cache_key": nullable(is_str),
}

USAGE_FIELDS = {
    "input_tokens": is_int,
    "output_tokens": is_int,
    "total_tokens": is_int,
    "input_tokens_details": is_obj,
    "output_tokens_details": is_obj,
}

OUTPUT_TEXT_PART = {"type": one_of("output_text"), "text": is_str, "annotations": is_list, "logprobs": is_list}
REFUSAL_PART = {"type": one_of("refusal"), "refusal": is_str}
REASONING_TEXT_PART = {"type": one_of("reasoning_text"), "text": is_str}

ITEM_FIELDS = {
    "message": {"id": is_str, "type": is_str, "status": one_of(*ITEM_STATUSES), "role": is_str, "content": is_list},
    "function_call": {
        "id": is_str,
        "type": is_str,
        "call_id": is_str,
        "name": is_str,
        "arguments": is_str,
        "status": one_of(*ITEM_STATUSES),
    },
    "function_call_output": {"id": is_str, "type": is_str, "call_id": is_str, "output": str_or_list, "status": is_str},
    "reasoning": {"id": is_str, "type": is_str, "summary": is_list},
}

FUNCTION_TOOL_FIELDS = {
    "type": one_of("function"),
    "name": is_str,
    "description": nullable(is_str),
    "parameters": nullable(is_obj),
    "strict": nullable(is_bool),
}


def item_errors(item: Any, where: str, allow_mcp: bool = False) -> list[str]:
    errors: list[str] = []
    if not is_obj(item) or not is_str(item.get("type")):
        return [f"{where}: not an item: {item!r:.200}"]
    kind = item["type"]
    spec = ITEM_FIELDS.get(kind)
    if spec is None:
        if allow_mcp and kind.startswith("mcp_"):
            return []
        return [f"{where}: item type '{kind}' is outside the Open Responses item union"]
    _check_fields(item, spec, where, errors)
    if kind == "message":
        for i, part in enumerate(item.get("content") or []):
            ptype = part.get("type") if is_obj(part) else None
            pspec = {"output_text": OUTPUT_TEXT_PART, "refusal": REFUSAL_PART}.get(ptype)
            if pspec is None:
                errors.append(f"{where}.content[{i}]: unknown part type {ptype!r}")
            else:
                _check_fields(part, pspec, f"{where}.content[{i}]", errors)
    if kind == "reasoning":
        for i, part in enumerate(item.get("content") or []):
            _check_fields(part, REASONING_TEXT_PART, f"{where}.content[{i}]", errors)
        for i, part in enumerate(item.get("summary") or []):
            _check_fields(part, {"type": one_of("summary_text"), "text": is_str}, f"{where}.summary[{i}]", errors)
    return errors


def response_errors(resp: Any, where: str = "response", allow_mcp: bool = False) -> list[str]:
    errors: list[str] = []
    _check_fields(resp, RESPONSE_FIELDS, where, errors)
    if errors and not is_obj(resp):
        return errors
    for i, item in enumerate(resp.get("output") or []):
        errors += item_errors(item, f"{where}.output[{i}]", allow_mcp)
    for i, tool in enumerate(resp.get("tools") or []):
        if is_obj(tool) and tool.get("type") == "function":
            _check_fields(tool, FUNCTION_TOOL_FIELDS, f"{where}.tools[{i}]", errors)
        elif not (allow_mcp and is_obj(tool) and tool.get("type") == "mcp"):
            if not (is_obj(tool) and tool.get("type") in ("file_search", "web_search")):
                errors.append(f"{where}.tools[{i}]: tool outside the function|file_search|web_search union: {tool!r:.200}")
    if is_obj(resp.get("usage")):
        u = resp["usage"]
        _check_fields(u, USAGE_FIELDS, f"{where}.usage", errors)
        _check_fields(u.get("input_tokens_details"), {"cached_tokens": is_int}, f"{where}.usage.input_tokens_details", errors)
        _check_fields(u.get("output_tokens_details"), {"reasoning_tokens": is_int}, f"{where}.usage.output_tokens_details", errors)
    if is_obj(resp.get("text")):
        _check_fields(resp["text"], {"format": is_obj}, f"{where}.text", errors)
    if is_obj(resp.get("reasoning")):
        for k in ("effort", "summary"):
            if k not in resp["reasoning"]:
                errors.append(f"{where}.reasoning: missing key '{k}'")
    if is_obj(resp.get("error")):
        _check_fields(resp["error"], {"code": is_str, "message": is_str}, f"{where}.error", errors)
    if is_obj(resp.get("incomplete_details")):
        _check_fields(resp["incomplete_details"], {"reason": is_str}, f"{where}.incomplete_details", errors)
    status = resp.get("status")
    if status in ("completed", "incomplete", "failed"):
        if not is_int(resp.get("completed_at")) and status == "completed":
            errors.append(f"{where}: completed but completed_at is {resp.get('completed_at')!r}")
        if status != "failed" and resp.get("usage") is None:
            errors.append(f"{where}: terminal status {status} but usage is null")
    if status == "failed" and not is_obj(resp.get("error")):
        errors.append(f"{where}: status failed but error is {resp.get('error')!r}")
    if status == "incomplete" and not is_obj(resp.get("incomplete_details")):
        errors.append(f"{where}: status incomplete but incomplete_details is {resp.get('incomplete_details')!r}")
    return errors


def validate_response_resource(resp: Any, allow_mcp: bool = False) -> None:
    errors = response_errors(resp, allow_mcp=allow_mcp)
    if errors:
        raise SchemaError("Response resource fails the schema:\n  " + "\n  ".join(errors))


# --------------------------------------------------------------------------------------------
# stream events (PROTOCOL §2.3): required payload fields per type

LIFECYCLE = {
    "response.created",
    "response.queued",
    "response.in_progress",
    "response.completed",
    "response.incomplete",
    "response.failed",
}
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}

_IO = {"item_id": is_str, "output_index": is_int}
_IOC = {**_IO, "content_index": is_int}
_IOS = {**_IO, "summary_index": is_int}

EVENT_FIELDS: dict[str, dict] = {
    **{t: {"response": is_obj} for t in LIFECYCLE},
    "response.output_item.added": {"output_index": is_int, "item": is_obj},
    "response.output_item.done": {"output_index": is_int, "item": is_obj},
    "response.content_part.added": {**_IOC, "part": is_obj},
    "response.content_part.done": {**_IOC, "part": is_obj},
    "response.output_text.delta": {**_IOC, "delta": is_str, "logprobs": is_list},
    "response.output_text.done": {**_IOC, "text": is_str, "logprobs": is_list},
    "response.output_text.annotation.added": {**_IOC, "annotation_index": is_int, "annotation": is_obj},
    "response.refusal.delta": {**_IOC, "delta": is_str},
    "response.refusal.done": {**_IOC, "refusal": is_str},
    "response.function_call_arguments.delta": {**_IO, "delta": is_str},
    "response.function_call_arguments.done": {**_IO, "arguments": is_str, "name": is_str},
    "response.reasoning_text.delta": {**_IOC, "delta": is_str},
    "response.reasoning_text.done": {**_IOC, "text": is_str},
    "response.reasoning_summary_part.added": {**_IOS, "part": is_obj},
    "response.reasoning_summary_part.done": {**_IOS, "part": is_obj},
    "response.reasoning_summary_text.delta": {**_IOS, "delta": is_str},
    "response.reasoning_summary_text.done": {**_IOS, "text": is_str},
    "response.mcp_list_tools.in_progress": dict(_IO),
    "response.mcp_list_tools.completed": dict(_IO),
    "response.mcp_list_tools.failed": dict(_IO),
    "response.mcp_call.in_progress": dict(_IO),
    "response.mcp_call.completed": dict(_IO),
    "response.mcp_call.failed": dict(_IO),
    "response.mcp_call_arguments.delta": {**_IO, "delta": is_str},
    "response.mcp_call_arguments.done": {**_IO, "arguments": is_str},
    "error": {},
}

# Which item type each item-scoped event may target (the Node SDK's expectedOutputItemTypes).
EVENT_ITEM_TYPES = {
    "response.content_part.added": ("message", "reasoning"),
    "response.content_part.done": ("message", "reasoning"),
    "response.output_text.delta": ("message",),
    "response.output_text.done": ("message",),
    "response.output_text.annotation.added": ("message",),
    "response.refusal.delta": ("message",),
    "response.refusal.done": ("message",),
    "response.function_call_arguments.delta": ("function_call",),
    "response.function_call_arguments.done": ("function_call",),
    "response.reasoning_text.delta": ("reasoning",),
    "response.reasoning_text.done": ("reasoning",),
    "response.reasoning_summary_part.added": ("reasoning",),
    "response.reasoning_summary_part.done": ("reasoning",),
    "response.reasoning_summary_text.delta": ("reasoning",),
    "response.reasoning_summary_text.done": ("reasoning",),
    "response.mcp_list_tools.in_progress": ("mcp_list_tools",),
    "response.mcp_list_tools.completed": ("mcp_list_tools",),
    "response.mcp_list_tools.failed": ("mcp_list_tools",),
    "response.mcp_call.in_progress": ("mcp_call",),
    "response.mcp_call.completed": ("mcp_call",),
    "response.mcp_call.failed": ("mcp_call",),
    "response.mcp_call_arguments.delta": ("mcp_call",),
    "response.mcp_call_arguments.done": ("mcp_call",),
}

# The Open Responses streaming union (no MCP events; `error` is allowed in nested form).
OPEN_RESPONSES_EVENTS = {t for t in EVENT_FIELDS if not t.startswith("response.mcp")}


def event_errors(ev: Any, allow_mcp: bool = False) -> list[str]:
    if not is_obj(ev):
        return [f"event is not an object: {ev!r:.200}"]
    t = ev.get("type")
    where = f"event #{ev.get('sequence_number')} {t}"
    errors: list[str] = []
    if not is_str(t):
        return [f"{where}: no string 'type'"]
    if not is_int(ev.get("sequence_number")):
        errors.append(f"{where}: sequence_number {ev.get('sequence_number')!r} is not an integer")
    known = EVENT_FIELDS if allow_mcp else {k: v for k, v in EVENT_FIELDS.items() if k in OPEN_RESPONSES_EVENTS}
    spec = known.get(t)
    if spec is None:
        return errors + [f"{where}: event type outside the allowed union"]
    _check_fields(ev, spec, where, errors)
    if t == "error":
        _check_fields(ev.get("error"), {"type": is_str, "message": is_str}, f"{where}.error", errors)
    if t in LIFECYCLE and is_obj(ev.get("response")):
        errors += response_errors(ev["response"], f"{where}.response", allow_mcp)
    if t in ("response.output_item.added", "response.output_item.done") and is_obj(ev.get("item")):
        errors += item_errors(ev["item"], f"{where}.item", allow_mcp)
    if t in ("response.content_part.added", "response.content_part.done") and is_obj(ev.get("part")):
        pspec = {"output_text": OUTPUT_TEXT_PART, "refusal": REFUSAL_PART, "reasoning_text": REASONING_TEXT_PART}.get(
            ev["part"].get("type")
        )
        if pspec is None:
            errors.append(f"{where}.part: unknown part type {ev['part'].get('type')!r}")
        else:
            _check_fields(ev["part"], pspec, f"{where}.part", errors)
    if "error" in ev and t != "error" and ev["error"]:
        errors.append(f"{where}: non-error event carries a truthy top-level 'error' key")
    return errors


def validate_event(ev: Any, allow_mcp: bool = False) -> None:
    errors = event_errors(ev, allow_mcp)
    if errors:
        raise SchemaError("\n  ".join(errors))


# --------------------------------------------------------------------------------------------
# whole-stream ordering rules


@dataclass
class _Item:
    index: int
    added: dict
    done: dict | None = None
    parts: list = field(default_factory=list)  # [text, open]
    args: str = ""


class StreamChecker:
    """Feeds on events (dicts) one by one; raises AssertionError at the first violation."""

    def __init__(self, allow_mcp: bool = True, schema: bool = True) -> None:
        self.allow_mcp = allow_mcp
        self.schema = schema
        self.events: list[dict] = []
        self.items: list[_Item] = []
        self.ids: set[str] = set()
        self.call_ids: set[str] = set()
        self.terminal: dict | None = None
        self.response_id: str | None = None
        self.text_deltas: dict[tuple[int, int], list[str]] = {}

    def fail(self, ev: dict, msg: str) -> None:
        raise AssertionError(f"event #{len(self.events) - 1} ({ev.get('type')}): {msg}\n  event: {json.dumps(ev)[:600]}")

    def feed(self, ev: dict) -> None:
        self.events.append(ev)
        n = len(self.events) - 1
        t = ev.get("type")
        errs = event_errors(ev, allow_mcp=self.allow_mcp) if self.schema else []
        if errs:
            self.fail(ev, "schema: " + "; ".join(errs))
        if self.terminal is not None:
            self.fail(ev, "event after the terminal event")
        if ev.get("sequence_number") != n:
            self.fail(ev, f"sequence_number {ev.get('sequence_number')} != expected {n}")
        if n == 0 and t != "response.created":
            self.fail(ev, "first event is not response.created")
        if t == "response.created" and n != 0:
            self.fail(ev, "response.created is not first")
        if t in LIFECYCLE:
            rid = ev["response"].get("id")
            if self.response_id is None:
                self.response_id = rid
            elif rid != self.response_id:
                self.fail(ev, f"response id changed from {self.response_id} to {rid}")
            if t in TERMINAL:
                self._terminal(ev)
            return
        if t == "error":
            return
        idx = ev.get("output_index")
        if t == "response.output_item.added":
            if idx != len(self.items):
                self.fail(ev, f"output_index {idx} is not the next free index {len(self.items)}")
            item = ev["item"]
            iid = item.get("id")
            if not iid or iid in self.ids:
                self.fail(ev, f"item id {iid!r} empty or duplicate")
            self.ids.add(iid)
            if item.get("type") == "function_call":
                cid = item.get("call_id")
                if not cid or cid in self.call_ids:
                    self.fail(ev, f"call_id {cid!r} empty or duplicate")
                self.call_ids.add(cid)
            self.items.append(_Item(idx, item))
            return
        if not is_int(idx) or not 0 <= idx < len(self.items):
            self.fail(ev, f"output_index {idx} names no added item")
        it = self.items[idx]
        if it.done is not None:
            self.fail(ev, f"item at output_index {idx} is already done")
        if t == "response.output_item.done":
            item = ev["item"]
            for k in ("type", "id", "call_id"):
                if it.added.get(k) != item.get(k):
                    self.fail(ev, f"output_item.done {k} {item.get(k)!r} != added {it.added.get(k)!r}")
            if any(open_ for _, open_ in it.parts):
                self.fail(ev, "item done while a content part is still open")
            content = item.get("content")
            if it.parts:
                if not is_list(content) or len(content) != len(it.parts):
                    self.fail(ev, f"done item has {len(content or [])} parts, {len(it.parts)} were streamed")
                for i, (text, _) in enumerate(it.parts):
                    if _part_text(content[i]) != text:
                        self.fail(ev, f"done item part {i} text {_part_text(content[i])!r} != streamed {text!r}")
            if item.get("type") == "function_call" and item.get("arguments") != it.args:
                self.fail(ev, f"done function_call arguments {item.get('arguments')!r} != streamed {it.args!r}")
            it.done = item
            return
        if ev.get("item_id") != it.added.get("id"):
            self.fail(ev, f"item_id {ev.get('item_id')!r} != id {it.added.get('id')!r} of output {idx}")
        want = EVENT_ITEM_TYPES.get(t)
        if want and it.added.get("type") not in want:
            self.fail(ev, f"targets a {it.added.get('type')} item; expected {want}")
        if t == "response.content_part.added":
            if ev["content_index"] != len(it.parts):
                self.fail(ev, f"content_index {ev['content_index']} is not the next part index {len(it.parts)}")
            it.parts.append([_part_text(ev["part"]) or "", True])
            return
        if "content_index" in EVENT_FIELDS.get(t, {}):
            ci = ev["content_index"]
            if not 0 <= ci < len(it.parts) or not it.parts[ci][1]:
                self.fail(ev, f"content_index {ci} names no open content part")
            part = it.parts[ci]
            if t.endswith(".delta"):
                part[0] += ev["delta"]
                self.text_deltas.setdefault((idx, ci), []).append(ev["delta"])
            elif t == "response.content_part.done":
                if _part_text(ev["part"]) != part[0]:
                    self.fail(ev, f"content_part.done text {_part_text(ev['part'])!r} != streamed {part[0]!r}")
                part[1] = False
            elif t.endswith(".done"):
                final = ev.get("text", ev.get("refusal"))
                if final != part[0]:
                    self.fail(ev, f"done text {final!r} != concatenated deltas {part[0]!r}")
            return
        if t in ("response.function_call_arguments.delta", "response.mcp_call_arguments.delta"):
            it.args += ev["delta"]
        elif t in ("response.function_call_arguments.done", "response.mcp_call_arguments.done"):
            if ev["arguments"] != it.args:
                self.fail(ev, f"arguments.done {ev['arguments']!r} != concatenated deltas {it.args!r}")
            if t == "response.function_call_arguments.done" and ev.get("name") != it.added.get("name"):
                self.fail(ev, f"name {ev.get('name')!r} != item name {it.added.get('name')!r}")

    def _terminal(self, ev: dict) -> None:
        self.terminal = ev
        resp = ev["response"]
        want = {"response.completed": "completed", "response.incomplete": "incomplete", "response.failed": "failed"}[ev["type"]]
        if resp.get("status") != want:
            self.fail(ev, f"response.status {resp.get('status')!r} on {ev['type']}")
        out = resp.get("output") or []
        if len(out) != len(self.items):
            self.fail(ev, f"terminal output has {len(out)} items, {len(self.items)} were streamed")
        for i, it in enumerate(self.items):
            if want == "completed" and it.done is None:
                self.fail(ev, f"item {i} never got output_item.done")
            if it.done is not None and out[i] != it.done:
                self.fail(ev, f"terminal output[{i}] differs from its output_item.done item:\n  {out[i]}\n  {it.done}")
            elif it.done is None and out[i].get("id") != it.added.get("id"):
                self.fail(ev, f"terminal output[{i}] id differs from the added item")

    def finish(self) -> dict:
        if not self.events:
            raise AssertionError("no events")
        if self.terminal is None:
            raise AssertionError(f"no terminal event; last was {self.events[-1].get('type')}")
        return self.terminal["response"]


def _part_text(part: dict) -> str | None:
    if not is_obj(part):
        return None
    return part.get("text", part.get("refusal"))


def check_stream(events: list[dict], allow_mcp: bool = True, schema: bool = True) -> dict:
    """Checks the whole stream; returns the terminal event's response.

    `schema=False` skips the field-type checks: for events that went through an SDK's models
    (which turn integers into floats and add their own keys), not for wire JSON."""
    c = StreamChecker(allow_mcp=allow_mcp, schema=schema)
    for ev in events:
        c.feed(ev)
    return c.finish()


# --------------------------------------------------------------------------------------------
# raw HTTP


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def post_raw(base: str, path: str, body: Any, timeout: float = 60.0, headers: dict | None = None) -> RawResponse:
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        payload = json.dumps(body).encode() if not isinstance(body, bytes) else body
        h = {"Content-Type": "application/json", "Authorization": "Bearer test-key"}
        h.update(headers or {})
        conn.request("POST", path, body=payload, headers=h)
        r = conn.getresponse()
        data = r.read()
        return RawResponse(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    finally:
        conn.close()


def get_raw(base: str, path: str, timeout: float = 60.0) -> RawResponse:
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Authorization": "Bearer test-key"})
        r = conn.getresponse()
        return RawResponse(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


@dataclass
class SseFrame:
    raw: str
    event: str | None
    data: str | None
    comment: bool


def parse_sse(body: bytes) -> list[SseFrame]:
    """Splits an SSE body into frames strictly on '\\n\\n' (any '\\r' is an error for the caller)."""
    text = body.decode("utf-8")
    if not text.endswith("\n\n"):
        raise AssertionError(f"SSE body does not end with a blank line: ...{text[-80:]!r}")
    frames = []
    for raw in text[:-2].split("\n\n"):
        event = data = None
        lines = raw.split("\n")
        comment = all(line.startswith(":") for line in lines)
        for line in lines:
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: "):
                data = line[len("data: ") :]
        frames.append(SseFrame(raw, event, data, comment))
    return frames


def sse_events(body: bytes) -> list[dict]:
    """The JSON events of an SSE body (comments and [DONE] skipped)."""
    out = []
    for f in parse_sse(body):
        if f.comment or f.data is None or f.data == "[DONE]":
            continue
        out.append(json.loads(f.data))
    return out


def stream_raw(base: str, body: dict, timeout: float = 60.0) -> tuple[RawResponse, list[dict]]:
    r = post_raw(base, "/v1/responses", {**body, "stream": True}, timeout=timeout)
    if r.status != 200:
        raise AssertionError(f"HTTP {r.status}: {r.body[:500]!r}")
    return r, sse_events(r.body)


def shape(output: list) -> list:
    """An output array with ids (and the SDK's own `parsed` key) stripped: what must be equal
    between streamed and non-streamed runs."""
    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k not in ("id", "call_id", "parsed")}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    return strip(output)
