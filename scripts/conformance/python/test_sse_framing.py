"""SSE framing on the wire (SPEC §5.7, PROTOCOL §2.1, §4.4 "SSE parser fragility"), read with a
raw stdlib HTTP client: `event: T\\ndata: <one-line JSON>\\n\\n`, event == data.type, no `id:`,
no '\\r', `data: [DONE]` last."""

from __future__ import annotations

import json

import pytest

from conftest import MODEL
from fixtures import WEATHER_TOOL
from oresp import check_stream, parse_sse, post_raw

CASES = {
    "text": {"model": MODEL, "input": "frame me"},
    "reasoning": {"model": f"{MODEL}?reasoning=2", "input": "frame me"},
    "tool": {"model": MODEL, "input": "weather?", "tools": [WEATHER_TOOL], "tool_choice": "required"},
    "length": {"model": f"{MODEL}?finish=length", "input": "frame me"},
    "cut": {"model": f"{MODEL}?fault=cut", "input": "frame me"},
}


@pytest.mark.parametrize("case", list(CASES))
def test_sse_framing(relay, case):
    r = post_raw(relay.base, "/v1/responses", {**CASES[case], "stream": True})
    assert r.status == 200, r.body[:300]
    assert r.headers.get("content-type", "").split(";")[0].strip() == "text/event-stream"
    assert b"\r" not in r.body, "CR in the SSE body: lines must end with \\n only"
    frames = parse_sse(r.body)
    assert frames, "empty stream"
    events = []
    for i, f in enumerate(frames):
        if f.comment:
            assert f.raw.startswith(":"), f.raw
            continue
        lines = f.raw.split("\n")
        if f.data == "[DONE]":
            assert lines == ["data: [DONE]"], f"[DONE] frame is {f.raw!r}"
            assert i == len(frames) - 1, "data: [DONE] is not the last frame"
            continue
        assert len(lines) == 2, f"frame #{i} is not exactly 'event:' + 'data:' lines: {f.raw[:300]!r}"
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), f.raw[:300]
        assert not any(line.startswith("id:") for line in lines)
        data = json.loads(f.data)
        assert f.event == data["type"], f"event line {f.event!r} != data.type {data['type']!r}"
        events.append(data)
    assert frames[-1].data == "[DONE]", f"last frame is {frames[-1].raw[:200]!r}, not data: [DONE]"
    check_stream(events)


def test_error_before_stream_is_json(relay):
    r = post_raw(relay.base, "/v1/responses", {"input": "no model", "stream": True})
    assert r.status == 400
    assert r.headers.get("content-type", "").startswith("application/json")
    err = json.loads(r.body)["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    assert err["param"] == "model"


def test_not_found_route_envelope(relay):
    r = post_raw(relay.base, "/v1/nope", {})
    assert r.status == 404
    assert set(json.loads(r.body)["error"]) >= {"message", "type", "param", "code"}
