"""Conversations (issue 21) through the official OpenAI Python SDK and the Agents SDK, on both
upstream kinds: the Conversations API calls, `responses.create(conversation=...)` across turns,
and the Agents SDK's `OpenAIConversationsSession` remembering a first turn in the second.

The fake model counts 10 prompt tokens per message it is sent, so a turn that sees the earlier
turns reports more input tokens; it answers `Hello! You said: <last user text>`."""

from __future__ import annotations

import asyncio
import json

import httpx2 as httpx
import openai
import pytest
from openai import AsyncOpenAI

import agents
from agents import Agent, OpenAIConversationsSession, Runner
from agents.models.openai_responses import OpenAIResponsesModel

from conftest import MODEL

agents.set_tracing_disabled(True)


def test_the_conversations_api_through_the_sdk(client):
    conv = client.conversations.create(
        metadata={"topic": "sdk"},
        items=[{"type": "message", "role": "user", "content": "hello there"}],
    )
    assert conv.id.startswith("conv_") and conv.object == "conversation"
    assert conv.metadata == {"topic": "sdk"}
    assert client.conversations.retrieve(conv.id).id == conv.id
    updated = client.conversations.update(conv.id, metadata={"topic": "changed"})
    assert updated.metadata == {"topic": "changed"}
    added = client.conversations.items.create(
        conv.id, items=[{"type": "message", "role": "user", "content": "second"}]
    )
    assert [i.type for i in added.data] == ["message"]
    new_id = added.data[0].id
    listed = list(client.conversations.items.list(conv.id, order="asc"))
    assert [i.content[0].text for i in listed] == ["hello there", "second"]
    item = client.conversations.items.retrieve(new_id, conversation_id=conv.id)
    assert item.id == new_id and item.content[0].text == "second"
    after = client.conversations.items.delete(new_id, conversation_id=conv.id)
    assert after.id == conv.id
    assert [i.id for i in client.conversations.items.list(conv.id)] == [listed[0].id]
    deleted = client.conversations.delete(conv.id)
    assert deleted.deleted and deleted.id == conv.id
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conv.id)


def test_responses_on_a_conversation_see_the_earlier_turns(client):
    conv = client.conversations.create()
    first = client.responses.create(model=MODEL, input="first question", conversation=conv.id)
    assert first.conversation is not None and first.conversation.id == conv.id
    assert first.output_text == "Hello! You said: first question"
    with client.responses.stream(model=MODEL, input="second question", conversation={"id": conv.id}) as s:
        for _ in s:
            pass
        second = s.get_final_response()
    assert second.output_text == "Hello! You said: second question"
    # Three messages before the second question (the first question, its answer, and it).
    assert second.usage.input_tokens > first.usage.input_tokens, (first.usage, second.usage)
    texts = [i.content[0].text for i in client.conversations.items.list(conv.id, order="asc")]
    assert texts == [
        "first question",
        "Hello! You said: first question",
        "second question",
        "Hello! You said: second question",
    ]
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="x", conversation=conv.id, previous_response_id=first.id)


def test_an_agents_sdk_conversation_session_remembers_the_first_turn(relay):
    sent: list[dict] = []

    async def record(request: httpx.Request) -> None:
        if request.content:
            try:
                sent.append({"path": request.url.path, "body": json.loads(request.content)})
            except ValueError:
                pass

    async def main():
        http = httpx.AsyncClient(timeout=60, event_hooks={"request": [record]})
        client = AsyncOpenAI(base_url=relay.v1, api_key="x", max_retries=0, http_client=http)
        agent = Agent(
            name="rememberer",
            instructions="Remember what the user says.",
            model=OpenAIResponsesModel(model=MODEL, openai_client=client),
        )
        session = OpenAIConversationsSession(openai_client=client)
        first = await Runner.run(agent, "my name is Ada", session=session)
        second = await Runner.run(agent, "what is my name", session=session)
        items = await session.get_items()
        await http.aclose()
        return first, second, items

    first, second, items = asyncio.run(main())
    assert first.final_output == "Hello! You said: my name is Ada"
    assert second.final_output == "Hello! You said: what is my name"
    creates = [s["body"] for s in sent if s["path"].endswith("/responses")]
    assert len(creates) == 2, sent
    assert "my name is Ada" in json.dumps(creates[1]), creates[1]
    texts = json.dumps([i if isinstance(i, dict) else i.model_dump() for i in items])
    for said in ["my name is Ada", "what is my name", "Hello! You said: what is my name"]:
        assert said in texts, texts


def test_compaction_through_the_sdk(client):
    compacted = client.responses.compact(
        model=MODEL,
        input=[
            {"role": "user", "content": "the plan in detail"},
            {"role": "assistant", "content": "understood"},
        ],
    )
    assert compacted.object == "response.compaction"
    kinds = [i.type for i in compacted.output]
    assert kinds == ["message", "compaction"], kinds
    item = compacted.output[-1]
    assert item.encrypted_content.startswith("rr1.")
    nxt = client.responses.create(
        model=MODEL,
        input=[item.model_dump(exclude_none=True), {"role": "user", "content": "continue"}],
    )
    assert nxt.output_text == "Hello! You said: continue"
