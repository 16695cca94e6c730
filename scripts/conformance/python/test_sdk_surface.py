"""The request surface of the pinned OpenAI Python SDK, derived from the SDK's own types (issue 20,
item 6): every request field, every tool type and every input item type the SDK can send must be
recognised by the relay, over both upstream kinds (chat, responses). A newer SDK adds cases by
itself; `test_surface_derivation_covers_the_sdk` checks the walk missed no union member or field.

Derivation. The cases are walked out of the SDK's TypedDicts and unions with
`typing_extensions.get_type_hints(include_extras=True)`, `get_origin` / `get_args` (Literal,
Required / NotRequired, Union / Optional, Annotated, Iterable / List / Sequence, Dict):

* `field[...]`: every key of `response_create_params.ResponseCreateParamsBase`, plus the keys the
  `ResponseCreateParamsNonStreaming` / `...Streaming` variants add (`stream`, once per variant),
  plus the relay's own non-SDK fields `client_metadata` ({"k": "v"}) and `max_steps` (3). Each is
  sent next to `model` and `input: "hi"` (non-streaming unless the case is about streaming).
* `tool[...]`: every member of `tool_param.ToolParam`, once per value of its `type` Literal (so
  `web_search` and `web_search_2025_08_26` are two cases), sent as `tools: [tool]`, `input: "hi"`.
* `item[...]`: every member of `response_input_item_param.ResponseInputItemParam`, once per value
  of its `type` Literal, and once more without `type` where the SDK makes `type` optional
  (EasyInputMessageParam, Message, ItemReference), sent as `input: [..., item]`, after a user
  message when the first item is not a message.

A value is the minimal valid one for its type: a TypedDict gets its required keys (`Required[...]`,
or the keys of a total TypedDict; the SDK's modules use `from __future__ import annotations`, so
`__required_keys__` alone misses `Required[...]`) with minimal values; a Union its first member that
is not None; a Literal its first value; a list / iterable one minimal element; a `Dict[str, V]` one
entry `{"k": minimal(V)}` (`{}` when V is `object`); `str` "x", or a short string valid for that key
(`STRINGS`: the fake upstream's model name for `model`, data: URLs for `image_url` / `file_data`,
the MCP test server's endpoint for `server_url`, `"{}"` for `arguments`, ...), and ids get their
item type's prefix (`ID_PREFIX`); `int` 16 (the smallest `max_output_tokens`); `float` 0.5; `bool`
False; `object` {}. Where a field's type is a union with TypedDict members (`tool_choice`,
`conversation`) each member, once per `type` value, is its own case, plus one case for the first
member that is not a TypedDict. Keys the SDK marks optional but a request needs get a value too
(`EXTRA_KEYS`: an `mcp` tool's `server_url`, the SDK leaving all of `server_url` / `connector_id` /
`tunnel_id` optional; a `function_call_output`'s `call_id`). A type the walker has no value for
fails its case (nothing is skipped).

Companions: what a minimal value needs to be valid at all is sent with it, built from the same
unions. A `tool_choice` naming a tool type also sends that tool (`computer_use` names the `computer`
tool; `allowed_tools`, whose `tools` list names a function, the function tool); `stream_options`
also sends `stream: true`; a call output item (`X_output`) is preceded by its call (`X` or `X_call`,
same `call_id`); an `mcp_approval_response` answers a real `mcp_approval_request`, made by a first
request whose model calls the MCP test server's `add` (`approval_setup`), with that response as
`previous_response_id` and its mcp tool in `tools`.

The rule a case checks (`check()`). It passes on a 2xx (a response object whose status is not
`failed`, or an SSE stream for `stream: true`) or a 4xx error that does not say the relay does not
know what was sent. It fails on:

* any error whose `code` is `unknown_parameter`, wherever its `param` points;
* an `invalid_value` or `invalid_type` error whose `param` is the field or anything under it
  (`tool_choice`, `tool_choice.type`, `text.format`, ...), or `tools[i]` / `tools[i].type` or
  `input[i]` / `input[i].type` for any tool or item the case sent (so a companion the relay rejects
  fails the case too, instead of hiding it);
* a 5xx (a request the relay cannot honour deserves a 4xx that says why), or an error body that is
  not OpenAI's `{"error": {...}}` envelope.

Anything else is accepted: `unsupported_parameter` / `unsupported_value` (or another code) saying
why the field cannot be honoured, and errors about what a minimal value refers to rather than about
its type, which name a key below the field or item: a `previous_response_id` that does not exist
(`previous_response_not_found`), an `item_reference` to an unknown id (`invalid_value` on
`input[N].id`; it may also resolve, to an item an earlier case sent with that id), a
`missing_required_parameter` on a key below the item, encrypted content that does not decrypt, ...
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field as dc_field
from typing import Any

import pytest
import typing_extensions as te
from openai.types.responses import response_create_params as rcp
from openai.types.responses.response_input_item_param import ResponseInputItemParam
from openai.types.responses.tool_param import ToolParam

from conftest import MODEL
from oresp import post_raw
from sdk_walk import (
    APPROVAL_REQUEST_ID,
    ITEM_VARIANTS,
    MCP_URL,
    TOOL_VARIANTS,
    Unbuildable,
    approval_setup,
    companions,
    items_before,
    sent_params,
    substitute,
    td_keys,
    type_key,
    unwrap,
    variants,
)

# ---------------------------------------------------------------------------------------------
# the cases


@dataclass
class Case:
    id: str
    area: str  # "field", "tool" or "item"
    subject: str  # the field name, or the tool / item type
    body: dict | None
    error: str | None = None  # why no body could be built (the case then fails)
    params: set[str] = dc_field(default_factory=set)  # an invalid_value / invalid_type must not name these
    prefixes: set[str] = dc_field(default_factory=set)  # ... nor these or anything under them


def base_body() -> dict:
    return {"model": MODEL, "input": "hi"}


def field_cases() -> list[Case]:
    out = []
    specs: list[tuple[str, Any, str]] = []  # (JSON name, type, label suffix)
    base = {k.wire: k for k in td_keys(rcp.ResponseCreateParamsBase)}
    specs += [(k.wire, k.tp, "") for k in base.values()]
    for variant in (rcp.ResponseCreateParamsNonStreaming, rcp.ResponseCreateParamsStreaming):
        suffix = variant.__name__.removeprefix("ResponseCreateParams")
        specs += [(k.wire, k.tp, suffix) for k in td_keys(variant) if k.wire not in base]
    for name, tp, suffix in specs:
        vs = variants(tp, "ResponseCreateParamsBase", name)
        for v in vs:
            label = ":".join(x for x in (name, v.label if len(vs) > 1 else "", suffix) if x)
            try:
                value = v.make()
                extra = companions(name, value)
                body = {**base_body(), **extra, name: value}
                params = sent_params(extra) | {k for k in extra if k != "tools"}
                out.append(Case(f"field[{label}]", "field", name, body, params=params, prefixes={name}))
            except Unbuildable as e:
                out.append(Case(f"field[{label}]", "field", name, None, error=str(e)))
    # The relay's own fields, not in the SDK.
    for name, value in (("client_metadata", {"k": "v"}), ("max_steps", 3)):
        out.append(Case(f"field[{name}]", "field", name, {**base_body(), name: value}, prefixes={name}))
    return out


def tool_cases() -> list[Case]:
    out = []
    for v in TOOL_VARIANTS:
        subject = v.type_value or v.label
        try:
            body = {**base_body(), "tools": [v.make()]}
            out.append(Case(f"tool[{v.label}]", "tool", subject, body, params=sent_params(body)))
        except Unbuildable as e:
            out.append(Case(f"tool[{v.label}]", "tool", subject, None, error=str(e)))
    return out


def is_message(item: dict) -> bool:
    return item.get("type", "message") == "message" and "role" in item


def item_cases() -> list[Case]:
    out = []
    for v in ITEM_VARIANTS:
        subject = v.type_value or v.label
        try:
            item = v.make()
            before, extra = items_before(item)
            items = [*before, item]
            if not is_message(items[0]) and "previous_response_id" not in extra:
                items.insert(0, {"role": "user", "content": "hi"})
            body = {"model": MODEL, **extra, "input": items}
            out.append(Case(f"item[{v.label}]", "item", subject, body, params=sent_params(body)))
        except Unbuildable as e:
            out.append(Case(f"item[{v.label}]", "item", subject, None, error=str(e)))
    return out


FIELD_CASES = field_cases()
TOOL_CASES = tool_cases()
ITEM_CASES = item_cases()


# ---------------------------------------------------------------------------------------------
# sending and checking


def check(case: Case, relay, mcp_servers) -> None:
    assert case.body is not None, f"{case.id}: no request could be derived from the SDK's types: {case.error}"
    values = {MCP_URL: mcp_servers.rust}
    if APPROVAL_REQUEST_ID in json.dumps(case.body):
        values.update(approval_setup(relay, mcp_servers.rust))
    body = substitute(case.body, values)
    sent = json.dumps(body)
    r = post_raw(relay.base, "/v1/responses", body, timeout=60)
    ctype = r.headers.get("content-type", "")
    text = r.body.decode("utf-8", "replace")
    where = f"{case.id} on the {relay.kind} relay: HTTP {r.status}"
    if 200 <= r.status < 300:
        if body.get("stream") is True:
            assert ctype.startswith("text/event-stream"), f"{where} with content-type {ctype!r}; sent {sent}"
            assert "response.created" in text, f"{where}: an SSE stream without response.created; sent {sent}"
        else:
            obj = json.loads(text)
            assert obj.get("object") == "response", f"{where}: not a response object: {text[:300]}; sent {sent}"
            assert obj.get("status") != "failed", f"{where}: a failed response: {obj.get('error')}; sent {sent}"
        return
    try:
        err = json.loads(text)["error"]
        code, param, message = err.get("code"), err.get("param"), err.get("message")
    except (ValueError, KeyError, TypeError):
        raise AssertionError(f"{where} without an error envelope: {text[:300]!r}; sent {sent}") from None
    detail = f"{where} code={code} param={param} message={message!r}; sent {sent}"
    assert r.status < 500, f"a server error: {detail}"
    assert code != "unknown_parameter", f"not recognised: {detail}"
    if code in ("invalid_value", "invalid_type"):
        p = param or ""
        named = p in case.params or any(p == q or p.startswith((q + ".", q + "[")) for q in case.prefixes)
        assert not named, f"rejected as invalid: {detail}"


@pytest.mark.parametrize("case", FIELD_CASES, ids=[c.id for c in FIELD_CASES])
def test_surface_request_field(case, relay, mcp_servers):
    check(case, relay, mcp_servers)


@pytest.mark.parametrize("case", TOOL_CASES, ids=[c.id for c in TOOL_CASES])
def test_surface_tool(case, relay, mcp_servers):
    check(case, relay, mcp_servers)


@pytest.mark.parametrize("case", ITEM_CASES, ids=[c.id for c in ITEM_CASES])
def test_surface_input_item(case, relay, mcp_servers):
    check(case, relay, mcp_servers)


def test_surface_derivation_covers_the_sdk():
    """The walk found every member of the three unions and every request field (so a case per SDK
    type exists), and the ids are unique."""
    tool_types = {v for m in te.get_args(ToolParam) for v in (type_key(unwrap(m)[0]) or ([m.__name__], True))[0]}
    assert tool_types <= {c.subject for c in TOOL_CASES}, tool_types - {c.subject for c in TOOL_CASES}
    item_types = {v for m in te.get_args(ResponseInputItemParam) for v in (type_key(unwrap(m)[0]) or ([m.__name__], True))[0]}
    assert item_types <= {c.subject for c in ITEM_CASES}, item_types - {c.subject for c in ITEM_CASES}
    fields = {k.wire for k in td_keys(rcp.ResponseCreateParamsStreaming)} | {k.wire for k in td_keys(rcp.ResponseCreateParamsNonStreaming)}
    assert fields <= {c.subject for c in FIELD_CASES}, fields - {c.subject for c in FIELD_CASES}
    ids = [c.id for c in FIELD_CASES + TOOL_CASES + ITEM_CASES]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
