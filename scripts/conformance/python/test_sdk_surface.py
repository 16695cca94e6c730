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

import collections.abc
import json
import types
import typing
from dataclasses import dataclass, field as dc_field
from typing import Any

import pytest
import typing_extensions as te
from openai.types.responses import response_create_params as rcp
from openai.types.responses.response_input_item_param import ResponseInputItemParam
from openai.types.responses.tool_param import ToolParam

from conftest import MODEL
from fixtures import PDF_DATA_URL, PNG_DATA_URL
from oresp import post_raw

# Replaced, when a case runs, by the rmcp test server's endpoint (the `mcp_servers` fixture): the
# cases are built at collection time, before any server is up.
MCP_URL = "<mcp-server-url>"
# Replaced, when a case that answers an approval runs, by a real `mcp_approval_request` the relay
# made in a first request (`approval_setup`), and that response's id.
APPROVAL_REQUEST_ID = "<approval-request-id>"
PREVIOUS_RESPONSE_ID = "<previous-response-id>"

# ---------------------------------------------------------------------------------------------
# walking the SDK's types

_REQUIRED = {typing.Required, te.Required}
_NOT_REQUIRED = {typing.NotRequired, te.NotRequired}
_LITERAL = {typing.Literal, te.Literal}
_UNION = {typing.Union, types.UnionType}
_LISTS = {list, tuple, set, frozenset, collections.abc.Iterable, collections.abc.Sequence, collections.abc.Collection}
_DICTS = {dict, collections.abc.Mapping, collections.abc.MutableMapping}


class Unbuildable(Exception):
    """A type the walker has no minimal value for: its case fails and says which."""


def unwrap(tp: Any) -> tuple[Any, bool | None, str | None]:
    """Strips `Annotated` / `Required` / `NotRequired`: (inner type, required-ness if said, alias)."""
    required, alias = None, None
    while True:
        origin = te.get_origin(tp)
        if origin is te.Annotated or origin is typing.Annotated:
            for meta in getattr(tp, "__metadata__", ()):
                alias = getattr(meta, "alias", None) or alias
            tp = tp.__origin__
        elif origin in _REQUIRED:
            required, tp = True, te.get_args(tp)[0]
        elif origin in _NOT_REQUIRED:
            required, tp = False, te.get_args(tp)[0]
        else:
            return tp, required, alias


@dataclass
class Key:
    name: str  # the SDK's key
    wire: str  # the JSON name (the alias, if the SDK gives one)
    tp: Any
    required: bool


def td_keys(cls: Any) -> list[Key]:
    """A TypedDict's keys. With `from __future__ import annotations` (as the SDK's modules have) a
    `Required[...]` in a `total=False` class does not reach `__required_keys__`, so the wrappers
    kept by `include_extras=True` decide, and `__required_keys__` (totality) otherwise."""
    hints = te.get_type_hints(cls, include_extras=True)
    out = []
    for name, tp in hints.items():
        inner, required, alias = unwrap(tp)
        if required is None:
            required = name in cls.__required_keys__
        out.append(Key(name, alias or name, inner, required))
    return out


def members(tp: Any) -> list[Any]:
    """A union's members other than None (a non-union: itself)."""
    tp = unwrap(tp)[0]
    if te.get_origin(tp) in _UNION:
        return [m for m in te.get_args(tp) if m is not type(None)]
    return [tp]


def type_key(cls: Any) -> tuple[list[str], bool] | None:
    """The values of a TypedDict's `type` Literal and whether `type` is required (None: no such key)."""
    for k in td_keys(cls):
        if k.wire == "type":
            lits = [m for m in members(k.tp) if te.get_origin(m) in _LITERAL]
            if lits:
                return [v for m in lits for v in te.get_args(m)], k.required
    return None


# Short strings valid for their key: (TypedDict name or "*", JSON key) -> value.
STRINGS: dict[tuple[str, str], Any] = {
    ("ResponseCreateParamsBase", "model"): MODEL,
    ("Moderation", "model"): "omni-moderation-latest",
    ("ContextManagement", "type"): "compaction",  # "Currently only 'compaction' is supported."
    ("*", "server_url"): MCP_URL,
    ("*", "server_label"): "surface",
    ("*", "name"): "surface_fn",
    ("*", "image_url"): PNG_DATA_URL,
    ("*", "file_data"): PDF_DATA_URL,
    ("*", "filename"): "surface.pdf",
    ("*", "arguments"): "{}",
    ("*", "input"): "hi",
    ("*", "text"): "hi",
    ("*", "content"): "hi",
    ("*", "call_id"): "call_surface",
    ("*", "output"): "ok",
}
# Non-string keys whose type alone gives no valid value.
VALUES: dict[tuple[str, str], Any] = {
    ("FunctionToolParam", "parameters"): {"type": "object", "properties": {}},
    ("ToolChoiceAllowedParam", "tools"): [{"type": "function", "name": "surface_fn"}],
}
# Optional keys a TypedDict needs in practice (the SDK types cannot say "one of these").
EXTRA_KEYS: dict[str, set[str]] = {
    "Mcp": {"server_url"},  # one of server_url / connector_id / tunnel_id
    "FunctionCallOutput": {"call_id"},  # Optional in the SDK, but it is what ties the output to its call
}
# Item ids, by the item's type: the prefixes OpenAI gives them.
ID_PREFIX = {
    "message": "msg",
    "item_reference": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
    "file_search_call": "fs",
    "web_search_call": "ws",
    "computer_call": "cu",
    "computer_call_output": "cuo",
    "image_generation_call": "ig",
    "code_interpreter_call": "ci",
    "local_shell_call": "lsh",
    "local_shell_call_output": "lsho",
    "shell_call": "sh",
    "shell_call_output": "sho",
    "apply_patch_call": "apc",
    "apply_patch_call_output": "apco",
    "mcp_list_tools": "mcpl",
    "mcp_call": "mcp",
    "mcp_approval_request": "mcpr",
    "mcp_approval_response": "mcpa",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "compaction": "cmp",
    "tool_search_call": "tsc",
    "tool_search_output": "tso",
}
_MISSING = object()


def preset(owner: str, key: str, kind: str | None) -> Any:
    for table in (VALUES, STRINGS):
        for at in ((owner, key), ("*", key)):
            if at in table:
                return table[at]
    if key == "id" and kind is not None:
        return f"{ID_PREFIX.get(kind, 'item')}_surface0001"
    return _MISSING


def minimal(tp: Any, owner: str = "?", key: str = "?", kind: str | None = None, depth: int = 0) -> Any:
    """The minimal valid value of `tp`, the type of `owner`'s key `key` (in an item of type `kind`)."""
    if depth > 20:
        raise Unbuildable(f"{owner}.{key}: the type nests deeper than 20 levels")
    tp = unwrap(tp)[0]
    origin, args = te.get_origin(tp), te.get_args(tp)
    if origin in _UNION:
        ms = members(tp)
        if not ms:
            raise Unbuildable(f"{owner}.{key}: a union of None only")
        tp = ms[0]
        tp = unwrap(tp)[0]
        origin, args = te.get_origin(tp), te.get_args(tp)
    if origin in _LITERAL:
        return args[0]
    value = preset(owner, key, kind)
    if value is not _MISSING and (tp is str or not isinstance(value, str)):
        return value
    if te.is_typeddict(tp):
        return build(tp, depth=depth + 1)
    if origin in _LISTS or tp in _LISTS:
        elem = args[0] if args else str
        return [minimal(elem, owner, key, kind, depth + 1)]
    if origin in _DICTS or tp in _DICTS:
        v = args[1] if len(args) == 2 else object
        return {} if v in (object, Any) else {"k": minimal(v, owner, key, kind, depth + 1)}
    if tp is str:
        return "x"
    if tp is bool:
        return False
    if tp is int:
        return 16
    if tp is float:
        return 0.5
    if tp in (object, Any):
        return {}
    raise Unbuildable(f"{owner}.{key}: no minimal value for {tp!r}")


def build(cls: Any, type_value: str | None = None, with_type: bool = True, depth: int = 0) -> dict:
    """A TypedDict's required keys with minimal values; `type` set to `type_value` (or left out)."""
    keys = td_keys(cls)
    tk = type_key(cls)
    kind = type_value if type_value is not None else (tk[0][0] if tk else None)
    extra = EXTRA_KEYS.get(cls.__name__, set())
    out: dict[str, Any] = {}
    for k in keys:
        if k.wire == "type" and tk is not None:
            if with_type and (k.required or type_value is not None):
                out["type"] = kind
            continue
        if k.required or k.wire in extra:
            out[k.wire] = minimal(k.tp, cls.__name__, k.wire, kind, depth)
    return out


@dataclass
class Variant:
    label: str
    make: Any  # () -> value; raises Unbuildable
    type_value: str | None = None
    cls: Any = None


def variants(tp: Any, owner: str, key: str) -> list[Variant]:
    """The cases of one union: each TypedDict member once per `type` value (and once without `type`
    if it is optional), plus the first non-TypedDict member. Labels are the `type` value, with the
    class name added when two members share it, or the class name when there is no `type`."""
    ms = members(tp)
    tds = [m for m in ms if te.is_typeddict(unwrap(m)[0])]
    if not tds:
        return [Variant("", lambda: minimal(tp, owner, key))]
    out: list[Variant] = []
    others = [m for m in ms if not te.is_typeddict(unwrap(m)[0])]
    if others:
        first = unwrap(others[0])[0]
        label = repr(te.get_args(first)[0]).strip("'") if te.get_origin(first) in _LITERAL else getattr(first, "__name__", str(first))
        out.append(Variant(label, lambda first=first: minimal(first, owner, key)))
    raw: list[tuple[str | None, Any, bool]] = []
    for m in tds:
        cls = unwrap(m)[0]
        tk = type_key(cls)
        if tk is None:
            raw.append((None, cls, True))
            continue
        values, required = tk
        if not required:
            raw.append((None, cls, False))
        raw.extend((v, cls, True) for v in values)
    counts = collections.Counter(v for v, _, _ in raw if v is not None)
    for v, cls, with_type in raw:
        if v is None:
            label = cls.__name__
        elif counts[v] > 1:
            label = f"{v}:{cls.__name__}"
        else:
            label = v
        out.append(
            Variant(
                label,
                lambda cls=cls, v=v, with_type=with_type: build(cls, v, with_type),
                type_value=v,
                cls=cls,
            )
        )
    return out


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


TOOL_VARIANTS = variants(ToolParam, "ToolParam", "tools")
ITEM_VARIANTS = variants(ResponseInputItemParam, "ResponseInputItemParam", "input")
# `tool_choice` types that name a tool of another `type`.
TOOL_CHOICE_TOOL = {"computer_use": "computer"}


def of_type(vs: list[Variant], t: str) -> dict | None:
    for v in vs:
        if v.type_value == t:
            return v.make()
    return None


def companions(name: str, value: Any) -> dict:
    """The other fields `name: value` needs to be a valid request."""
    if name == "stream_options":
        return {"stream": True}
    if name == "tool_choice" and isinstance(value, dict):
        t = value.get("type")
        if t == "allowed_tools":
            return {"tools": [of_type(TOOL_VARIANTS, "function")]}
        tool = of_type(TOOL_VARIANTS, TOOL_CHOICE_TOOL.get(t, t))
        if tool is not None:
            return {"tools": [tool]}
    return {}


def items_before(item: dict) -> tuple[list[dict], dict]:
    """What an input item needs to refer to things that exist: the items before it (a call output
    `X_output` gets its call `X` or `X_call`, built from the same union and so with the same
    `call_id`) and other fields (an item that answers an `mcp_approval_request` answers a real one,
    made by a first request: `previous_response_id` is that response, `tools` its mcp tool)."""
    kind = item.get("type") or ""
    before: list[dict] = []
    extra: dict = {}
    if kind.endswith("_output"):
        stem = kind.removesuffix("_output")
        for t in (stem, stem + "_call"):
            call = of_type(ITEM_VARIANTS, t)
            if call is not None:
                before.append(call)
                break
    if "approval_request_id" in item:
        item["approval_request_id"] = APPROVAL_REQUEST_ID
        extra = {"previous_response_id": PREVIOUS_RESPONSE_ID, "tools": [of_type(TOOL_VARIANTS, "mcp")]}
    return before, extra


def sent_params(body: dict) -> set[str]:
    """`tools[i]`, `tools[i].type`, `input[i]`, `input[i].type` for every tool and item sent."""
    out = set()
    for key in ("tools", "input"):
        if isinstance(body.get(key), list):
            for i in range(len(body[key])):
                out |= {f"{key}[{i}]", f"{key}[{i}].type"}
    return out


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


def substitute(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        return values.get(value, value)
    if isinstance(value, dict):
        return {k: substitute(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, values) for v in value]
    return value


def approval_setup(relay, mcp_url: str) -> dict[str, str]:
    """A first request whose model calls an MCP tool that needs approval (the default
    `require_approval`): its `mcp_approval_request` is what an approval answer answers."""
    tool = substitute(of_type(TOOL_VARIANTS, "mcp"), {MCP_URL: mcp_url})
    body = {"model": MODEL, "input": 'CALL add {"a":2,"b":3}', "tools": [tool]}
    r = post_raw(relay.base, "/v1/responses", body, timeout=60)
    assert r.status == 200, f"the approval setup request got HTTP {r.status}: {r.body[:300]!r}; sent {json.dumps(body)}"
    resp = json.loads(r.body)
    requests = [o for o in resp["output"] if o["type"] == "mcp_approval_request"]
    assert requests, f"the approval setup request made no mcp_approval_request: {resp['output']}"
    return {APPROVAL_REQUEST_ID: requests[0]["id"], PREVIOUS_RESPONSE_ID: resp["id"]}


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
