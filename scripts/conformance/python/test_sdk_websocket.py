"""WebSocket mode (issue 22) through the official Python SDK's `client.responses.connect()` and its
lane helper (`ResponsesWebSocketSession`), over both upstream kinds: text runs, an MCP run, two
responses chained with `store: false` on one connection, errors as `error` events after which the
connection serves the next create, and `response.steer` (the beta connection's steering; its
refusals as `response.steer.failed`), never left hanging."""

from __future__ import annotations

import os
import uuid

import httpx
import pytest
from openai.lib.responses_websocket import (
    ResponsesWebSocketError,
    ResponsesWebSocketLimits,
    ResponsesWebSocketSession,
)

from conftest import MODEL
from oresp import check_stream as _check_stream

TERMINAL = ("response.completed", "response.failed", "response.incomplete", "error")


def until_terminal(conn) -> list:
    events = []
    for ev in conn:
        events.append(ev)
        if ev.type in TERMINAL:
            return events
    raise AssertionError(f"the connection ended before a terminal event: {[e.type for e in events]}")


def check(events: list) -> dict:
    # Events that went through the SDK's models: ordering and identity rules only.
    return _check_stream([e.to_dict() for e in events], schema=False)


def test_a_text_response_over_the_socket(client):
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="hi over ws")
        events = until_terminal(conn)
    resp = check(events)
    assert events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.output_text == "Hello! You said: hi over ws"
    assert resp["status"] == "completed"
    # Stored as over HTTP.
    assert client.responses.retrieve(resp["id"]).output_text == "Hello! You said: hi over ws"


def test_an_mcp_run_over_the_socket(client, mcp_servers):
    tool = {"type": "mcp", "server_label": "math", "server_url": mcp_servers.rust, "require_approval": "never"}
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input='CALL add {"a":2,"b":3}', tools=[tool])
        events = until_terminal(conn)
    resp = check(events)
    types = [e.type for e in events]
    assert "response.mcp_list_tools.completed" in types
    assert "response.mcp_call.completed" in types
    assert [o["type"] for o in resp["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert resp["output"][1]["output"] == '{"sum":5.0}'


def test_two_responses_chained_with_store_false_on_one_connection(client):
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="remember the word kiwi", store=False)
        first = until_terminal(conn)[-1].response
        conn.response.create(model=MODEL, input="what was it?", store=False, previous_response_id=first.id)
        second = until_terminal(conn)[-1]
    assert second.type == "response.completed", second
    assert second.response.previous_response_id == first.id
    assert second.response.store is False
    # Not stored: over HTTP neither exists.
    import openai

    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)


def test_an_error_then_a_good_create_on_the_same_connection(client):
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="x", store=False, previous_response_id="resp_not_here")
        err = until_terminal(conn)[-1]
        assert err.type == "error"
        assert err.status == 400
        assert err.error.code == "previous_response_not_found"
        assert err.error.param == "previous_response_id"
        assert "resp_not_here" in err.error.message
        conn.response.create(model=MODEL, input="still here")
        ok = until_terminal(conn)[-1]
    assert ok.type == "response.completed"
    assert ok.response.output_text == "Hello! You said: still here"


def test_a_steer_naming_no_response_of_the_connection_gets_the_sdks_steer_failed_event(client):
    with client.responses.connect() as conn:
        conn.response.steer(input="faster", previous_response_id="resp_1")
        failed = next(iter(conn))
        assert failed.type == "response.steer.failed"
        assert failed.error.code == "response_not_found"
        assert failed.steer.previous_response_id == "resp_1"
        assert failed.steer.input == "faster"
        conn.response.create(model=MODEL, input="after steer")
        assert until_terminal(conn)[-1].type == "response.completed"


def test_a_running_response_is_steered_and_its_successor_answers_the_steering_text(client):
    # The beta connection: the answer held by the fake upstream until its gate opens, the steer
    # accepted in the response's own sequence, the response ended `incomplete`/`steered` at its
    # turn's end (its message whole), a successor started by itself with the steering text.
    gate = f"conformance-{uuid.uuid4().hex}"
    with client.beta.responses.connect() as conn:
        conn.response.create(model=f"{MODEL}?hold={gate}", input="a long answer")
        rid, events = None, []
        for ev in conn:
            events.append(ev)
            if ev.type == "response.created" and rid is None:
                rid = ev.response.id
                conn.response.steer(input="now in one line", previous_response_id=rid)
            if ev.type == "response.steer.accepted":
                httpx.post(f"{os.environ['RELAY_FAKE_UPSTREAM_URL']}/gates/{gate}")
            if ev.type == "response.completed" and ev.response.previous_response_id == rid:
                break
    ends = [e for e in events if e.type in ("response.incomplete", "response.completed")]
    accepted = [e for e in events if e.type == "response.steer.accepted"]
    assert [a.steer.previous_response_id for a in accepted] == [rid]
    assert (ends[0].response.id, ends[0].response.status) == (rid, "incomplete")
    assert ends[0].response.incomplete_details.reason == "steered"
    assert [c.text for o in ends[0].response.output for c in o.content] == ["Hello! You said: a long answer"]
    assert ends[-1].response.previous_response_id == rid
    texts = [c.text for o in ends[-1].response.output if o.type == "message" for c in o.content]
    assert texts == ["Hello! You said: now in one line"]


def test_lanes_of_the_session_helper_get_their_final_responses(client):
    limits = ResponsesWebSocketLimits(
        max_lanes=4, max_events_per_lane=1000, max_events=4000, max_bytes_per_lane=1 << 24, max_bytes=1 << 25
    )
    with client.responses.connect() as conn, ResponsesWebSocketSession(conn, limits=limits) as session:
        a, b = session.lane("lane-a"), session.lane("lane-b")
        a.send({"type": "response.create", "model": MODEL, "input": "from a"})
        b.send({"type": "response.create", "model": MODEL, "input": "from b"})
        assert a.get_final_response(timeout=30).output_text == "Hello! You said: from a"
        assert b.get_final_response(timeout=30).output_text == "Hello! You said: from b"
        # A lane's error comes back to that lane.
        b.send({"type": "response.create", "model": MODEL, "input": "x", "temperatur": 1})
        with pytest.raises(ResponsesWebSocketError) as e:
            b.get_final_response(timeout=30)
        assert e.value.event.error.code == "unknown_parameter"
        assert e.value.event.stream_id == "lane-b"
