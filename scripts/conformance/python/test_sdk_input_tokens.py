"""`responses.input_tokens.count` (issue 21) and `POST /v1/agent` (issue 24) through the official
OpenAI Python SDK, on both upstream kinds: the count is the prompt tokens the model server reports
for the same request; `/v1/agent` is the create endpoint under Perplexity's name."""

from __future__ import annotations

from conftest import MODEL


def test_input_tokens_count_is_the_runs_own_prompt_tokens(client):
    params = dict(
        model=MODEL,
        instructions="Answer briefly.",
        input=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second"},
        ],
    )
    count = client.responses.input_tokens.count(**params)
    assert count.object == "response.input_tokens"
    assert count.input_tokens > 0
    run = client.responses.create(**params)
    assert count.input_tokens == run.usage.input_tokens, (count, run.usage)


def test_post_v1_agent_through_the_sdk(client):
    # Perplexity's path, as its users call it with the OpenAI SDK.
    import openai.types.responses as types

    r = client.post("/agent", body={"model": MODEL, "input": "hi agent"}, cast_to=types.Response)
    assert r.output_text == "Hello! You said: hi agent"
    assert client.responses.retrieve(r.id).id == r.id
