"""The official OpenAI Python SDK against the relay, over both upstream kinds."""

from __future__ import annotations

import json

import openai
import pytest

from conftest import MODEL
from fixtures import PDF_DATA_URL, PNG_DATA_URL, WEATHER_TOOL
from oresp import check_stream as _check_stream, shape


def check_stream(events: list[dict]) -> dict:
    # Events that went through the SDK's models: ordering and identity rules only (the wire
    # types are checked on raw JSON in test_open_responses.py and test_sse_framing.py).
    return _check_stream(events, schema=False)


def raw_events(client, **kw) -> list[dict]:
    """`responses.create(stream=True)`, every event as the dict that came over the wire."""
    stream = client.responses.create(stream=True, **kw)
    try:
        return [ev.to_dict() for ev in stream]
    finally:
        stream.close()


def deltas(events: list[dict], kind: str = "response.output_text.delta") -> list[str]:
    return [e["delta"] for e in events if e["type"] == kind]


def items_of(resp: dict, kind: str) -> list[dict]:
    return [o for o in resp["output"] if o["type"] == kind]


def message_text(resp: dict) -> str:
    return "".join(
        p.get("text", "") for m in items_of(resp, "message") for p in m["content"] if p["type"] == "output_text"
    )


# ---------------------------------------------------------------------------------------------
# streaming basics


def test_raw_stream_invariants(client):
    events = raw_events(client, model=MODEL, input="hi there")
    final = check_stream(events)
    assert events[0]["type"] == "response.created" and events[0]["sequence_number"] == 0
    assert events[1]["type"] == "response.in_progress"
    assert events[-1]["type"] == "response.completed"
    assert final["status"] == "completed"
    assert message_text(final) == "Hello! You said: hi there"
    assert "".join(deltas(events)) == "Hello! You said: hi there"
    assert len(deltas(events)) == 8, "the fake model answers in 8 deltas; the relay must not merge or split them"


def test_deltas_option(client):
    events = raw_events(client, model=f"{MODEL}?deltas=3", input="count")
    check_stream(events)
    assert len(deltas(events)) == 3
    assert "".join(deltas(events)) == "Hello! You said: count"


def test_stream_helper_final_response(client):
    seen: list[str] = []
    types: list[str] = []
    with client.responses.stream(model=MODEL, input="stream helper please") as stream:
        for ev in stream:
            types.append(ev.type)
            if ev.type == "response.output_text.delta":
                seen.append(ev.delta)
        final = stream.get_final_response()
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert final.status == "completed"
    assert final.output_text == "".join(seen) == "Hello! You said: stream helper please"


def test_non_streaming_equals_streamed(client):
    events = raw_events(client, model=MODEL, input="same answer twice")
    streamed = check_stream(events)
    resp = client.responses.create(model=MODEL, input="same answer twice").to_dict()
    assert resp["status"] == streamed["status"] == "completed"
    assert resp["object"] == "response" and resp["id"].startswith("resp")
    assert shape(resp["output"]) == shape(streamed["output"])
    assert message_text(resp) == "Hello! You said: same answer twice"
    assert resp["usage"]["total_tokens"] == resp["usage"]["input_tokens"] + resp["usage"]["output_tokens"]


def test_non_streaming_output_text_helper(client):
    resp = client.responses.create(model=MODEL, input="plain")
    assert resp.output_text == "Hello! You said: plain"
    assert resp.output[0].type == "message" and resp.output[0].role == "assistant"


def test_instructions_echoed(client):
    resp = client.responses.create(model=MODEL, instructions="Be brief.", input="hi")
    assert resp.instructions == "Be brief."
    assert resp.status == "completed"


# ---------------------------------------------------------------------------------------------
# tools


def test_function_call_round_trip(client):
    first = client.responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
    )
    r1 = first.to_dict()
    assert first.status == "completed"
    calls = items_of(r1, "function_call")
    assert len(calls) == 1, r1["output"]
    call = calls[0]
    assert call["name"] == "get_weather" and call["call_id"] and call["status"] == "completed"
    args = json.loads(call["arguments"])
    assert isinstance(args, dict) and isinstance(args.get("location"), str)
    tool = r1["tools"][0]
    assert tool["type"] == "function" and tool["name"] == "get_weather"

    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call["call_id"], "output": "64 degrees and clear"}],
        tools=[WEATHER_TOOL],
    )
    assert second.status == "completed"
    assert second.previous_response_id == first.id
    assert "Tool results:" in second.output_text and "64 degrees and clear" in second.output_text
    assert not items_of(second.to_dict(), "function_call")


def test_function_call_streamed(client):
    events = raw_events(
        client,
        model=MODEL,
        input="What is the weather in Oslo?",
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
    )
    final = check_stream(events)
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" in kinds
    assert "response.function_call_arguments.done" in kinds
    added = [e for e in events if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"]
    assert added and added[0]["item"]["call_id"] and added[0]["item"]["name"] == "get_weather"
    assert final["status"] == "completed"
    call = items_of(final, "function_call")[0]
    assert json.loads(call["arguments"]) == json.loads("".join(deltas(events, "response.function_call_arguments.delta")))


def test_function_call_stream_helper(client):
    with client.responses.stream(
        model=MODEL, input="weather please", tools=[WEATHER_TOOL], tool_choice="required"
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    assert isinstance(json.loads(calls[0].arguments), dict)


def test_scripted_call_lines(client):
    text = 'Please run these\nCALL get_weather {"location": "Rome"}\nCALL get_weather {"location": "Lima"}'
    events = raw_events(client, model=MODEL, input=text, tools=[WEATHER_TOOL])
    final = check_stream(events)
    calls = items_of(final, "function_call")
    assert [json.loads(c["arguments"]) for c in calls] == [{"location": "Rome"}, {"location": "Lima"}]
    assert len({c["call_id"] for c in calls}) == 2


# ---------------------------------------------------------------------------------------------
# inputs


def test_input_items_conversation(client):
    resp = client.responses.create(
        model=MODEL,
        input=[
            {"type": "message", "role": "system", "content": "You are terse."},
            {"type": "message", "role": "user", "content": "First question"},
            {"type": "message", "role": "assistant", "content": "First answer"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Second question"}]},
        ],
    )
    assert resp.status == "completed"
    assert resp.output_text == "Hello! You said: Second question"


def test_image_input(client):
    resp = client.responses.create(
        model=MODEL,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What colour is this?"},
                    {"type": "input_image", "image_url": PNG_DATA_URL, "detail": "auto"},
                ],
            }
        ],
    )
    assert resp.status == "completed"
    assert resp.output_text.startswith("Hello! You said:")


def test_file_input(client):
    resp = client.responses.create(
        model=MODEL,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Summarise the file."},
                    {"type": "input_file", "filename": "fixture.pdf", "file_data": PDF_DATA_URL},
                ],
            }
        ],
    )
    assert resp.status == "completed"
    assert resp.output_text.startswith("Hello! You said:")


# ---------------------------------------------------------------------------------------------
# reasoning, refusal, length


def test_reasoning_streamed(client):
    events = raw_events(client, model=f"{MODEL}?reasoning=3", input="think first")
    final = check_stream(events)
    kinds = [o["type"] for o in final["output"]]
    assert kinds[0] == "reasoning" and "message" in kinds, kinds
    assert kinds.index("reasoning") < kinds.index("message")
    rdeltas = deltas(events, "response.reasoning_text.delta")
    assert len(rdeltas) == 3, [e["type"] for e in events]
    reasoning = final["output"][0]
    assert "".join(p["text"] for p in reasoning["content"]) == "".join(rdeltas)
    assert message_text(final) == "Hello! You said: think first"
    assert not any(e["type"].startswith("response.reasoning.") for e in events)


def test_reasoning_stream_helper_and_non_streaming(client):
    with client.responses.stream(model=f"{MODEL}?reasoning=2", input="think") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert [o.type for o in final.output][:1] == ["reasoning"]
    assert final.output_text == "Hello! You said: think"
    resp = client.responses.create(model=f"{MODEL}?reasoning=2", input="think")
    assert shape(resp.to_dict()["output"]) == shape(final.to_dict()["output"])


def test_refusal(client):
    events = raw_events(client, model=f"{MODEL}?refusal=1", input="do something bad")
    final = check_stream(events)
    msgs = items_of(final, "message")
    assert msgs, final["output"]
    parts = msgs[0]["content"]
    assert any(p["type"] == "refusal" and p["refusal"] for p in parts), parts
    assert "response.refusal.delta" in [e["type"] for e in events]
    done = [e for e in events if e["type"] == "response.refusal.done"]
    assert done and done[0]["refusal"] == "".join(deltas(events, "response.refusal.delta"))
    with client.responses.stream(model=f"{MODEL}?refusal=1", input="again") as stream:
        for _ in stream:
            pass
        helper_final = stream.get_final_response()
    assert helper_final.output[0].content[0].type == "refusal"


def test_finish_length_is_incomplete(client):
    events = raw_events(client, model=f"{MODEL}?finish=length", input="a long story")
    final = check_stream(events)
    assert events[-1]["type"] == "response.incomplete"
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    resp = client.responses.create(model=f"{MODEL}?finish=length", input="a long story")
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"


# ---------------------------------------------------------------------------------------------
# errors


def test_missing_model_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(input="no model")
    assert e.value.status_code == 400
    assert e.value.param == "model"


def test_unknown_field_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", extra_body={"bogus": 1})
    assert e.value.param == "bogus"
    assert e.value.type == "invalid_request_error"


def test_unknown_field_streaming_is_400_before_stream(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", stream=True, extra_body={"bogus": 1})
    assert e.value.param == "bogus"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_upstream_500_is_502(client, stream):
    with pytest.raises(openai.APIStatusError) as e:
        r = client.responses.create(model=f"{MODEL}?fault=status500", input="hi", stream=stream)
        if stream:
            list(r)
    assert isinstance(e.value, openai.InternalServerError)
    assert e.value.status_code == 502
    assert isinstance(e.value.body, dict) and e.value.body.get("message")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_upstream_400_passed_on(client, stream):
    with pytest.raises(openai.BadRequestError) as e:
        r = client.responses.create(model=f"{MODEL}?fault=status400", input="hi", stream=stream)
        if stream:
            list(r)
    assert e.value.status_code == 400


def test_upstream_429_passed_on(client):
    with pytest.raises(openai.RateLimitError) as e:
        client.responses.create(model=f"{MODEL}?fault=status429", input="hi")
    assert e.value.status_code == 429


@pytest.mark.parametrize("fault", ["cut", "malformed", "error_chunk", "stall"])
def test_mid_stream_failure_is_response_failed(client, fault):
    events = raw_events(client, model=f"{MODEL}?fault={fault}", input="this will break")
    final = check_stream(events)
    assert events[-1]["type"] == "response.failed", [e["type"] for e in events]
    assert final["status"] == "failed"
    assert final["error"] and final["error"]["message"] and final["error"]["code"]


def test_cut_non_streaming_is_failed_response(client):
    resp = client.responses.create(model=f"{MODEL}?fault=cut", input="this will break")
    assert resp.status == "failed"
    assert resp.error is not None and resp.error.message


def test_no_done_still_terminates(client):
    events = raw_events(client, model=f"{MODEL}?fault=no_done", input="no done marker")
    check_stream(events)
    assert events[-1]["type"] in ("response.completed", "response.failed", "response.incomplete")


def test_previous_response_not_found(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", previous_response_id="resp_doesnotexist")
    assert e.value.param == "previous_response_id"
