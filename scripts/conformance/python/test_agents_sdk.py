"""MCP approvals (issue 5) through the OpenAI Agents SDK for Python (`openai-agents`): an `Agent`
with a `HostedMCPTool` whose `on_approval_request` callback approves or denies, run by `Runner.run`
and `Runner.run_streamed` against the relay on both upstream kinds, with the project's rmcp test
server (`mcp-test-server`) as the MCP server. The fake model calls tools on `CALL <tool> <json>`
lines and, after tool results, answers `Tool results: ...`.

The SDK answers the relay's `mcp_approval_request` item itself: it calls the callback, then sends
an `mcp_approval_response` item back in a second request. By default that request is stateless
(the whole conversation so far, the request item included, in `input`); with
`auto_previous_response_id=True` ("chained") it carries `previous_response_id` and only the new
items. Every request body the SDK sends is recorded, so a failure shows what went over the wire."""

from __future__ import annotations

import asyncio
import json

import httpx2 as httpx
import pytest
from openai import AsyncOpenAI

import agents
from agents import Agent, HostedMCPTool, Runner
from agents.items import (
    MCPApprovalRequestItem,
    MCPApprovalResponseItem,
    MCPListToolsItem,
    MessageOutputItem,
    ToolCallItem,
)
from agents.models.openai_responses import OpenAIResponsesModel

from conftest import MODEL

agents.set_tracing_disabled(True)

LABEL = "rust"
ADD_INPUT = 'CALL add {"a":2,"b":3}'


class Wire:
    """Records the JSON bodies of the SDK's requests and the relay's answers to them."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.errors: list[str] = []

    async def on_request(self, request: httpx.Request) -> None:
        body = request.content
        try:
            self.requests.append(json.loads(body) if body else {})
        except ValueError:
            self.requests.append({"_raw": body.decode("utf-8", "replace")})

    async def on_response(self, response: httpx.Response) -> None:
        if response.status_code >= 400:
            await response.aread()
            self.errors.append(f"{response.status_code} {response.text}")

    def dump(self) -> str:
        return "\n".join(
            [f"request {i}: {json.dumps(r, sort_keys=True)}" for i, r in enumerate(self.requests)]
            + [f"relay error: {e}" for e in self.errors]
        )


def make_agent(relay, mcp_url: str, on_approval, wire: Wire) -> tuple[Agent, AsyncOpenAI]:
    http = httpx.AsyncClient(
        timeout=60, event_hooks={"request": [wire.on_request], "response": [wire.on_response]}
    )
    client = AsyncOpenAI(base_url=relay.v1, api_key="x", max_retries=0, http_client=http)
    agent = Agent(
        name="approver",
        instructions="Use the MCP tools when asked.",
        model=OpenAIResponsesModel(model=MODEL, openai_client=client),
        tools=[
            HostedMCPTool(
                tool_config={"type": "mcp", "server_label": LABEL, "server_url": mcp_url},
                on_approval_request=on_approval,
            )
        ],
    )
    return agent, client


class Approver:
    """An approval callback that records what it was asked and answers `decision`."""

    def __init__(self, decision: dict) -> None:
        self.decision = decision
        self.seen: list[dict] = []

    def __call__(self, request) -> dict:
        data = request.data
        self.seen.append(
            {
                "id": data.id,
                "type": data.type,
                "name": data.name,
                "server_label": data.server_label,
                "arguments": data.arguments,
            }
        )
        return self.decision


def raw(item) -> dict:
    r = item.raw_item
    return r if isinstance(r, dict) else r.model_dump()


def check_request_seen(approver: Approver) -> dict:
    assert len(approver.seen) == 1, approver.seen
    seen = approver.seen[0]
    assert seen["type"] == "mcp_approval_request"
    assert seen["id"].startswith("mcpr_"), seen
    assert seen["name"] == "add" and seen["server_label"] == LABEL, seen
    assert json.loads(seen["arguments"]) == {"a": 2, "b": 3}, seen
    return seen


def check_wire(wire: Wire, result, chained: bool, request_id: str, approve: bool, reason: str | None = None) -> None:
    """Two model requests: the question, then the answer to the approval request."""
    assert not wire.errors, wire.dump()
    assert len(wire.requests) == 2, wire.dump()
    first, second = wire.requests
    assert [t["type"] for t in first["tools"]] == ["mcp"], first
    assert "previous_response_id" not in first or first["previous_response_id"] is None, first
    second_types = [i.get("type") for i in second["input"] if isinstance(i, dict)]
    if chained:
        assert second.get("previous_response_id") == result.raw_responses[0].response_id, wire.dump()
        assert second.get("previous_response_id", "").startswith("resp_"), wire.dump()
        assert "mcp_approval_request" not in second_types, wire.dump()
    else:
        assert second.get("previous_response_id") is None, wire.dump()
        assert "mcp_approval_request" in second_types, wire.dump()
    # The second request answers the approval request.
    answers = [i for i in second["input"] if isinstance(i, dict) and i.get("type") == "mcp_approval_response"]
    assert len(answers) == 1, wire.dump()
    assert answers[0]["approval_request_id"] == request_id
    assert answers[0]["approve"] is approve
    if reason is not None:
        assert answers[0].get("reason") == reason, answers[0]


def check_approved_items(items, request_id: str) -> None:
    by_type = [type(i).__name__ for i in items]
    assert any(isinstance(i, MCPListToolsItem) for i in items), by_type
    requests = [raw(i) for i in items if isinstance(i, MCPApprovalRequestItem)]
    assert [r["id"] for r in requests] == [request_id], by_type
    responses = [raw(i) for i in items if isinstance(i, MCPApprovalResponseItem)]
    assert [(r["approval_request_id"], r["approve"]) for r in responses] == [(request_id, True)], responses
    calls = [raw(i) for i in items if isinstance(i, ToolCallItem) and raw(i).get("type") == "mcp_call"]
    assert len(calls) == 1, by_type
    call = calls[0]
    assert call["id"].startswith("mcp_") and call["name"] == "add" and call["server_label"] == LABEL, call
    assert json.loads(call["arguments"]) == {"a": 2, "b": 3}, call
    assert call["approval_request_id"] == request_id, call
    assert not call.get("error") and "5" in (call.get("output") or ""), call
    # the call ran before the model's last answer
    last_message = max(i for i, it in enumerate(items) if isinstance(it, MessageOutputItem))
    call_index = next(i for i, it in enumerate(items) if isinstance(it, ToolCallItem) and raw(it).get("type") == "mcp_call")
    assert call_index < last_message, by_type


def check_final_approved(final_output) -> None:
    assert isinstance(final_output, str), final_output
    assert final_output.startswith("Tool results: ") and "5" in final_output, final_output


# ---------------------------------------------------------------------------------------------


CHAIN = pytest.mark.parametrize("chained", [False, True], ids=["stateless", "chained"])


@CHAIN
def test_agents_sdk_approve(relay, mcp_servers, chained):
    async def go():
        wire = Wire()
        approver = Approver({"approve": True})
        agent, client = make_agent(relay, mcp_servers.rust, approver, wire)
        try:
            result = await Runner.run(agent, ADD_INPUT, auto_previous_response_id=chained)
        except Exception as e:
            pytest.fail(f"{type(e).__name__}: {e}\n{wire.dump()}")
        finally:
            await client.close()
        return result, wire, approver

    result, wire, approver = asyncio.run(go())
    seen = check_request_seen(approver)
    check_wire(wire, result, chained, seen["id"], approve=True)
    check_final_approved(result.final_output)
    check_approved_items(result.new_items, seen["id"])


@CHAIN
def test_agents_sdk_deny_with_reason(relay, mcp_servers, chained):
    reason = "adding is not allowed today"

    async def go():
        wire = Wire()
        approver = Approver({"approve": False, "reason": reason})
        agent, client = make_agent(relay, mcp_servers.rust, approver, wire)
        try:
            result = await Runner.run(agent, ADD_INPUT, auto_previous_response_id=chained)
        except Exception as e:
            pytest.fail(f"{type(e).__name__}: {e}\n{wire.dump()}")
        finally:
            await client.close()
        return result, wire, approver

    result, wire, approver = asyncio.run(go())
    seen = check_request_seen(approver)
    check_wire(wire, result, chained, seen["id"], approve=False, reason=reason)
    items = result.new_items
    by_type = [type(i).__name__ for i in items]
    # no tool call ran
    assert not [i for i in items if isinstance(i, ToolCallItem) and raw(i).get("type") == "mcp_call"], by_type
    responses = [raw(i) for i in items if isinstance(i, MCPApprovalResponseItem)]
    assert [(r["approval_request_id"], r["approve"]) for r in responses] == [(seen["id"], False)], responses
    # the model was told: the scripted model echoes the refusal it got as the tool result
    out = result.final_output
    assert isinstance(out, str) and out.startswith("Tool results: "), out
    assert "refused" in out and reason in out, out
    assert "5" not in out.replace(reason, ""), out


@CHAIN
def test_agents_sdk_approve_streamed(relay, mcp_servers, chained):
    async def go():
        wire = Wire()
        approver = Approver({"approve": True})
        agent, client = make_agent(relay, mcp_servers.rust, approver, wire)
        events = []
        try:
            result = Runner.run_streamed(agent, ADD_INPUT, auto_previous_response_id=chained)
            async for ev in result.stream_events():
                events.append(ev)
        except Exception as e:
            pytest.fail(f"{type(e).__name__}: {e}\n{wire.dump()}")
        finally:
            await client.close()
        return result, events, wire, approver

    result, events, wire, approver = asyncio.run(go())
    assert result.is_complete
    seen = check_request_seen(approver)
    check_wire(wire, result, chained, seen["id"], approve=True)
    assert all(r.get("stream") is True for r in wire.requests), wire.dump()
    check_final_approved(result.final_output)
    check_approved_items(result.new_items, seen["id"])

    # the raw Responses events of both model calls came through, the MCP call's among them
    raw_types = [ev.data.type for ev in events if ev.type == "raw_response_event"]
    assert raw_types.count("response.completed") == 2, raw_types
    assert "response.mcp_call.completed" in raw_types, raw_types
    assert "response.output_text.delta" in raw_types, raw_types
    # and the run-item events name the approval request, the MCP call and the final message
    names = [ev.name for ev in events if ev.type == "run_item_stream_event"]
    assert "mcp_approval_requested" in names, names
    assert "tool_called" in names, names
    assert "message_output_created" in names, names
    text = "".join(
        ev.data.delta for ev in events if ev.type == "raw_response_event" and ev.data.type == "response.output_text.delta"
    )
    assert text.endswith(result.final_output), (text, result.final_output)
