"""The Open Responses compliance checks (PROTOCOL.md §4.4), re-created: the union of the tests of
every known version of the suite, with the Response resource and every streamed event validated
against the required fields and types (oresp.py) and against the specification's published
schemas (orschema.py: its OpenAPI 2026-04-24, `ResponseResource`, each event's schema,
`CompactResource`), over SSE, JSON and WebSocket mode. Plain HTTP, no SDK, as the suite does."""

from __future__ import annotations

import json

import pytest

from conftest import MODEL
from fixtures import PDF_DATA_URL, PNG_DATA_URL, WEATHER_TOOL
import orschema
from oresp import event_errors, post_raw, response_errors, stream_raw, StreamChecker


def stream_errors(events: list[dict], only_spec: bool = True) -> list[str]:
    """Every event against its required fields (oresp) and its published schema (orschema); the
    terminal event's Response against `ResponseResource`. `only_spec`: every event must be one of
    the specification's (true of text and function-call runs)."""
    problems = [err for ev in events for err in event_errors(ev, allow_mcp=False)]
    problems += [err for ev in events for err in orschema.event_errors(ev, only_spec=only_spec)]
    for ev in events:
        if ev.get("type") in ("response.completed", "response.incomplete", "response.failed"):
            problems += orschema.response_errors(ev["response"])
    return problems


def create(relay, body: dict) -> dict:
    r = post_raw(relay.base, "/v1/responses", {"model": MODEL, **body, "stream": False})
    assert r.status == 200, f"HTTP {r.status}: {r.body[:500]!r}"
    assert r.headers.get("content-type", "").startswith("application/json")
    resp = r.json()
    errors = response_errors(resp) + orschema.response_errors(resp)
    assert not errors, "\n".join(errors)
    return resp


def assert_output_completed(resp: dict) -> None:
    assert resp["output"], "output is empty"
    assert resp["status"] == "completed", resp["status"]


def user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": text}


def test_basic_response(relay):
    resp = create(relay, {"input": [user("Say hello in exactly 3 words.")]})
    assert_output_completed(resp)


def test_streaming_response(relay):
    _, events = stream_raw(relay.base, {"model": MODEL, "input": [user("Count from 1 to 5.")]})
    assert events, "no events"
    problems = stream_errors(events)
    assert not problems, "Event validation failed:\n" + "\n".join(problems)
    checker = StreamChecker(allow_mcp=False)
    for ev in events:
        checker.feed(ev)
    final = checker.finish()
    assert final["status"] == "completed"
    assert final["output"]


def test_system_prompt(relay):
    resp = create(
        relay,
        {
            "input": [
                {"type": "message", "role": "system", "content": "You are a pirate. Always respond in pirate speak."},
                user("Say hello."),
            ]
        },
    )
    assert_output_completed(resp)


def test_tool_calling(relay):
    resp = create(relay, {"input": [user("What's the weather like in San Francisco?")], "tools": [WEATHER_TOOL]})
    assert any(o["type"] == "function_call" for o in resp["output"]), resp["output"]


def test_tool_calling_streaming(relay):
    _, events = stream_raw(
        relay.base,
        {"model": MODEL, "input": [user("What's the weather like in San Francisco?")], "tools": [WEATHER_TOOL]},
    )
    problems = stream_errors(events)
    assert not problems, "\n".join(problems)
    types = [e["type"] for e in events]
    assert any(
        e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call" for e in events
    ), types
    assert "response.function_call_arguments.delta" in types
    assert "response.function_call_arguments.done" in types
    assert any(e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call" for e in events)
    checker = StreamChecker(allow_mcp=False)
    for ev in events:
        checker.feed(ev)
    assert checker.finish()["status"] == "completed"


def test_function_call_roundtrip(relay):
    first = create(
        relay,
        {
            "input": [user("What's the weather like in San Francisco?")],
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "function", "name": "get_weather"},
        },
    )
    calls = [o for o in first["output"] if o["type"] == "function_call"]
    assert calls and calls[0]["call_id"], first["output"]
    second = create(
        relay,
        {
            "previous_response_id": first["id"],
            "input": [{"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "64 degrees and clear"}],
            "tools": [WEATHER_TOOL],
        },
    )
    assert_output_completed(second)
    assert second["previous_response_id"] == first["id"]


def test_image_input(relay):
    resp = create(
        relay,
        {
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What do you see in this image? Answer in one sentence."},
                        {"type": "input_image", "image_url": PNG_DATA_URL},
                    ],
                }
            ]
        },
    )
    assert_output_completed(resp)


def test_file_input(relay):
    resp = create(
        relay,
        {
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What does this PDF say? Answer in one sentence."},
                        {"type": "input_file", "filename": "openresponses-fixture.pdf", "file_data": PDF_DATA_URL},
                    ],
                }
            ]
        },
    )
    assert_output_completed(resp)


def test_multi_turn(relay):
    resp = create(
        relay,
        {
            "input": [
                {"type": "message", "role": "user", "content": "My name is Alice."},
                {"type": "message", "role": "assistant", "content": "Hello Alice! Nice to meet you."},
                {"type": "message", "role": "user", "content": "What is my name?"},
            ]
        },
    )
    assert_output_completed(resp)


def test_previous_response_id(relay):
    first = create(relay, {"input": [user("Remember this secret word: papaya. Reply with OK.")]})
    assert_output_completed(first)
    second = create(relay, {"previous_response_id": first["id"], "input": [user("What was the secret word?")]})
    assert_output_completed(second)
    assert second["previous_response_id"] == first["id"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_every_shape_validates(relay, stream):
    """Reasoning, refusal, incomplete and failed responses all satisfy the resource schema too."""
    for model in (f"{MODEL}?reasoning=2", f"{MODEL}?refusal=1", f"{MODEL}?finish=length", f"{MODEL}?fault=cut"):
        if stream:
            _, events = stream_raw(relay.base, {"model": model, "input": "x"})
            # Reasoning text events are OpenAI's, outside the specification's catalogue.
            problems = stream_errors(events, only_spec=False)
            assert not problems, f"{model}:\n" + "\n".join(problems)
        else:
            r = post_raw(relay.base, "/v1/responses", {"model": model, "input": "x"})
            assert r.status == 200, (model, r.status, r.body[:300])
            errors = response_errors(r.json()) + orschema.response_errors(r.json())
            assert not errors, f"{model}:\n" + "\n".join(errors)


def test_multi_turn_streamed_with_previous_response_id_validates(relay):
    first = create(relay, {"input": [user("Remember this secret word: papaya. Reply with OK.")], "store": True})
    _, events = stream_raw(relay.base, {"model": MODEL, "previous_response_id": first["id"], "input": [user("The word?")]})
    problems = stream_errors(events)
    assert not problems, "\n".join(problems)
    assert events[-1]["response"]["previous_response_id"] == first["id"]


def test_websocket_mode_events_validate(relay):
    """WebSocket mode: each frame is an event of the specification, and the terminal one's
    Response a `ResponseResource` (system prompt, function tools, a chained second response)."""
    from websockets.sync.client import connect

    url = relay.base.replace("http://", "ws://", 1) + "/v1/responses"
    with connect(url, additional_headers={"authorization": "Bearer test-key"}, open_timeout=30) as ws:
        previous = None
        for body in (
            {"instructions": "You are terse.", "input": [user("What's the weather like in San Francisco?")], "tools": [WEATHER_TOOL]},
            {"input": [user("And tomorrow?")]},
        ):
            frame = {"type": "response.create", "model": MODEL, **body}
            if previous:
                frame["previous_response_id"] = previous
            ws.send(json.dumps(frame))
            events = []
            while not events or events[-1]["type"] not in ("response.completed", "response.incomplete", "response.failed", "error"):
                events.append(json.loads(ws.recv(timeout=60)))
            problems = stream_errors(events)
            assert not problems, "\n".join(problems)
            assert events[-1]["type"] == "response.completed", events[-1]
            previous = events[-1]["response"]["id"]


def test_compact_validates(relay):
    r = post_raw(
        relay.base,
        "/v1/responses/compact",
        {"model": MODEL, "input": [user("My name is Alice."), {"type": "message", "role": "assistant", "content": "Hello Alice!"}]},
    )
    assert r.status == 200, f"HTTP {r.status}: {r.body[:500]!r}"
    errors = orschema.compact_errors(r.json())
    assert not errors, "\n".join(errors)
