"""The Open Responses compliance checks (PROTOCOL.md §4.4), re-created: the union of the tests of
every known version of the suite, with the Response resource and every streamed event validated
against the required fields and types (oresp.py). Plain HTTP, no SDK, as the suite does."""

from __future__ import annotations

import pytest

from conftest import MODEL
from fixtures import PDF_DATA_URL, PNG_DATA_URL, WEATHER_TOOL
from oresp import event_errors, post_raw, response_errors, stream_raw, StreamChecker


def create(relay, body: dict) -> dict:
    r = post_raw(relay.base, "/v1/responses", {"model": MODEL, **body, "stream": False})
    assert r.status == 200, f"HTTP {r.status}: {r.body[:500]!r}"
    assert r.headers.get("content-type", "").startswith("application/json")
    resp = r.json()
    errors = response_errors(resp)
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
    problems = [err for ev in events for err in event_errors(ev, allow_mcp=False)]
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
    problems = [err for ev in events for err in event_errors(ev, allow_mcp=False)]
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
            problems = [err for ev in events for err in event_errors(ev, allow_mcp=False)]
            assert not problems, f"{model}:\n" + "\n".join(problems)
        else:
            r = post_raw(relay.base, "/v1/responses", {"model": model, "input": "x"})
            assert r.status == 200, (model, r.status, r.body[:300])
            errors = response_errors(r.json())
            assert not errors, f"{model}:\n" + "\n".join(errors)
