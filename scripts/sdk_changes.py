#!/usr/bin/env python3
"""What a newer OpenAI Python SDK adds to the Responses API surface, against the pinned one.

    .venv/bin/python scripts/sdk_changes.py [VERSION]     (default: the newest on PyPI)

Installs `openai==VERSION` (without its dependencies, which the pinned venv has) into a temporary
directory, walks the request and response types of both SDKs, and prints what was added and
removed: request TypedDicts and their keys (every depth, from `ResponseCreateParams`), the members
of the input item, tool, content part and include unions, Response and output item fields, and
the stream event types. Bumping the pin is then the `openai==` line of
scripts/conformance/requirements.txt plus what this lists. Reaches PyPI only (pip).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

# Run in a child interpreter with the SDK to walk first on sys.path: prints the surface as JSON.
DUMP = r'''
import json, sys, types, typing, collections.abc
import typing_extensions as te
import openai
from openai.types.responses import response_create_params as rcp
from openai.types.responses.response import Response
from openai.types.responses.response_stream_event import ResponseStreamEvent

UNION = {typing.Union, types.UnionType}
WRAP = {typing.Required, te.Required, typing.NotRequired, te.NotRequired}

def unwrap(tp):
    while True:
        o = te.get_origin(tp)
        if o is te.Annotated or o is typing.Annotated:
            tp = tp.__origin__
        elif o in WRAP:
            tp = te.get_args(tp)[0]
        else:
            return tp

def inner(tp):
    """The TypedDicts / models / Literals a type refers to."""
    tp = unwrap(tp)
    o = te.get_origin(tp)
    if o in UNION or (o is not None and o is not te.Literal and o is not typing.Literal):
        return [x for a in te.get_args(tp) for x in inner(a)]
    return [tp]

def lit(tp):
    tp = unwrap(tp)
    o = te.get_origin(tp)
    if o in (te.Literal, typing.Literal):
        return list(te.get_args(tp))
    if o in UNION:
        return [v for a in te.get_args(tp) for v in lit(a)]
    return []

out = {"version": openai.__version__, "request": {}, "response": {}, "events": []}

def walk_td(cls, seen):
    if cls in seen: return
    seen.add(cls)
    hints = te.get_type_hints(cls, include_extras=True)
    keys = {}
    for k, tp in hints.items():
        vals = lit(tp)
        keys[k] = sorted(map(str, vals)) if vals and k in ("type", "role", "phase", "status") else None
        for t in inner(tp):
            if te.is_typeddict(t): walk_td(t, seen)
    out["request"][cls.__module__.rsplit(".", 1)[-1] + ":" + cls.__name__] = keys

def walk_model(cls, seen):
    if cls in seen or not hasattr(cls, "model_fields"): return
    seen.add(cls)
    keys = {}
    for k, f in cls.model_fields.items():
        vals = lit(f.annotation)
        keys[f.alias or k] = sorted(map(str, vals)) if vals and k in ("type", "role", "phase", "status") else None
        for t in inner(f.annotation):
            if isinstance(t, type) and hasattr(t, "model_fields"): walk_model(t, seen)
    out["response"][cls.__module__.rsplit(".", 1)[-1] + ":" + cls.__name__] = keys

seen = set()
for p in (rcp.ResponseCreateParamsNonStreaming, rcp.ResponseCreateParamsStreaming):
    walk_td(p, seen)
seen_models = set()
walk_model(Response, seen_models)
ev = set()
for m in te.get_args(unwrap(ResponseStreamEvent)):
    m = unwrap(m)
    if hasattr(m, "model_fields"):
        ev.update(map(str, lit(m.model_fields["type"].annotation)))
        walk_model(m, seen_models)
out["events"] = sorted(ev)
print(json.dumps(out, sort_keys=True))
'''


def dump(path: str | None) -> dict:
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", DUMP], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"walking the SDK at {path or 'the venv'} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)


def newest() -> str:
    r = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "openai", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True,
    )
    # "openai (X.Y.Z)"
    return r.stdout.split("(", 1)[1].split(")", 1)[0]


def diff(kind: str, old: dict, new: dict) -> list[str]:
    lines = []
    for name in sorted(set(new) - set(old)):
        lines.append(f"+ {kind} {name}: {', '.join(sorted(new[name]))}")
    for name in sorted(set(old) - set(new)):
        lines.append(f"- {kind} {name}")
    for name in sorted(set(old) & set(new)):
        a, b = old[name], new[name]
        for k in sorted(set(b) - set(a)):
            lines.append(f"+ {kind} {name}.{k}" + (f" {b[k]}" if b[k] else ""))
        for k in sorted(set(a) - set(b)):
            lines.append(f"- {kind} {name}.{k}")
        for k in sorted(set(a) & set(b)):
            if a[k] != b[k] and a[k] is not None and b[k] is not None:
                added = sorted(set(b[k]) - set(a[k]))
                removed = sorted(set(a[k]) - set(b[k]))
                if added:
                    lines.append(f"+ {kind} {name}.{k} values {added}")
                if removed:
                    lines.append(f"- {kind} {name}.{k} values {removed}")
    return lines


def main() -> None:
    version = sys.argv[1] if len(sys.argv) > 1 else newest()
    old = dump(None)
    with tempfile.TemporaryDirectory(prefix="sdk-changes-") as d:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
             "--target", d, f"openai=={version}"],
            check=True,
        )
        new = dump(d)
    print(f"openai {old['version']} (pinned) -> {new['version']}")
    lines = diff("request", old["request"], new["request"]) + diff("response", old["response"], new["response"])
    lines += [f"+ event {e}" for e in sorted(set(new["events"]) - set(old["events"]))]
    lines += [f"- event {e}" for e in sorted(set(old["events"]) - set(new["events"]))]
    print("\n".join(lines) if lines else "no change to the Responses surface")


if __name__ == "__main__":
    main()
