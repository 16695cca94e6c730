"""Every key the pinned OpenAI Python SDK's request types allow, at every depth: for every input
item type, content part, tool type, `text.format`, `include` value and nested object, an
instance with every key filled (`sdk_walk.full`: each union's members and each `role` in turn,
lists holding one element of every member, values from the type's annotations) is sent over
both upstream kinds, and the relay must recognise every key.

`test_sdk_surface.py` checks that each request field, tool type and item type is recognised with
its required keys; this file checks every optional key inside them, which that test never sends.

The rule (`check_deep`). A key the relay answers with `unknown_parameter` fails the case, named
by its SDK type and key (read from the instance's type tree, `sdk_walk.type_at`); the relay is
then asked again without that key, so one run names every key it does not know, not only the
first. Besides that, a case fails on a 5xx, an error outside OpenAI's envelope, and an
`invalid_type` error inside what it sent (the SDK's type allowed that value). A refusal with a
reason (`unsupported_value`, `unsupported_parameter`, `invalid_value` saying what the relay cannot
serve, a reference to something that does not exist) is allowed: those are listed in
docs/api.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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
    MCP_URL,
    Unbuildable,
    approval_setup,
    companions,
    full,
    full_typeddict,
    items_before,
    members,
    substitute,
    td_keys,
    type_at,
    type_key,
    unwrap,
)

# Request fields sent whole elsewhere in this file (`input` by the item cases, `tools` by the tool
# cases) or that only pick the upstream (`model`).
NOT_FIELDS = {"input", "tools", "model"}


@dataclass
class Deep:
    id: str
    body: dict | None
    tree: dict
    error: str | None = None


def _type_values(cls: Any) -> list[str | None]:
    tk = type_key(cls)
    return list(tk[0]) if tk else [None]


def _label(where: str) -> str:
    return where or "all"


# Item types more than one SDK class sends (an input message, and an assistant's output message).
SHARED_TYPES = {"message"}


def item_cases() -> list[Deep]:
    out = []
    for m in te.get_args(ResponseInputItemParam):
        cls = unwrap(m)[0]
        for t in _type_values(cls):
            name = f"{t}:{cls.__name__}" if t in SHARED_TYPES else (t or cls.__name__)
            try:
                instances = full_typeddict(cls, t)
            except Unbuildable as e:
                out.append(Deep(f"item[{name}]", None, {}, str(e)))
                continue
            for f in instances:
                item = f.value
                before, extra = items_before(item)
                items = [*before, item]
                trees = [None] * len(before) + [f.tree]
                if not (item.get("type", "message") == "message" and "role" in item) and "previous_response_id" not in extra:
                    items.insert(0, {"role": "user", "content": "hi"})
                    trees.insert(0, None)
                body = {"model": MODEL, **extra, "input": items}
                out.append(Deep(f"item[{name}:{_label(f.where)}]", body, {"": "ResponseCreateParams", "input": trees}))
    return out


def tool_cases() -> list[Deep]:
    out = []
    for m in te.get_args(ToolParam):
        cls = unwrap(m)[0]
        for t in _type_values(cls):
            name = t or cls.__name__
            try:
                instances = full_typeddict(cls, t)
            except Unbuildable as e:
                out.append(Deep(f"tool[{name}]", None, {}, str(e)))
                continue
            for f in instances:
                body = {"model": MODEL, "input": "hi", "tools": [f.value]}
                out.append(Deep(f"tool[{name}:{_label(f.where)}]", body, {"": "ResponseCreateParams", "tools": [f.tree]}))
    return out


def field_cases() -> list[Deep]:
    """Every request field whose value has keys of its own (`text` and its formats, `reasoning`,
    `prompt`, `tool_choice`, `conversation`, `context_management`, `stream_options`, ...) and
    `include` with every value at once."""
    out = []
    seen = set()
    for params in (rcp.ResponseCreateParamsNonStreaming, rcp.ResponseCreateParamsStreaming):
        for k in td_keys(params):
            if k.wire in NOT_FIELDS or k.wire in seen:
                continue
            seen.add(k.wire)
            structured = any(
                te.is_typeddict(unwrap(x)[0]) or te.get_origin(unwrap(x)[0]) in (list,) for x in members(k.tp)
            )
            if not structured and k.wire != "include":
                continue
            try:
                instances = full(k.tp, "ResponseCreateParamsBase", k.wire)
            except Unbuildable as e:
                out.append(Deep(f"field[{k.wire}]", None, {}, str(e)))
                continue
            for f in instances:
                extra = companions(k.wire, f.value)
                body = {"model": MODEL, "input": "hi", **extra, k.wire: f.value}
                out.append(Deep(f"field[{k.wire}:{_label(f.where)}]", body, {"": "ResponseCreateParams", k.wire: f.tree}))
    return out


def _unique(cases: list[Deep]) -> list[Deep]:
    """Ids made unique: two SDK classes can share a `type` (`message`), and two alternatives a label."""
    seen: dict[str, int] = {}
    for c in cases:
        n = seen.get(c.id, 0)
        seen[c.id] = n + 1
        if n:
            c.id = f"{c.id}#{n + 1}"
    return cases


ITEMS, TOOLS, FIELDS = _unique(item_cases()), _unique(tool_cases()), _unique(field_cases())


# What the relay refused with a reason, over the whole run (printed at the end, for docs/api.md).
REFUSALS: set[str] = set()


def _drop(body: dict, param: str) -> bool:
    """Removes the key `param` points at from `body`; False if there is no such key."""
    parts = [p for p in param.replace("[", ".[").split(".") if p]
    node: Any = body
    for p in parts[:-1]:
        if p.startswith("["):
            i = int(p[1:-1])
            if not isinstance(node, list) or i >= len(node):
                return False
            node = node[i]
        elif isinstance(node, dict) and p in node:
            node = node[p]
        else:
            return False
    last = parts[-1] if parts else ""
    if isinstance(node, dict) and last in node:
        del node[last]
        return True
    return False


def check_deep(case: Deep, relay, mcp_servers) -> None:
    assert case.body is not None, f"{case.id}: no request could be derived from the SDK's types: {case.error}"
    values = {MCP_URL: mcp_servers.rust}
    if APPROVAL_REQUEST_ID in json.dumps(case.body):
        values.update(approval_setup(relay, mcp_servers.rust))
    body = substitute(case.body, values)
    unknown: list[str] = []
    for _ in range(60):
        sent = json.dumps(body)
        r = post_raw(relay.base, "/v1/responses", body, timeout=60)
        text = r.body.decode("utf-8", "replace")
        where = f"{case.id} on the {relay.kind} relay: HTTP {r.status}"
        if 200 <= r.status < 300:
            if body.get("stream") is not True:
                obj = json.loads(text)
                assert obj.get("object") == "response", f"{where}: not a response object: {text[:300]}; sent {sent}"
            break
        try:
            err = json.loads(text)["error"]
            code, param, message = err.get("code"), err.get("param") or "", err.get("message")
        except (ValueError, KeyError, TypeError):
            raise AssertionError(f"{where} without an error envelope: {text[:300]!r}; sent {sent}") from None
        detail = f"{where} code={code} param={param} message={message!r}; sent {sent}"
        assert r.status < 500, f"a server error: {detail}"
        if code == "unknown_parameter":
            owner, key = type_at(case.tree, param) or ("?", param)
            unknown.append(f"{owner}.{key} (param {param}): {message}")
            assert _drop(body, param), f"the relay named a key that was not sent: {detail}"
            continue
        sent_roots = [k for k in ("input", "tools") if isinstance(case.body.get(k), list)]
        inside = any(param == r or param.startswith((r + "[", r + ".")) for r in sent_roots) or any(
            param == k or param.startswith((k + ".", k + "[")) for k in case.body if k not in ("model", "input", "tools")
        )
        assert not (code == "invalid_type" and inside), f"a value the SDK's type allows refused as the wrong type: {detail}"
        # A refusal with a reason: recorded (docs/api.md lists them), and the rest of the
        # instance is still checked, without the refused key.
        owner, key = type_at(case.tree, param) or ("?", param)
        REFUSALS.add(f"{owner}.{key}: {code}: {message}")
        if not _drop(body, param):
            break
    assert not unknown, f"{case.id} on the {relay.kind} relay: keys the SDK's types allow, refused as unknown:\n  " + "\n  ".join(unknown)


@pytest.mark.parametrize("case", ITEMS, ids=[c.id for c in ITEMS])
def test_every_key_of_an_input_item_is_recognised(case, relay, mcp_servers):
    check_deep(case, relay, mcp_servers)


@pytest.mark.parametrize("case", TOOLS, ids=[c.id for c in TOOLS])
def test_every_key_of_a_tool_is_recognised(case, relay, mcp_servers):
    check_deep(case, relay, mcp_servers)


@pytest.mark.parametrize("case", FIELDS, ids=[c.id for c in FIELDS])
def test_every_key_of_a_request_field_is_recognised(case, relay, mcp_servers):
    check_deep(case, relay, mcp_servers)


def test_the_deep_walk_reaches_every_content_part_and_include_value():
    """The instances carry every content part type of a message, every `text.format` type and
    every `include` value the SDK's types name (so a newer SDK's additions are sent by themselves)."""
    sent = json.dumps([c.body for c in ITEMS + FIELDS if c.body])
    from openai.types.responses.response_input_content_param import ResponseInputContentParam
    from openai.types.responses.response_includable import ResponseIncludable
    from openai.types.responses.response_format_text_config_param import ResponseFormatTextConfigParam

    for union in (ResponseInputContentParam, ResponseFormatTextConfigParam):
        for m in members(union):
            for t in _type_values(unwrap(m)[0]):
                assert f'"type": "{t}"' in sent, f"no instance sends a {union.__name__} member of type {t!r}"
    for v in te.get_args(ResponseIncludable):
        assert f'"{v}"' in sent, f"no instance sends include value {v!r}"
    ids = [c.id for c in ITEMS + TOOLS + FIELDS]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
