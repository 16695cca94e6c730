"""The official OpenAI Python SDK's own paths for stored runs (issue 4), over both upstream kinds and
the SQLite store: resume (`retrieve(stream=True, starting_after=N)`, `stream(response_id=...)`),
background runs (resume while running, cancel, polling), input item pagination, delete."""

from __future__ import annotations

import time

import openai
import pytest

from conftest import MODEL
from oresp import StreamChecker, check_stream as _check_stream


def check_stream(events: list[dict]) -> dict:
    # Events that went through the SDK's models: ordering and identity rules only.
    return _check_stream(events, schema=False)


def helper_dict(ev) -> dict:
    """An event from the `responses.stream()` helper as the wire dict: without the keys the helper
    adds (`snapshot` on text deltas, `parsed` on parsed items)."""

    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k not in ("snapshot", "parsed")}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    return strip(ev.to_dict(warnings=False))


def created_events(client, **kw) -> list[dict]:
    stream = client.responses.create(stream=True, **kw)
    try:
        return [ev.to_dict() for ev in stream]
    finally:
        stream.close()


def retrieved_events(client, rid: str, **kw) -> list[dict]:
    stream = client.responses.retrieve(rid, stream=True, **kw)
    try:
        return [ev.to_dict() for ev in stream]
    finally:
        stream.close()


def wait_status(client, rid: str, statuses: tuple[str, ...], timeout: float = 20.0):
    deadline = time.time() + timeout
    while True:
        resp = client.responses.retrieve(rid)
        if resp.status in statuses:
            return resp
        assert time.time() < deadline, f"{rid} still {resp.status} after {timeout} s (waiting for {statuses})"
        time.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# resume


@pytest.mark.parametrize("n", [0, 3, 9])
def test_sdk_retrieve_stream_starting_after(client, n):
    full = created_events(client, model=f"{MODEL}?reasoning=2", input="resume me")
    check_stream(full)
    rid = full[0]["response"]["id"]
    assert n < len(full) - 1
    resumed = retrieved_events(client, rid, starting_after=n)
    assert [e["sequence_number"] for e in resumed] == list(range(n + 1, len(full)))
    assert resumed == full[n + 1 :]
    # without starting_after: the whole log again
    assert retrieved_events(client, rid) == full


def test_sdk_retrieve_stream_starting_after_last_is_empty(client):
    full = created_events(client, model=MODEL, input="nothing after the end")
    rid = full[0]["response"]["id"]
    assert retrieved_events(client, rid, starting_after=full[-1]["sequence_number"]) == []


def test_sdk_stream_helper_response_id_starting_after(client):
    full = created_events(client, model=MODEL, input="helper resume")
    rid = full[0]["response"]["id"]
    n = 4
    # The helper replays from the start (its accumulator needs response.created) and filters
    # sequence numbers <= n on the client side.
    with client.responses.stream(response_id=rid, starting_after=n) as stream:
        got = [helper_dict(ev) for ev in stream]
        final = stream.get_final_response()
    assert got == full[n + 1 :]
    assert final.id == rid and final.status == "completed"
    assert final.output_text == "Hello! You said: helper resume"
    with client.responses.stream(response_id=rid) as stream:
        assert [helper_dict(ev) for ev in stream] == full
        assert stream.get_final_response().output_text == "Hello! You said: helper resume"


def test_sdk_resume_background_run_still_going(client):
    model = f"{MODEL}?deltas=60&delay_ms=10"
    stream = client.responses.create(model=model, input="long background run", background=True, stream=True)
    head: list[dict] = []
    try:
        for ev in stream:
            head.append(ev.to_dict())
            if len(head) >= 6 and head[-1]["type"] == "response.output_text.delta":
                break
    finally:
        stream.close()
    rid = head[0]["response"]["id"]
    assert head[0]["response"]["background"] is True
    last_seq = head[-1]["sequence_number"]
    # A client leaving a background stream does not stop the run: it is still going.
    mid = client.responses.retrieve(rid)
    assert mid.status in ("queued", "in_progress"), f"the run is {mid.status} right after the client left"
    tail = retrieved_events(client, rid, starting_after=last_seq)
    joined = head + tail
    assert [e["sequence_number"] for e in joined] == list(range(len(joined))), "gap or duplicate at the seam"
    final = check_stream(joined)
    assert final["status"] == "completed"
    assert joined == retrieved_events(client, rid), "head + resumed tail != the stored log"
    texts = [e["delta"] for e in joined if e["type"] == "response.output_text.delta"]
    assert len(texts) == 60
    assert client.responses.retrieve(rid).output_text == "".join(texts)


def test_sdk_two_readers_of_a_live_background_run(client):
    created = client.responses.create(
        model=f"{MODEL}?deltas=30&delay_ms=10", input="two readers", background=True
    )
    assert created.status == "queued" and created.background is True
    a = retrieved_events(client, created.id)
    b = retrieved_events(client, created.id, starting_after=2)
    check_stream(a)
    assert b == a[3:]


# ---------------------------------------------------------------------------------------------
# background: cancel, polling


def test_sdk_background_cancel_stalled_run(client):
    created = client.responses.create(model=f"{MODEL}?fault=stall", input="cancel me", background=True)
    assert created.status == "queued"
    assert created.output == [] and created.usage is None and created.completed_at is None
    wait_status(client, created.id, ("in_progress",))
    cancelled = client.responses.cancel(created.id)
    assert cancelled.id == created.id and cancelled.status == "cancelled"
    again = client.responses.cancel(created.id)
    assert again.to_dict() == cancelled.to_dict(), "a second cancel must return the same cancelled response"
    assert client.responses.retrieve(created.id).to_dict() == cancelled.to_dict()
    events = retrieved_events(client, created.id)
    # The log ends with response.failed carrying status "cancelled" (README: OpenAI has no
    # response.cancelled event); the checker's rule "response.failed => status failed" is the one
    # exception, so the events before it go through the checker and the last one is checked here.
    checker = StreamChecker(schema=False)
    for ev in events[:-1]:
        checker.feed(ev)
    assert checker.terminal is None
    last = events[-1]
    assert last["type"] == "response.failed" and last["sequence_number"] == len(events) - 1
    assert last["response"]["status"] == "cancelled"
    assert last["response"] == cancelled.to_dict()


def test_sdk_cancel_unknown_is_404(client):
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_doesnotexist")


def test_sdk_background_poll_to_completed(client):
    created = client.responses.create(model=f"{MODEL}?deltas=20&delay_ms=10", input="poll me", background=True)
    assert created.status == "queued" and created.background is True
    seen = {created.status}
    deadline = time.time() + 20
    resp = created
    while resp.status in ("queued", "in_progress"):
        assert time.time() < deadline, f"still {resp.status}"
        time.sleep(0.02)
        resp = client.responses.retrieve(created.id)
        seen.add(resp.status)
    assert resp.status == "completed", resp.to_dict()
    assert resp.output_text == "Hello! You said: poll me"
    assert resp.usage is not None and resp.completed_at is not None
    assert seen <= {"queued", "in_progress", "completed"}
    # cancelling a finished run is refused (400) and leaves it as it was
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(created.id)
    assert client.responses.retrieve(created.id).to_dict() == resp.to_dict()


def test_sdk_cancel_synchronous_run_is_400(client):
    resp = client.responses.create(model=MODEL, input="not in the background")
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(resp.id)
    assert client.responses.retrieve(resp.id).status == "completed"


# ---------------------------------------------------------------------------------------------
# input items, delete

FIVE = [
    {"type": "message", "role": "system", "content": "one"},
    {"type": "message", "role": "user", "content": "two"},
    {"type": "message", "role": "assistant", "content": "three"},
    {"type": "message", "role": "user", "content": "four"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "five"}]},
]


def _text(item) -> str:
    # OpenAI lists a message's content as parts whatever form it was sent in (typed SDKs iterate it)
    assert isinstance(item.content, list), item.content
    return "".join(p.text for p in item.content)


def test_sdk_input_items_pagination(client):
    resp = client.responses.create(model=MODEL, input=FIVE)
    assert resp.output_text == "Hello! You said: five"
    want = ["one", "two", "three", "four", "five"]

    # the SDK's auto-paginator, two items a page, both orders (default desc)
    asc = list(client.responses.input_items.list(resp.id, limit=2, order="asc"))
    assert [_text(i) for i in asc] == want
    assert all(i.id for i in asc) and len({i.id for i in asc}) == 5
    assert [i.status for i in asc] == ["completed"] * 5
    desc = list(client.responses.input_items.list(resp.id, limit=2))
    assert [i.id for i in desc] == [i.id for i in reversed(asc)]

    # pages by hand: limit, has_more, first_id/last_id, after
    page = client.responses.input_items.list(resp.id, limit=2, order="asc")
    assert [i.id for i in page.data] == [i.id for i in asc[:2]]
    assert page.has_more is True
    assert page.first_id == asc[0].id and page.last_id == asc[1].id
    nxt = page.get_next_page()
    assert [i.id for i in nxt.data] == [i.id for i in asc[2:4]]
    rest = client.responses.input_items.list(resp.id, order="asc", after=asc[3].id)
    assert [i.id for i in rest.data] == [asc[4].id] and rest.has_more is False
    everything = client.responses.input_items.list(resp.id, order="asc", limit=100)
    assert [i.id for i in everything.data] == [i.id for i in asc] and everything.has_more is False
    pages = list(client.responses.input_items.list(resp.id, limit=2, order="desc").iter_pages())
    assert [len(p.data) for p in pages] == [2, 2, 1]


def test_sdk_delete_then_not_found(client):
    resp = client.responses.create(model=MODEL, input="delete me")
    assert client.responses.retrieve(resp.id).id == resp.id
    assert client.responses.delete(resp.id) is None
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.retrieve(resp.id)
    assert e.value.status_code == 404
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id, stream=True)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(resp.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(resp.id)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="continue", previous_response_id=resp.id)
    assert e.value.param == "previous_response_id"
