"""Every Anthropic and Gemini transcript of fixtures/upstream/ (written from the providers'
documented examples, see their READMEs) replayed by the fake upstream through a relay of its kind
and read with the official OpenAI Python SDK's stream helper: the SDK takes every event, and what
it accumulates is what the golden event log of that transcript says (fixtures/golden/upstream/,
checked byte for byte by the Rust suite): the final status, the text, the output items' kinds.
"""

from __future__ import annotations

import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
TRANSCRIPTS = sorted(
    (kind, p.stem)
    for kind in ("anthropic", "gemini")
    for p in (ROOT / "fixtures" / "upstream" / kind).glob("*.sse")
)


def golden(kind: str, name: str) -> list[dict]:
    path = ROOT / "fixtures" / "golden" / "upstream" / kind / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_every_anthropic_and_gemini_transcript_is_here():
    kinds = {k for k, _ in TRANSCRIPTS}
    assert kinds == {"anthropic", "gemini"} and len(TRANSCRIPTS) >= 17, TRANSCRIPTS


@pytest.mark.parametrize(("kind", "name"), TRANSCRIPTS, ids=[f"{k}/{n}" for k, n in TRANSCRIPTS])
def test_the_sdk_reads_each_transcript_as_its_golden_log_says(native_relays, kind, name):
    import openai

    expected = golden(kind, name)
    terminal = expected[-1]
    assert terminal["type"] in ("response.completed", "response.incomplete", "response.failed")
    want = terminal["response"]
    client = openai.OpenAI(
        base_url=native_relays[kind].v1, api_key="test-key", max_retries=0, timeout=60
    )
    try:
        events: list[dict] = []
        with client.responses.stream(model=f"replay:{kind}/{name}.sse", input="x") as stream:
            for ev in stream:
                events.append(ev.to_dict(warnings=False))
            # The helper's own accumulation ends only on `response.completed`.
            if terminal["type"] == "response.completed":
                assert stream.get_final_response().output_text == text_of(want)
    finally:
        client.close()
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == terminal["type"], [e["type"] for e in events]
    got = events[-1]["response"]
    assert got["status"] == want["status"]
    assert [o["type"] for o in got["output"]] == [o["type"] for o in want["output"]]
    assert text_of(got) == text_of(want)
    assert (got.get("incomplete_details") or {}).get("reason") == (
        (want.get("incomplete_details") or {}).get("reason")
    )
    assert bool(got.get("error")) == bool(want.get("error"))


def text_of(response: dict) -> str:
    return "".join(
        c.get("text", "")
        for o in response["output"]
        if o["type"] == "message"
        for c in o.get("content", [])
    )
