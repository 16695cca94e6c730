"""Hosted MCP tools (issue 3) through the official OpenAI Python SDK, over both upstream kinds,
against two real MCP servers on loopback: the project's rmcp test server (`mcp-test-server`:
echo, add, fail, boom, ...) and the official Python MCP SDK's server (scripts/mcp_python_server.py:
shout, multiply, explode). The fake model calls tools on `CALL <tool> <json>` lines."""

from __future__ import annotations

import json

import pytest

from conftest import MODEL, free_port
from oresp import check_stream as _check_stream, get_raw, post_raw, shape, sse_events

MCP_CALL_KEYS = {"type", "id", "server_label", "name", "arguments", "output", "error", "status", "approval_request_id"}


def check_stream(events: list[dict]) -> dict:
    # Events that went through the SDK's models: ordering and identity rules only.
    return _check_stream(events, schema=False)


def raw_events(client, **kw) -> list[dict]:
    stream = client.responses.create(stream=True, **kw)
    try:
        return [ev.to_dict() for ev in stream]
    finally:
        stream.close()


def mcp_tool(label: str, url: str, **kw) -> dict:
    return {"type": "mcp", "server_label": label, "server_url": url, "require_approval": "never", **kw}


def kinds(resp: dict) -> list[str]:
    return [o["type"] for o in resp["output"]]


def items_of(resp: dict, kind: str) -> list[dict]:
    return [o for o in resp["output"] if o["type"] == kind]


def types(events: list[dict]) -> list[str]:
    return [e["type"] for e in events]


def item_events(events: list[dict], item_id: str) -> list[str]:
    """The types of the events of one item, from its output_item.added to its output_item.done."""
    out = []
    for e in events:
        if e.get("item_id") == item_id or (e.get("item") or {}).get("id") == item_id:
            out.append(e["type"])
    return out


def message_text(resp: dict) -> str:
    return "".join(
        p.get("text", "") for m in items_of(resp, "message") for p in m["content"] if p["type"] == "output_text"
    )


def check_mcp_call_item(item: dict) -> None:
    assert MCP_CALL_KEYS <= set(item), f"mcp_call lacks {MCP_CALL_KEYS - set(item)}: {item}"
    assert item["id"].startswith("mcp_"), item["id"]
    assert isinstance(item["arguments"], str)
    assert item["status"] in ("completed", "failed"), item
    assert item["approval_request_id"] is None


# ---------------------------------------------------------------------------------------------
# one server, one call


def test_mcp_add_streamed(client, mcp_servers):
    events = raw_events(
        client, model=MODEL, input='CALL add {"a":2,"b":3}', tools=[mcp_tool("rust", mcp_servers.rust)]
    )
    final = check_stream(events)
    assert final["status"] == "completed"
    assert kinds(final) == ["mcp_list_tools", "mcp_call", "message"]
    listed, call, _ = final["output"]
    assert listed["server_label"] == "rust" and listed["id"].startswith("mcpl_")
    assert {"add", "echo", "fail", "boom"} <= {t["name"] for t in listed["tools"]}
    assert not listed.get("error")
    check_mcp_call_item(call)
    assert call["server_label"] == "rust" and call["name"] == "add" and call["status"] == "completed"
    assert json.loads(call["arguments"]) == {"a": 2, "b": 3}
    assert call["error"] is None and "5" in call["output"], call
    assert message_text(final).startswith("Tool results: ") and "5" in message_text(final)

    assert item_events(events, listed["id"]) == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
    ]
    seq = item_events(events, call["id"])
    assert seq[:2] == ["response.output_item.added", "response.mcp_call.in_progress"], seq
    assert seq[-3:] == [
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.output_item.done",
    ], seq
    assert set(seq[2:-3]) == {"response.mcp_call_arguments.delta"}, seq
    arg_deltas = "".join(e["delta"] for e in events if e["type"] == "response.mcp_call_arguments.delta")
    assert json.loads(arg_deltas) == {"a": 2, "b": 3}
    done = [e for e in events if e["type"] == "response.mcp_call_arguments.done"]
    assert done[0]["arguments"] == arg_deltas
    assert "response.mcp_call.failed" not in types(events)
    # the item as first added: in progress, nothing known yet
    added = next(e["item"] for e in events if e["type"] == "response.output_item.added" and e["item"]["type"] == "mcp_call")
    assert MCP_CALL_KEYS <= set(added) and added["status"] == "in_progress" and added["output"] is None

    # the same request, not streamed: the same output
    resp = client.responses.create(
        model=MODEL, input='CALL add {"a":2,"b":3}', tools=[mcp_tool("rust", mcp_servers.rust)]
    ).to_dict()
    assert resp["status"] == "completed"
    assert shape(resp["output"]) == shape(final["output"])
    assert items_of(resp, "mcp_call")[0]["output"] == call["output"]


def test_mcp_add_stream_helper(client, mcp_servers):
    with client.responses.stream(
        model=MODEL, input='CALL add {"a":2,"b":3}', tools=[mcp_tool("rust", mcp_servers.rust)]
    ) as stream:
        seen = [ev.type for ev in stream]
        final = stream.get_final_response()
    assert "response.mcp_call.completed" in seen
    assert [o.type for o in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert "5" in final.output[1].output
    assert "5" in final.output_text


# ---------------------------------------------------------------------------------------------
# failures are data


@pytest.mark.parametrize("tool", ["fail", "boom"])
def test_mcp_failing_tool(client, mcp_servers, tool):
    events = raw_events(client, model=MODEL, input=f"CALL {tool} {{}}", tools=[mcp_tool("rust", mcp_servers.rust)])
    final = check_stream(events)
    assert final["status"] == "completed", final.get("error")
    assert events[-1]["type"] == "response.completed"
    assert kinds(final) == ["mcp_list_tools", "mcp_call", "message"]
    call = final["output"][1]
    check_mcp_call_item(call)
    assert call["name"] == tool and call["status"] == "failed", call
    assert call["output"] is None, call
    err = call["error"]
    assert isinstance(err, dict), err
    if tool == "fail":
        assert err["type"] == "mcp_tool_execution_error", err
        assert "content" in err, err
    else:
        assert err["type"] == "mcp_protocol_error", err
        assert err["code"] == -32042 and err["message"], err
    seq = item_events(events, call["id"])
    assert "response.mcp_call.failed" in seq and "response.mcp_call.completed" not in seq, seq
    assert seq.index("response.mcp_call.failed") == len(seq) - 2, seq
    # the model was told and answered
    assert message_text(final).startswith("Tool results:")


def test_mcp_python_sdk_server_explode(client, mcp_servers):
    events = raw_events(client, model=MODEL, input="CALL explode {}", tools=[mcp_tool("py", mcp_servers.py)])
    final = check_stream(events)
    assert final["status"] == "completed"
    call = items_of(final, "mcp_call")[0]
    check_mcp_call_item(call)
    assert call["server_label"] == "py" and call["status"] == "failed"
    assert call["error"]["type"] == "mcp_tool_execution_error", call["error"]
    assert "exploded on purpose" in json.dumps(call["error"]["content"])
    assert "response.mcp_call.failed" in types(events)


def test_mcp_unreachable_server(client, mcp_servers):
    dead = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    events = raw_events(client, model=MODEL, input="hello anyway", tools=[mcp_tool("gone", dead)])
    final = check_stream(events)
    assert final["status"] == "completed"
    assert kinds(final) == ["mcp_list_tools", "message"]
    listed = final["output"][0]
    assert listed["server_label"] == "gone" and listed["tools"] == []
    assert isinstance(listed.get("error"), str) and listed["error"], listed
    assert item_events(events, listed["id"]) == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.failed",
        "response.output_item.done",
    ]
    assert message_text(final) == "Hello! You said: hello anyway"


def test_mcp_unreachable_server_beside_a_live_one(client, mcp_servers):
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    events = raw_events(
        client,
        model=MODEL,
        input='CALL add {"a":2,"b":3}',
        tools=[mcp_tool("gone", dead), mcp_tool("rust", mcp_servers.rust)],
    )
    final = check_stream(events)
    assert final["status"] == "completed"
    lists = {o["server_label"]: o for o in items_of(final, "mcp_list_tools")}
    assert lists["gone"]["error"] and lists["gone"]["tools"] == []
    assert lists["rust"]["tools"] and not lists["rust"].get("error")
    assert "5" in items_of(final, "mcp_call")[0]["output"]


# ---------------------------------------------------------------------------------------------
# two servers, one turn


def test_mcp_two_servers_one_turn(client, mcp_servers):
    tools = [mcp_tool("rust", mcp_servers.rust), mcp_tool("py", mcp_servers.py)]
    text = 'Use both\nCALL shout {"text":"hi"}\nCALL add {"a":2,"b":3}'
    events = raw_events(client, model=MODEL, input=text, tools=tools)
    final = check_stream(events)
    assert final["status"] == "completed"
    assert kinds(final) == ["mcp_list_tools", "mcp_list_tools", "mcp_call", "mcp_call", "message"]
    assert sorted(o["server_label"] for o in items_of(final, "mcp_list_tools")) == ["py", "rust"]
    calls = {c["name"]: c for c in items_of(final, "mcp_call")}
    assert set(calls) == {"shout", "add"}
    for c in calls.values():
        check_mcp_call_item(c)
        assert c["status"] == "completed" and c["error"] is None
    assert calls["shout"]["server_label"] == "py" and calls["shout"]["output"] == "HI"
    assert calls["add"]["server_label"] == "rust" and "5" in calls["add"]["output"]
    assert [c["name"] for c in items_of(final, "mcp_call")] == ["shout", "add"], "calls in the model's order"
    assert sum(t == "response.mcp_call.completed" for t in types(events)) == 2
    # the echoed tools keep their labels
    assert [t["server_label"] for t in final["tools"]] == ["rust", "py"]


def test_mcp_two_servers_results_reach_the_model_together(client, mcp_servers):
    """Both results of one turn go back to the model in that turn's reply: the fake model answers
    `Tool results: <every trailing tool output, joined by "; ">`, so one output missing from its
    answer means the relay did not present the two calls as one turn's calls and their results."""
    tools = [mcp_tool("rust", mcp_servers.rust), mcp_tool("py", mcp_servers.py)]
    text = 'CALL shout {"text":"hi"}\nCALL add {"a":2,"b":3}'
    resp = client.responses.create(model=MODEL, input=text, tools=tools).to_dict()
    calls = items_of(resp, "mcp_call")
    assert [c["status"] for c in calls] == ["completed", "completed"]
    assert message_text(resp) == "Tool results: " + "; ".join(c["output"] for c in calls)


# ---------------------------------------------------------------------------------------------
# approvals held back (default require_approval), list reuse


def test_mcp_default_approval_request(client, mcp_servers):
    tool = {"type": "mcp", "server_label": "rust", "server_url": mcp_servers.rust}
    events = raw_events(client, model=MODEL, input='CALL add {"a":2,"b":3}', tools=[tool])
    final = check_stream(events)
    assert final["status"] == "completed"
    assert kinds(final) == ["mcp_list_tools", "mcp_approval_request"], kinds(final)
    req = final["output"][1]
    assert req["id"].startswith("mcpr_") and req["server_label"] == "rust" and req["name"] == "add"
    assert json.loads(req["arguments"]) == {"a": 2, "b": 3}
    assert not any(t.startswith("response.mcp_call") for t in types(events))
    assert item_events(events, req["id"]) == ["response.output_item.added", "response.output_item.done"]
    assert final["tools"][0]["require_approval"] == "always"


def test_mcp_previous_response_does_not_relist(client, mcp_servers):
    tools = [mcp_tool("rust", mcp_servers.rust)]
    first = client.responses.create(model=MODEL, input='CALL add {"a":2,"b":3}', tools=tools)
    assert [o.type for o in first.output] == ["mcp_list_tools", "mcp_call", "message"]
    events = raw_events(
        client, model=MODEL, input='CALL add {"a":40,"b":2}', tools=tools, previous_response_id=first.id
    )
    second = check_stream(events)
    assert second["status"] == "completed" and second["previous_response_id"] == first.id
    assert kinds(second) == ["mcp_call", "message"], kinds(second)
    assert not any(t.startswith("response.mcp_list_tools") for t in types(events))
    assert "42" in second["output"][0]["output"]


# ---------------------------------------------------------------------------------------------
# secrets


def test_mcp_secrets_never_in_the_stream(relay, mcp_servers):
    secrets = ("auth-5ecret-Tok3n", "hdr-5ecret-Val", "qry-5ecret-Tok")
    tool = {
        "type": "mcp",
        "server_label": "rust",
        "server_url": f"{mcp_servers.rust}?token={secrets[2]}",
        "authorization": secrets[0],
        "headers": {"X-Relay-Secret": secrets[1]},
        "require_approval": "never",
    }
    r = post_raw(
        relay.base,
        "/v1/responses",
        {"model": MODEL, "stream": True, "input": "CALL whoami {}", "tools": [tool]},
    )
    assert r.status == 200, r.body[:500]
    for s in secrets:
        assert s.encode() not in r.body, f"secret {s!r} appears in the SSE body"
    events = sse_events(r.body)
    final = _check_stream(events, allow_mcp=True, schema=True)
    call = items_of(final, "mcp_call")[0]
    # the authorization and the header did reach the server (it names headers, never values)
    assert call["output"].startswith("authorized"), call
    assert "x-relay-secret" in call["output"], call
    for ev in events:
        echoed = (ev.get("response") or {}).get("tools")
        if echoed is None:
            continue
        t = echoed[0]
        assert t["headers"] is None, t
        assert t.get("authorization") is None, t
        assert t["server_url"] == f"{mcp_servers.rust}?***", t
    rid = events[0]["response"]["id"]
    for path in (f"/v1/responses/{rid}?stream=true", f"/v1/responses/{rid}", f"/v1/responses/{rid}/input_items"):
        got = get_raw(relay.base, path)
        assert got.status == 200, (path, got.body[:300])
        for s in secrets:
            assert s.encode() not in got.body, f"secret {s!r} appears in GET {path}"
    plain = post_raw(relay.base, "/v1/responses", {"model": MODEL, "input": "CALL whoami {}", "tools": [tool]})
    assert plain.status == 200
    for s in secrets:
        assert s.encode() not in plain.body, f"secret {s!r} appears in the non-streamed JSON body"
