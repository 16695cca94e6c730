"""Stored runs (SPEC §7): retrieve, replay of the event log, resume after a sequence number."""

from __future__ import annotations

from conftest import MODEL
from oresp import get_raw, post_raw, sse_events


def _live(relay, model: str = MODEL) -> tuple[bytes, list[dict]]:
    r = post_raw(relay.base, "/v1/responses", {"model": model, "input": "keep this", "stream": True})
    assert r.status == 200
    return r.body, sse_events(r.body)


def _strip_comments(body: bytes) -> bytes:
    return b"".join(f + b"\n\n" for f in body.split(b"\n\n") if f and not f.startswith(b":"))


def test_retrieve_equals_terminal_response(client, relay):
    _, events = _live(relay)
    terminal = events[-1]["response"]
    got = get_raw(relay.base, f"/v1/responses/{terminal['id']}")
    assert got.status == 200
    assert got.json() == terminal
    sdk = client.responses.retrieve(terminal["id"])
    assert sdk.id == terminal["id"] and sdk.output_text == "Hello! You said: keep this"


def test_replay_is_byte_identical(relay):
    body, events = _live(relay, f"{MODEL}?reasoning=2")
    rid = events[0]["response"]["id"]
    replay = get_raw(relay.base, f"/v1/responses/{rid}?stream=true")
    assert replay.status == 200
    assert _strip_comments(replay.body) == _strip_comments(body)


def test_resume_after_sequence_number(client, relay):
    _, events = _live(relay)
    rid = events[0]["response"]["id"]
    n = 5
    resumed = get_raw(relay.base, f"/v1/responses/{rid}?stream=true&starting_after={n}")
    assert resumed.status == 200
    assert sse_events(resumed.body) == events[n + 1 :]
    stream = client.responses.retrieve(rid, stream=True, starting_after=n)
    try:
        seqs = [ev.sequence_number for ev in stream]
    finally:
        stream.close()
    assert seqs == list(range(n + 1, len(events)))


def test_delete_then_404(client, relay):
    _, events = _live(relay)
    rid = events[0]["response"]["id"]
    client.responses.delete(rid)
    assert get_raw(relay.base, f"/v1/responses/{rid}").status == 404
