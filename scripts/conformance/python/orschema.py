"""The Open Responses specification's published schemas (OpenAPI 3.1, `info.version` 2026-04-24),
as the wheel `openresponses-py` ships them (`openresponses/openapi/2026-04-24.json`; pinned in
requirements.txt), applied with `jsonschema` (Draft 2020-12, which OpenAPI 3.1 schemas are).

- ``response_errors(obj)``: a Response against `ResponseResource`;
- ``event_errors(ev)``: a streamed event against the schema of its `type`; an event outside the
  specification's catalogue (the MCP events, `response.output_text.done`'s relatives OpenAI adds)
  is not the specification's to judge and gets no errors, unless ``only_spec`` says it must be one;
- ``compact_errors(obj)``: a `POST /v1/responses/compact` answer against `CompactResource`.

The package is located, not imported (its `__init__` needs an HTTP client the tests do not use).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import pathlib
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

VERSION = "2026-04-24"


@functools.cache
def spec() -> dict:
    found = importlib.util.find_spec("openresponses")
    assert found and found.submodule_search_locations, "openresponses-py is not installed (scripts/test.sh installs it)"
    path = pathlib.Path(found.submodule_search_locations[0]) / "openapi" / f"{VERSION}.json"
    doc = json.loads(path.read_text())
    assert doc["info"]["version"] == VERSION, doc["info"]["version"]
    return doc


@functools.cache
def validator(name: str) -> Draft202012Validator:
    doc = spec()
    assert name in doc["components"]["schemas"], f"the specification has no schema {name}"
    # The whole document is the root, so its `#/components/schemas/...` references resolve.
    return Draft202012Validator({**doc, "$ref": f"#/components/schemas/{name}"})


@functools.cache
def event_schemas() -> dict[str, str]:
    """Event `type` -> schema name, read from the specification's streaming union."""
    doc = spec()
    union = doc["paths"]["/responses"]["post"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
    out = {}
    for ref in union.get("oneOf") or union.get("anyOf"):
        name = ref["$ref"].rsplit("/", 1)[-1]
        props = doc["components"]["schemas"][name]["properties"]["type"]
        for value in props.get("enum") or [props.get("const")]:
            out[value] = name
    return out


def _errors(name: str, obj: Any, what: str) -> list[str]:
    errs = list(validator(name).iter_errors(obj))
    if not errs:
        return []
    best = best_match(errs)
    path = "/".join(map(str, best.absolute_path)) or "(root)"
    return [f"{what} does not validate against the Open Responses {name} schema at {path}: {best.message}"]


def response_errors(obj: dict) -> list[str]:
    return _errors("ResponseResource", obj, f"response {obj.get('id')}")


def compact_errors(obj: dict) -> list[str]:
    return _errors("CompactResource", obj, "compacted response")


def event_errors(ev: dict, only_spec: bool = False) -> list[str]:
    name = event_schemas().get(ev.get("type"))
    if name is None:
        return [f"event {ev.get('type')!r} is not in the Open Responses catalogue"] if only_spec else []
    return _errors(name, ev, f"event #{ev.get('sequence_number')} {ev.get('type')}")
