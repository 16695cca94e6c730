"""Self-tests of oresp.py: a good stream passes, and each kind of broken stream is caught."""

from __future__ import annotations

import copy

import pytest

from oresp import SchemaError, check_stream, parse_sse, response_errors, validate_response_resource


def _response(status="in_progress", output=None):
    return {
        "id": "resp_1", "object": "response", "created_at": 1, "completed_at": None if status == "in_progress" else 2,
        "status": status, "incomplete_details": None, "model": "m", "previous_response_id": None,
        "instructions": None, "output": output or [], "error": None, "tools": [], "tool_choice": "auto",
        "truncation": "disabled", "parallel_tool_calls": True, "text": {"format": {"type": "text"}}, "top_p": 1.0,
        "presence_penalty": 0.0, "frequency_penalty": 0.0, "top_logprobs": 0, "temperature": 1.0,
        "reasoning": {"effort": None, "summary": None},
        "usage": None if status == "in_progress" else {
            "input_tokens": 1, "output_tokens": 2, "total_tokens": 3,
            "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0},
        },
        "max_output_tokens": None, "max_tool_calls": None, "store": True, "background": False,
        "service_tier": "default", "metadata": {}, "safety_identifier": None, "prompt_cache_key": None,
    }


def good_stream():
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    done_part = {**part, "text": "Hi!"}
    item = {"type": "message", "id": "msg_1", "status": "in_progress", "role": "assistant", "content": []}
    done_item = {**item, "status": "completed", "content": [done_part]}
    ids = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    evs = [
        {"type": "response.created", "response": _response()},
        {"type": "response.in_progress", "response": _response()},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.content_part.added", **ids, "part": part},
        {"type": "response.output_text.delta", **ids, "delta": "Hi", "logprobs": []},
        {"type": "response.output_text.delta", **ids, "delta": "!", "logprobs": []},
        {"type": "response.output_text.done", **ids, "text": "Hi!", "logprobs": []},
        {"type": "response.content_part.done", **ids, "part": done_part},
        {"type": "response.output_item.done", "output_index": 0, "item": done_item},
        {"type": "response.completed", "response": _response("completed", [copy.deepcopy(done_item)])},
    ]
    for i, e in enumerate(evs):
        e["sequence_number"] = i
    return evs


def test_good_stream_passes():
    final = check_stream(good_stream())
    assert final["status"] == "completed"
    validate_response_resource(final)


def _break(fn):
    evs = copy.deepcopy(good_stream())
    fn(evs)
    return evs


BROKEN = {
    "sequence gap": lambda e: e[3].update(sequence_number=7),
    "created not first": lambda e: e.insert(0, e.pop(1)),
    "missing logprobs": lambda e: e[4].pop("logprobs"),
    "wrong item_id": lambda e: e[5].update(item_id="msg_2"),
    "sparse output_index": lambda e: e[2].update(output_index=1),
    "unknown event type": lambda e: e.insert(5, {"type": "keepalive", "sequence_number": 5}),
    "done text differs": lambda e: e[6].update(text="Hi?"),
    "no terminal": lambda e: e.pop(),
    "two terminals": lambda e: e.append({**e[-1], "sequence_number": len(e)}),
    "float created_at": lambda e: e[0]["response"].update(created_at=1.5),
    "top_p null": lambda e: e[-1]["response"].update(top_p=None),
    "terminal output differs": lambda e: e[-1]["response"]["output"][0].update(status="incomplete"),
    "delta before part": lambda e: e.insert(3, e.pop(4)),
    "top-level error key": lambda e: e[4].update(error={"message": "x"}),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_stream_is_caught(name):
    evs = _break(BROKEN[name])
    for i, e in enumerate(evs):
        if name != "sequence gap":
            e["sequence_number"] = i
    with pytest.raises(AssertionError):
        check_stream(evs, allow_mcp=False)


def test_resource_missing_key_is_caught():
    r = _response("completed")
    del r["service_tier"]
    assert any("service_tier" in e for e in response_errors(r))
    with pytest.raises(SchemaError):
        validate_response_resource(r)


def test_sse_parser_rejects_unterminated_body():
    with pytest.raises(AssertionError):
        parse_sse(b"event: x\ndata: {}\n")
    frames = parse_sse(b": keepalive\n\nevent: a\ndata: {\"type\":\"a\"}\n\ndata: [DONE]\n\n")
    assert [f.comment for f in frames] == [True, False, False]
    assert frames[1].event == "a" and frames[2].data == "[DONE]"


def test_the_published_schemas_accept_a_good_response_and_catch_a_broken_one():
    import orschema

    good = _response("completed")
    assert orschema.response_errors(good) == []
    for key in ("usage", "output", "object"):
        broken = copy.deepcopy(good)
        del broken[key]
        assert orschema.response_errors(broken), f"a Response without {key!r} passed the published schema"
    bad_event = {"type": "response.output_text.delta", "sequence_number": 3, "output_index": 0, "content_index": 0, "delta": "x"}
    assert orschema.event_errors(bad_event), "a text delta without item_id passed the published schema"
    assert orschema.event_errors({"type": "response.mcp_call.completed"}, only_spec=True)
    assert len(orschema.event_schemas()) == 24
