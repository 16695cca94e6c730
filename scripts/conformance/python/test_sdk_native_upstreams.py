"""The official OpenAI Python SDK against relays driving native upstreams (issue 37): Anthropic's
Messages API (`--upstream-api anthropic`) and Gemini's `streamGenerateContent`
(`--upstream-api gemini`), both spoken by the fake upstream, each relay with an upstream key.

The fake signs its reasoning (Anthropic's `thinking` blocks, Gemini's `thoughtSignature`s) and
refuses with a 400, as the real servers do, a turn that sends a signature back altered or leaves it
out. So a run whose later model turn follows the first turn's tool call completes only if that turn
carried the first turn's signature byte for byte; these tests check it through what the SDK sees.
"""

from __future__ import annotations

import json

import openai
import pytest

from conftest import MODEL
from fixtures import WEATHER_TOOL
from oresp import check_stream as _check_stream


def check_stream(events: list[dict]) -> dict:
    # Events that went through the SDK's models: ordering and identity rules only.
    return _check_stream(events, schema=False)


def raw_events(client, **kw) -> list[dict]:
    stream = client.responses.create(stream=True, **kw)
    try:
        return [ev.to_dict() for ev in stream]
    finally:
        stream.close()


def mcp_tool(label: str, url: str) -> dict:
    return {"type": "mcp", "server_label": label, "server_url": url, "require_approval": "never"}


def kinds(resp: dict) -> list[str]:
    return [o["type"] for o in resp["output"]]


def items_of(resp: dict, kind: str) -> list[dict]:
    return [o for o in resp["output"] if o["type"] == kind]


def thinking_model(kind: str, n: int = 2) -> str:
    """The fake thinking `n` "think " deltas; Anthropic's also with a `redacted_thinking` block,
    which must come back as it was made too."""
    return f"{MODEL}?reasoning={n}" + ("&redacted=1" if kind == "anthropic" else "")


# What each fake's 400 names when a turn comes without the signed reasoning it needs.
LOST_SIGNATURE = {"anthropic": "thinking", "gemini": "thought_signature"}


# ---------------------------------------------------------------------------------------------
# text


def test_stream_helper_accumulates_the_text(native_client):
    seen: list[str] = []
    events: list[dict] = []
    with native_client.responses.stream(model=MODEL, input="native stream please") as stream:
        for ev in stream:
            events.append(ev.to_dict(warnings=False))
            if ev.type == "response.output_text.delta":
                seen.append(ev.delta)
        final = stream.get_final_response()
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert final.status == "completed"
    assert final.output_text == "".join(seen) == "Hello! You said: native stream please"
    assert len(seen) == 8, "the fake answers in 8 deltas; the relay must not merge or split them"
    assert final.model == MODEL
    assert final.usage.output_tokens == 8 and final.usage.input_tokens > 0


def test_non_streamed_text(native_client):
    resp = native_client.responses.create(model=f"{MODEL}?deltas=3", input="not streamed", instructions="be brief")
    d = resp.to_dict()
    assert resp.status == "completed", d
    assert kinds(d) == ["message"]
    assert resp.output_text == "Hello! You said: not streamed"
    assert resp.usage.output_tokens == 3
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    # The same run read back from the relay's store.
    again = native_client.responses.retrieve(resp.id)
    assert again.output_text == resp.output_text and again.status == "completed"


# ---------------------------------------------------------------------------------------------
# an MCP run with signed reasoning


def test_mcp_run_sends_the_first_turns_signature_back(native_client, native_relay, mcp_servers):
    kind = native_relay.kind
    events: list[dict] = []
    with native_client.responses.stream(
        model=thinking_model(kind),
        reasoning={"effort": "low"},
        input='CALL add {"a":2,"b":3}',
        tools=[mcp_tool("rust", mcp_servers.rust)],
    ) as stream:
        for ev in stream:
            events.append(ev.to_dict(warnings=False))
        # (The helper's Response is parsed: its text parts carry `parsed` too.)
        final = stream.get_final_response().to_dict(warnings=False)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed", [e["type"] for e in events]
    # The second model turn (after the call) was accepted: the fake refuses one whose signed
    # reasoning was lost or altered, and the run would have failed.
    assert final["status"] == "completed", final.get("error")
    k = kinds(final)
    assert k[0] == "mcp_list_tools" and "mcp_call" in k and "message" in k, k
    assert k.index("reasoning") < k.index("mcp_call"), k
    call = items_of(final, "mcp_call")[0]
    assert call["name"] == "add" and call["status"] == "completed" and "5" in call["output"], call
    text = "".join(p["text"] for m in items_of(final, "message") for p in m["content"] if p["type"] == "output_text")
    assert text.startswith("Tool results: ") and "5" in text, text
    # The first turn's reasoning: its thinking shown as the summary, its signed blocks sealed.
    first = final["output"][k.index("reasoning")]
    assert first["summary"] == [{"type": "summary_text", "text": "think think "}], first
    sealed = first.get("encrypted_content") or ""
    assert sealed.startswith("rr1."), first
    assert "think" not in sealed, "sealed, not shown"
    summary = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta")
    assert summary.startswith("think think "), summary
    # Two model turns: each thought (Gemini: its last text part's signature is a reasoning item too).
    assert len(items_of(final, "reasoning")) >= 2, k


def weather_request(kind: str, **extra) -> dict:
    return {
        "model": thinking_model(kind),
        "reasoning": {"effort": "medium"},
        "input": 'CALL get_weather {"location":"Paris"}',
        "tools": [WEATHER_TOOL],
        **extra,
    }


def test_stateless_follow_up_sends_the_previous_output_back(native_client, native_relay):
    kind = native_relay.kind
    include = ["reasoning.encrypted_content"]
    first = native_client.responses.create(**weather_request(kind, store=False, include=include))
    assert first.status == "completed", first.to_dict()
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather", first.to_dict()
    assert json.loads(calls[0].arguments) == {"location": "Paris"}
    reasoning = [o for o in first.output if o.type == "reasoning"]
    assert reasoning and (reasoning[0].encrypted_content or "").startswith("rr1."), first.to_dict()

    def follow_up(previous: list):
        return native_client.responses.create(
            model=MODEL,
            reasoning={"effort": "medium"},
            store=False,
            include=include,
            tools=[WEATHER_TOOL],
            input=[
                {"role": "user", "content": 'CALL get_weather {"location":"Paris"}'},
                *previous,
                {"type": "function_call_output", "call_id": calls[0].call_id, "output": "rainy"},
            ],
        )

    # The SDK's output items sent back as they are: the signature goes back with them.
    second = follow_up(list(first.output))
    assert second.status == "completed", second.to_dict()
    assert second.output_text == "Tool results: rainy"

    # Without the reasoning item the model server refuses the turn, and its 400 passes through...
    with pytest.raises(openai.BadRequestError) as e:
        follow_up([o for o in first.output if o.type != "reasoning"])
    assert LOST_SIGNATURE[kind] in str(e.value.body), e.value.body
    # ...and an altered seal is the relay's own 400.
    altered = [o.to_dict() for o in first.output]
    r = next(o for o in altered if o["type"] == "reasoning")
    sealed = r["encrypted_content"]
    r["encrypted_content"] = sealed[:-1] + ("B" if sealed.endswith("A") else "A")
    with pytest.raises(openai.BadRequestError) as e:
        follow_up(altered)
    assert e.value.code == "invalid_encrypted_content", e.value.body


def test_follow_up_through_previous_response_id(native_client, native_relay):
    first = native_client.responses.create(**weather_request(native_relay.kind))
    assert first.status == "completed", first.to_dict()
    call = next(o for o in first.output if o.type == "function_call")
    second = native_client.responses.create(
        model=MODEL,
        reasoning={"effort": "medium"},
        previous_response_id=first.id,
        tools=[WEATHER_TOOL],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )
    assert second.status == "completed", second.to_dict()
    assert second.output_text == "Tool results: sunny"


# ---------------------------------------------------------------------------------------------
# stop reasons and a failure mid-stream


@pytest.mark.parametrize(
    "option, status, reason",
    [
        ("", "completed", None),
        ("?finish=length", "incomplete", "max_output_tokens"),
        ("?refusal=1", "incomplete", "content_filter"),
    ],
)
def test_stop_reasons(native_client, option, status, reason):
    resp = native_client.responses.create(model=MODEL + option, input="stop", max_output_tokens=16)
    assert resp.status == status, resp.to_dict()
    assert (resp.incomplete_details.reason if resp.incomplete_details else None) == reason
    events = raw_events(native_client, model=MODEL + option, input="stop", max_output_tokens=16)
    final = check_stream(events)
    assert events[-1]["type"] == f"response.{status}"
    assert final["status"] == status


def test_an_error_mid_stream_fails_the_response(native_client):
    events = raw_events(native_client, model=f"{MODEL}?fault=error_chunk", input="fail midway")
    final = check_stream(events)
    assert events[-1]["type"] == "response.failed", [e["type"] for e in events]
    assert final["status"] == "failed" and final["error"]["message"], final
