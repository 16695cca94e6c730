"""Walking the pinned OpenAI Python SDK's request types: the minimal valid value of a type
(`minimal`, `build`), the cases of a union (`variants`), and the instance with every key a type
allows (`full`), for the type-derived conformance tests (`test_sdk_surface.py`, the request's
fields, tools and items with their required keys; `test_sdk_surface_deep.py`, every key at every
depth). The walk uses `typing_extensions.get_type_hints(include_extras=True)`, `get_origin` and
`get_args`; the SDK's modules use `from __future__ import annotations`.
"""

from __future__ import annotations

import collections
import collections.abc
import json
import types
import typing
from dataclasses import dataclass
from typing import Any

import typing_extensions as te

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
# what a value needs beside it to make a valid request

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


# ---------------------------------------------------------------------------------------------
# every key at every depth

# Keys whose Literal values each make an instance of their own (the others take their first
# value): a message's `role` decides what else the message may carry (`phase` is for assistants).
EVERY_LITERAL = {"role"}


@dataclass
class Full:
    """One instance of a type with every key it allows, at every depth. `tree` mirrors `value`: a
    dict's tree is `{"": the TypedDict's name, key: the key's tree}`, a list's the list of its
    elements' trees, a scalar's None; `where` says which alternative made this instance."""

    value: Any
    tree: Any
    where: str = ""


def _literal_values(tp: Any) -> list[Any]:
    return [v for m in members(tp) if te.get_origin(unwrap(m)[0]) in _LITERAL for v in te.get_args(unwrap(m)[0])]


def full(tp: Any, owner: str = "?", key: str = "?", kind: str | None = None, stack: tuple = ()) -> list[Full]:
    """The instances of `tp` (the type of `owner`'s key `key`) with every key filled, at every
    depth. The first is the baseline: each union its first TypedDict member (else its first
    member), each Literal its first value, each list one element per member of its element type's
    union. Every other instance differs from the baseline in one place: another member of a union,
    another value of an `EVERY_LITERAL` key. So the instances grow with the number of
    alternatives, not with their product."""
    if len(stack) > 12:
        raise Unbuildable(f"{owner}.{key}: the type nests deeper than 12 levels")
    tp = unwrap(tp)[0]
    origin, args = te.get_origin(tp), te.get_args(tp)
    if origin in _UNION:
        ms = [unwrap(m)[0] for m in members(tp)]
        lits = [m for m in ms if te.get_origin(m) in _LITERAL]
        tds = [m for m in ms if te.is_typeddict(m)]
        others = [m for m in ms if m not in lits and m not in tds]
        out: list[Full] = []
        for m in tds + others:
            out += full(m, owner, key, kind, stack)
        if lits:
            first = full(lits[0], owner, key, kind, stack)
            out = out + first if out else first
        if not out:
            raise Unbuildable(f"{owner}.{key}: a union of None only")
        return out
    if origin in _LITERAL:
        values = args if key in EVERY_LITERAL else args[:1]
        return [Full(v, None, f"={v}" if i else "") for i, v in enumerate(values)]
    value = preset(owner, key, kind)
    if value is not _MISSING and (tp is str or not isinstance(value, str)):
        return [Full(value, None)]
    if te.is_typeddict(tp):
        return full_typeddict(tp, None, stack)
    if origin in _LISTS or tp in _LISTS:
        elem = args[0] if args else str
        return _full_list(elem, owner, key, kind, stack)
    if origin in _DICTS or tp in _DICTS:
        v = args[1] if len(args) == 2 else object
        if v in (object, Any):
            return [Full({}, None)]
        return [Full({"k": f.value}, {"": "dict", "k": f.tree}, f.where) for f in full(v, owner, key, kind, stack)]
    return [Full(minimal(tp, owner, key, kind), None)]


def _full_list(elem: Any, owner: str, key: str, kind: str | None, stack: tuple) -> list[Full]:
    """A list holding one instance of each member of its element type (a union of content parts,
    annotations, ...), so one request carries every part type; each later instance replaces one
    element by one of its alternatives."""
    if te.get_origin(unwrap(elem)[0]) in _LITERAL:
        # A list of a Literal's values (`include`): every value, in one list.
        return [Full(list(_literal_values(elem)), None)]
    per_member = [full(m, owner, key, kind, stack) for m in members(elem)] or [full(elem, owner, key, kind, stack)]
    base = [alts[0] for alts in per_member]
    out = [Full([f.value for f in base], [f.tree for f in base])]
    for i, alts in enumerate(per_member):
        for alt in alts[1:]:
            elems = list(base)
            elems[i] = alt
            out.append(Full([f.value for f in elems], [f.tree for f in elems], f"[{i}]{alt.where}"))
    return out


def full_typeddict(cls: Any, type_value: str | None = None, stack: tuple = ()) -> list[Full]:
    """A TypedDict with every key (the `type` key set to `type_value`, or its first value)."""
    if cls in stack:
        # A type that contains itself: below the first level it gets its required keys only.
        value = build(cls, type_value, depth=len(stack))
        return [Full(value, {"": cls.__name__})]
    stack = (*stack, cls)
    keys = td_keys(cls)
    tk = type_key(cls)
    kind = type_value if type_value is not None else (tk[0][0] if tk else None)
    fields: list[tuple[str, list[Full]]] = []
    for k in keys:
        if k.wire == "type" and tk is not None:
            fields.append(("type", [Full(kind, None)]))
            continue
        fields.append((k.wire, full(k.tp, cls.__name__, k.wire, kind, stack)))
    base = {name: alts[0] for name, alts in fields}

    def make(chosen: dict[str, Full], where: str) -> Full:
        value = {name: f.value for name, f in chosen.items()}
        tree = {"": cls.__name__, **{name: f.tree for name, f in chosen.items()}}
        return Full(value, tree, where)

    out = [make(base, "")]
    for name, alts in fields:
        for alt in alts[1:]:
            out.append(make({**base, name: alt}, f".{name}{alt.where}"))
    return out


def type_at(tree: Any, param: str) -> tuple[str, str] | None:
    """The TypedDict and key a relay error's `param` (`input[1].content[0].phase`) points at, read
    from the tree of the body sent: (type name, key), or None when the path leaves the tree."""
    parts = [p for p in param.replace("[", ".[").split(".") if p]
    node, owner = tree, None
    for i, p in enumerate(parts):
        if p.startswith("["):
            if not isinstance(node, list):
                return None
            n = int(p[1:-1])
            if n >= len(node):
                return None
            node = node[n]
            continue
        if not isinstance(node, dict):
            return None
        owner = node.get("", owner)
        if i == len(parts) - 1:
            return (owner or "?", p)
        node = node.get(p)
    return None
