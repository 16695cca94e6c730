"""The MCP approval flow (issue 5) through the official OpenAI Python SDK, raw, over both upstream
kinds: a call that needs approval becomes an `mcp_approval_request`; the answer (with
`previous_response_id`, or statelessly by `item_reference`) runs it first, streamed and not; a
refusal runs nothing and the model is told."""

from __future__ import annotations

from conftest import MODEL
from oresp import check_stream


def tool(url: str) -> dict:
    # No require_approval: the relay's default, as OpenAI's, is "always".
    return {"type": "mcp", "server_label": "rust", "server_url": url}


def answer(request_id: str, approve: bool, reason: str | None = None) -> dict:
    item = {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": approve}
    if reason:
        item["reason"] = reason
    return item


def kinds(resp) -> list[str]:
    return [o.type for o in resp.output]


def ask(client, url: str):
    first = client.responses.create(model=MODEL, input='CALL add {"a":2,"b":3}', tools=[tool(url)])
    assert first.status == "completed"
    assert kinds(first) == ["mcp_list_tools", "mcp_approval_request"]
    req = first.output[1]
    assert req.id.startswith("mcpr_") and req.name == "add" and req.server_label == "rust"
    return first, req


def test_approved_call_runs_first_non_streamed(client, mcp_servers):
    first, req = ask(client, mcp_servers.rust)
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, tools=[tool(mcp_servers.rust)], input=[answer(req.id, True)]
    )
    assert kinds(second) == ["mcp_call", "message"]
    call = second.output[0]
    assert call.approval_request_id == req.id
    assert call.status == "completed" and "5" in call.output
    assert second.output_text == f"Tool results: {call.output}"


def test_approved_call_runs_first_streamed(client, mcp_servers):
    first, req = ask(client, mcp_servers.rust)
    stream = client.responses.create(
        model=MODEL, previous_response_id=first.id, tools=[tool(mcp_servers.rust)], input=[answer(req.id, True)], stream=True
    )
    events = [ev.to_dict() for ev in stream]
    final = check_stream(events, schema=False)
    types = [e["type"] for e in events]
    assert "response.mcp_call.completed" in types and "response.mcp_list_tools.in_progress" not in types
    assert [o["type"] for o in final["output"]] == ["mcp_call", "message"]
    assert final["output"][0]["approval_request_id"] == req.id


def test_refused_call_runs_nothing_and_the_model_is_told(client, mcp_servers):
    first, req = ask(client, mcp_servers.rust)
    with client.responses.stream(
        model=MODEL, previous_response_id=first.id, tools=[tool(mcp_servers.rust)], input=[answer(req.id, False, "not now")]
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert kinds(final) == ["message"]
    assert "refused" in final.output_text and "not now" in final.output_text


def test_stateless_answer_by_item_reference(client, mcp_servers):
    _, req = ask(client, mcp_servers.rust)
    second = client.responses.create(
        model=MODEL,
        tools=[tool(mcp_servers.rust)],
        input=[{"type": "item_reference", "id": req.id}, answer(req.id, True)],
    )
    assert kinds(second) == ["mcp_list_tools", "mcp_call", "message"]
    assert second.output[1].approval_request_id == req.id
