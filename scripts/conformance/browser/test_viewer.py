"""The run viewer (a steered run's chain among its pages), the playground, `replay FILE`'s viewer
and `demo`, in headless chromium.

Each test drives real pages served by a real relay process on loopback, and ends by checking the
page raised no error (exceptions, console errors, CSP violations) and requested nothing from any
other origin than the relay's.
"""

from __future__ import annotations

import json
import pathlib
import time

from conftest import KEY_A, KEY_B, KEY_OP, LOGS, Proc, bin_dir, call

CARDS = "[...document.querySelectorAll('#timeline > li')]"


def clean(page, base: str) -> None:
    """No page error, every request went to the relay at `base` (or was page-local), and every
    form control on the page has a label and every button a name."""
    errors = page.errors()
    assert not errors, errors
    foreign = [u for u in page.requests() if not (u.startswith(base + "/") or u.startswith(("data:", "blob:", "about:")))]
    assert not foreign, foreign
    unlabelled = page.eval("[...document.querySelectorAll('input, select, textarea')]"
                           ".filter(e => e.labels.length === 0 && !e.getAttribute('aria-label')).map(e => e.outerHTML)")
    assert not unlabelled, unlabelled
    nameless = page.eval("[...document.querySelectorAll('button')].filter(b => !b.innerText.trim()).map(b => b.outerHTML)")
    assert not nameless, nameless
    assert page.eval("document.compatMode") == "CSS1Compat", "the page renders in standards mode"


def create(relay_base: str, body: dict, key: str | None = None) -> dict:
    status, r = call("POST", relay_base + "/v1/responses", body, key)
    assert status == 200, r
    return r


def wait_done(relay_base: str, rid: str, key: str | None = None) -> dict:
    for _ in range(600):
        _, r = call("GET", f"{relay_base}/v1/responses/{rid}", key=key)
        if r["status"] not in ("queued", "in_progress"):
            return r
        time.sleep(0.05)
    raise AssertionError(f"{rid} never finished")


def mcp_run(relay_base: str) -> dict:
    return create(relay_base, {"model": "fake-model?delay_ms=25", "input": 'CALL add {"a": 2, "b": 3}\nCALL fail {}',
                               "tools": [{"type": "mcp", "server_label": "tools"}]})


def test_the_list_shows_runs_newest_first_and_filters_by_status(relay, page):
    ok = create(relay.base, {"model": "fake-model", "input": "first"})
    bad = create(relay.base, {"model": "fake-model?fault=cut", "input": "second", "background": True})
    assert wait_done(relay.base, bad["id"])["status"] == "failed"
    page.goto(relay.base + "/ui/")
    rows = page.wait("document.querySelectorAll('#runs tr').length >= 2 && "
                     "[...document.querySelectorAll('#runs tr')].map(r => [r.dataset.run, r.cells[1].innerText, r.cells[8].innerText])")
    order = [r[0] for r in rows]
    assert order.index(bad["id"]) < order.index(ok["id"]), "newest first"
    failed_row = next(r for r in rows if r[0] == bad["id"])
    assert failed_row[1] == "failed" and failed_row[2], failed_row
    page.eval("document.getElementById('f-status').value = 'failed'; document.getElementById('filters').requestSubmit()")
    shown = page.wait("[...document.querySelectorAll('#runs tr')].every(r => r.cells[1].innerText === 'failed') && "
                      "[...document.querySelectorAll('#runs tr')].map(r => r.dataset.run)")
    assert bad["id"] in shown and ok["id"] not in shown
    # A run's id links to its page.
    page.eval(f"document.querySelector('#runs tr[data-run=\"{bad['id']}\"] a').click()")
    page.wait(f"location.pathname === '/ui/runs/{bad['id']}' && !!document.querySelector('#summary .status')")
    clean(page, relay.base)


def test_the_run_page_shows_mcp_calls_one_failed_usage_and_folded_raw_events(relay, page, screenshot_dir):
    run = mcp_run(relay.base)
    page.goto(f"{relay.base}/ui/runs/{run['id']}")
    cards = page.wait(f"{CARDS}.length === 4 && {CARDS}.map(c => [c.className, c.innerText])")
    kinds = [c[0].split()[1] for c in cards]
    assert kinds == ["mcp_list_tools", "mcp_call", "mcp_call", "message"], kinds
    listed, add, fail, answer = (c[1] for c in cards)
    assert "tools" in listed and "add" in listed and "fail" in listed
    assert "tools · add" in add and "completed" in add and '"sum"' in add and "took" in add
    assert "failed" in cards[2][0], "the failed call's card is marked failed"
    assert "tools · fail" in fail and "error:" in fail
    assert answer.startswith("message") and "Tool results" in answer
    summary = page.eval("document.getElementById('summary').innerText")
    assert "completed" in summary and "Tool calls\n2" in summary, summary
    usage = page.eval("[...document.querySelectorAll('#usage tr.total td')].map(td => td.innerText)")
    assert usage[0] == str(run["usage"]["input_tokens"]) and usage[-1] == str(run["usage"]["total_tokens"]), usage
    # One row per model turn (the calls' turn, then the answer's), kept by the store at the end.
    turns = page.wait("document.querySelectorAll('#usage tr[data-turn]').length === 2 && "
                      "[...document.querySelectorAll('#usage tr[data-turn]')].map(r => Number(r.cells[5].innerText))",
                      what="the usage of each model turn")
    assert sum(turns) == run["usage"]["total_tokens"], turns
    folded = page.eval("[...document.querySelectorAll('#events [data-count]')].map(s => s.dataset.count)")
    assert folded and all(int(n) > 1 for n in folded), folded
    rows = page.eval("document.querySelectorAll('#events tr').length")
    _, log = call("GET", f"{relay.base}/ui/api/runs/{run['id']}/log")
    assert rows < len(log.splitlines()), "runs of deltas are folded into one row each"
    # The payload is shown on demand.
    page.eval("document.querySelector('#events tr details summary').click()")
    first = page.wait("document.querySelector('#events tr details pre')?.innerText")
    assert json.loads(first)["type"] == "response.created"
    # The run's input, from the public input_items list.
    given = page.wait("document.querySelector('#input .card.message')?.innerText")
    assert "CALL add" in given and not page.eval("document.getElementById('input-section').hidden")
    page.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 1180, "deviceScaleFactor": 1, "mobile": False})
    page.screenshot(str(screenshot_dir / "run-page.png"))
    clean(page, relay.base)


def test_a_live_run_updates_the_page_until_it_ends(relay, page):
    run = create(relay.base, {"model": "fake-model?delay_ms=120&deltas=25", "input": "watch me", "background": True})
    page.goto(f"{relay.base}/ui/runs/{run['id']}")
    page.wait("!document.getElementById('live').hidden", what="the live marker")
    first = page.wait(f"{CARDS}.find(c => c.classList.contains('message'))?.querySelector('.text')?.innerText.length",
                      what="a message with text")
    later = page.wait(f"(n => n > {first} && n)({CARDS}.find(c => c.classList.contains('message')).querySelector('.text').innerText.length)",
                      what="the message to grow")
    assert later > first
    page.wait("document.getElementById('live').hidden && "
              "document.querySelector('#summary .status')?.innerText === 'completed'", timeout=30, what="the end")
    final = wait_done(relay.base, run["id"])
    shown = page.eval(f"{CARDS}.find(c => c.classList.contains('message')).querySelector('.text').innerText")
    assert shown == final["output"][0]["content"][0]["text"]
    # Its one model turn's usage appears once the store kept it.
    page.wait("document.querySelectorAll('#usage tr[data-turn]').length === 1", what="the turn's usage")
    clean(page, relay.base)


def test_replay_plays_the_log_again_at_the_chosen_speed_and_download_is_the_export(relay, page, browser, tmp_path):
    run = create(relay.base, {"model": "fake-model?delay_ms=60&deltas=20", "input": "again"})
    page.goto(f"{relay.base}/ui/runs/{run['id']}")
    full = page.wait(f"{CARDS}.length === 1 && {CARDS}[0].querySelector('.text').innerText")
    page.eval("document.getElementById('speed').value = '0.5'; document.getElementById('replay').requestSubmit()")
    partial = page.wait(f"!document.getElementById('replay-stop').disabled && ({CARDS}[0]?.querySelector('.text')?.innerText ?? '').length > 0 "
                        f"&& {CARDS}[0].querySelector('.text').innerText")
    assert len(partial) < len(full), "the replay starts from the beginning"
    page.wait("document.getElementById('replay-stop').disabled", timeout=30, what="the replay's end")
    assert page.eval(f"{CARDS}[0].querySelector('.text').innerText") == full

    browser.send("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    page.eval("document.getElementById('download').click()")
    target = tmp_path / f"{run['id']}.jsonl"
    for _ in range(200):
        if target.exists() and target.stat().st_size > 0:
            break
        time.sleep(0.05)
    _, exported = call("GET", f"{relay.base}/ui/api/runs/{run['id']}/log")
    assert target.read_text() == exported
    clean(page, relay.base)


def test_with_relay_keys_the_page_asks_for_one_and_shows_only_its_tenants_runs(keyed_relay, page):
    mine = create(keyed_relay.base, {"model": "fake-model", "input": "team a"}, key=KEY_A)
    theirs = create(keyed_relay.base, {"model": "fake-model", "input": "team b"}, key=KEY_B)
    page.goto(keyed_relay.base + "/ui/")
    page.wait("!document.getElementById('key-form').hidden", what="the key form")
    assert page.eval("document.querySelectorAll('#runs tr').length") == 0
    assert "without a key" in page.eval("document.getElementById('list-message').innerText")
    page.eval(f"document.getElementById('key-input').value = {json.dumps(KEY_A)}; document.getElementById('key-form').requestSubmit()")
    shown = page.wait("document.readyState === 'complete' && document.querySelectorAll('#runs tr').length > 0 && "
                      "[...document.querySelectorAll('#runs tr')].map(r => r.dataset.run)")
    assert mine["id"] in shown and theirs["id"] not in shown
    assert page.eval("sessionStorage.length") == 1, "the key is kept in the tab's session storage"
    # Another tenant's run is, to this key, an unknown one.
    page.goto(f"{keyed_relay.base}/ui/runs/{theirs['id']}")
    message = page.wait("document.getElementById('run-message').innerText")
    assert "No response found" in message and page.eval(f"{CARDS}.length") == 0
    page.goto(f"{keyed_relay.base}/ui/runs/{mine['id']}")
    page.wait(f"{CARDS}.length === 1")
    # The browser logs the answers it was refused (401 before the key, 404 for team B's run).
    errors = [e for e in page.errors() if not ("status of 401" in e or "status of 404" in e)]
    assert not errors, errors


def test_an_operators_tenant_filter_lists_that_tenants_runs_and_its_run_pages_read_them(operator_relay, page):
    base = operator_relay.base
    theirs = create(base, {"model": "fake-model", "input": "team b asks"}, key=KEY_B)
    create(base, {"model": "fake-model", "input": "team a asks"}, key=KEY_A)
    mine = create(base, {"model": "fake-model", "input": "the operator asks"}, key=KEY_OP)
    # The operator's key, as the key form would keep it, before any page of the relay loads.
    page.send("Page.addScriptToEvaluateOnNewDocument",
              {"source": f"sessionStorage.setItem('responses-relay-key', {json.dumps(KEY_OP)})"})
    rows = "[...document.querySelectorAll('#runs tr')].map(r => r.dataset.run)"
    page.goto(base + "/ui/")
    assert page.wait(f"document.querySelectorAll('#runs tr').length > 0 && {rows}") == [mine["id"]], \
        "an empty Tenant filter: the key's own tenant's runs"
    assert page.eval("document.getElementById('f-tenant').labels[0].innerText.trim()") == "Tenant"
    page.eval("document.getElementById('f-tenant').value = 'team-b'; document.getElementById('filters').requestSubmit()")
    shown = page.wait(f"(ids => ids.length > 0 && !ids.includes({json.dumps(mine['id'])}) && ids)({rows})")
    assert shown == [theirs["id"]]
    assert page.eval("location.search") == "?tenant=team-b", "the filter is kept in the page's URL"
    # The run's link carries the tenant, and its page reads that tenant's run, input included.
    page.eval(f"document.querySelector('#runs tr[data-run=\"{theirs['id']}\"] a').click()")
    page.wait(f"location.pathname === '/ui/runs/{theirs['id']}' && location.search === '?tenant=team-b' && {CARDS}.length === 1",
              what="team B's run page")
    assert "team b asks" in page.wait("document.querySelector('#input .card.message')?.innerText")
    assert page.eval("document.querySelector('#summary .status').innerText") == "completed"
    assert page.eval("document.querySelector('nav a').getAttribute('href')") == "/ui/?tenant=team-b"
    # The list's address with the filter shows it again.
    page.goto(base + "/ui/?tenant=team-b")
    assert page.wait(f"document.getElementById('f-tenant').value === 'team-b' && document.querySelectorAll('#runs tr').length > 0 && {rows}") \
        == [theirs["id"]]
    clean(page, base)


def test_replay_file_serves_the_viewer_for_its_recording(relay, page, tmp_path):
    run = mcp_run(relay.base)
    _, log = call("GET", f"{relay.base}/ui/api/runs/{run['id']}/log")
    recording = tmp_path / "run.jsonl"
    recording.write_text(log)
    replay = Proc("replay", [str(bin_dir() / "responses-relay"), "replay", str(recording), "--listen", "127.0.0.1:0"],
                  until=r"the recorded run in the viewer: (http://\S+)")
    try:
        viewer = replay.match.group(1)
        base = viewer.split("/ui/")[0]
        page.goto(viewer)
        kinds = page.wait(f"{CARDS}.length === 4 && {CARDS}.map(c => c.className.split(' ')[1])")
        assert kinds == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
        page.goto(base + "/ui/")
        assert page.wait("[...document.querySelectorAll('#runs tr')].map(r => r.dataset.run)") == [run["id"]]
        clean(page, base)
    finally:
        replay.stop()


def test_the_demo_runs_an_agent_run_and_its_viewer_shows_it(page):
    demo = Proc("demo", [str(bin_dir() / "responses-relay"), "demo", "--listen", "127.0.0.1:0"],
                until=r"this run in the viewer: (http://\S+)")
    try:
        printed = demo.output()
        for needed in ("response.created", "mcp_list_tools demo: add", "response.mcp_call_arguments.delta",
                       "response.output_text.delta", "response.completed"):
            assert needed in printed, printed
        viewer = demo.match.group(1)
        page.goto(viewer)
        cards = page.wait(f"{CARDS}.length === 3 && {CARDS}.map(c => c.innerText)")
        assert cards[0].startswith("mcp_list_tools") and "demo" in cards[0]
        assert "demo · add" in cards[1] and '{"sum":5.0}' in cards[1]
        assert "Tool results" in cards[2]
        clean(page, viewer.split("/ui/")[0])
    finally:
        demo.stop()


def test_the_playground_chats_with_a_registered_server_and_answers_an_approval_with_a_button(relay, servers, page):
    page.goto(relay.base + "/ui/playground")
    models = page.wait("document.querySelectorAll('#models option').length > 0 && [...document.querySelectorAll('#models option')].map(o => o.value)")
    _, listed = call("GET", relay.base + "/v1/models")
    assert models == [m["id"] for m in listed["data"]]
    assert page.eval("document.getElementById('model').value") == models[0]
    page.wait("!!document.querySelector('#registered input[value=tools]')", what="the registered server")
    # A registered server, no approval: the call runs and the answer streams in.
    page.eval("document.querySelector('#registered input[value=tools]').click();"
              "document.getElementById('prompt').value = 'CALL add {\"a\": 20, \"b\": 22}';"
              "document.getElementById('ask').requestSubmit()")
    page.wait("[...document.querySelectorAll('.turn .card.message')].some(c => c.innerText.includes('42'))",
              what="the answer with the tool's result")
    assert page.eval("[...document.querySelectorAll('.turn .card.mcp_call')].map(c => c.innerText)")[0].count("tools · add") == 1
    # A server added by URL that needs approval: the run stops with a request and two buttons.
    page.eval("document.getElementById('new-chat').click();"
              "document.querySelector('#registered input[value=tools]').click();"
              "document.getElementById('srv-label').value = 'byurl';"
              f"document.getElementById('srv-url').value = {json.dumps(servers['mcp'])};"
              "document.getElementById('srv-approval').value = 'always';"
              "document.getElementById('add-server').requestSubmit()")
    page.eval("document.getElementById('prompt').value = 'CALL echo {\"text\": \"approved!\"}';"
              "document.getElementById('ask').requestSubmit()")
    page.wait("document.querySelector('.turn .card.mcp_approval_request') && "
              "[...document.querySelectorAll('.turn button')].some(b => b.innerText === 'Approve byurl · echo')",
              what="the approval buttons")
    page.eval("[...document.querySelectorAll('.turn button')].find(b => b.innerText === 'Approve byurl · echo').click()")
    call_card = page.wait("[...document.querySelectorAll('.turn .card.mcp_call')].map(c => c.innerText).find(t => t.includes('approved!') && t.includes('completed'))",
                          what="the approved call's result")
    assert "approval_request_id" in call_card
    approved_run = page.eval("[...document.querySelectorAll('.turn a')].pop().getAttribute('href')")
    # Denied: no call runs, and the next turn goes on without it.
    page.eval("document.getElementById('prompt').value = 'CALL echo {\"text\": \"never\"}';"
              "document.getElementById('ask').requestSubmit()")
    page.wait("[...document.querySelectorAll('.turn button')].filter(b => b.innerText === 'Deny' && !b.disabled).length === 1",
              what="the second approval's buttons")
    page.eval("[...document.querySelectorAll('.turn button')].find(b => b.innerText === 'Deny' && !b.disabled).click()")
    page.wait("[...document.querySelectorAll('.turn p')].some(p => p.innerText.startsWith('You: denied echo'))"
              " && !document.getElementById('send').disabled", what="the denial's turn")
    calls = page.eval("[...document.querySelectorAll('.turn .card.mcp_call')].map(c => c.innerText)")
    assert not any("never" in c for c in calls), calls
    # The approved run opens in the viewer.
    page.goto(relay.base + approved_run)
    kinds = page.wait(f"{CARDS}.length >= 2 && {CARDS}.map(c => c.className.split(' ')[1])")
    assert "mcp_call" in kinds and "message" in kinds
    answered = page.wait("document.querySelector('#input .card.mcp_approval_response')?.innerText")
    assert "approved" in answered, answered
    clean(page, relay.base)


def test_the_pages_follow_the_dark_color_scheme(relay, page):
    page.goto(relay.base + "/ui/")
    light = page.eval("getComputedStyle(document.body).backgroundColor")
    page.send("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    dark = page.wait(f"(c => c !== {json.dumps(light)} && c)(getComputedStyle(document.body).backgroundColor)")
    assert light == "rgb(255, 255, 255)" and dark == "rgb(13, 17, 23)", (light, dark)
    clean(page, relay.base)


def test_the_run_page_shows_reasoning_client_tool_calls_and_a_tool_search(relay, servers, page):
    run = create(relay.base, {
        "model": "fake-model?reasoning=2",
        "input": 'CALL tool_search {"query": "echo"}\nCALL get_weather {"city": "Paris"}\nCALL shell {"input": "ls -l"}',
        "tools": [
            {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
            {"type": "custom", "name": "shell", "description": "Runs a command"},
            {"type": "mcp", "server_label": "deferred", "server_url": servers["mcp"], "defer_loading": True, "require_approval": "never"},
        ],
    })
    kinds = [o["type"] for o in run["output"]]
    page.goto(f"{relay.base}/ui/runs/{run['id']}")
    cards = page.wait(f"{CARDS}.length === {len(kinds)} && {CARDS}.map(c => [c.className.split(' ')[1], c.innerText])")
    assert [c[0] for c in cards] == kinds
    shown = dict((k, t) for k, t in cards)
    for kind in ("reasoning", "function_call", "custom_tool_call", "tool_search_call", "tool_search_output"):
        assert kind in shown, (kind, kinds)
    assert "think" in shown["reasoning"]
    assert "get_weather" in shown["function_call"] and "Paris" in shown["function_call"]
    assert "shell" in shown["custom_tool_call"] and "ls -l" in shown["custom_tool_call"]
    assert "echo" in shown["tool_search_call"]
    assert "deferred.echo" in shown["tool_search_output"], shown["tool_search_output"]
    clean(page, relay.base)


def test_a_steered_runs_page_shows_its_steer_and_links_its_chain(relay, servers, page):
    # A run steered over WebSocket mode with the SDK's beta connection (the fake upstream holds
    # the answer until its gate opens), then its page: the steer accepted, the chain to its
    # successor, and the successor's page back to it.
    from openai import OpenAI

    client = OpenAI(base_url=relay.base + "/v1", api_key="unused", max_retries=0)
    gate = servers["upstream"].removesuffix("/v1") + "/gates/chain1"
    with client.beta.responses.connect() as conn:
        conn.response.create(model="fake-model?hold=chain1", input="write the report")
        steered = None
        for ev in conn:
            if ev.type == "response.created" and steered is None:
                steered = ev.response.id
                conn.response.steer(input="also check the tests", previous_response_id=steered)
            if ev.type == "response.steer.accepted":
                call("POST", gate)
            if ev.type == "response.completed" and ev.response.previous_response_id == steered:
                successor = ev.response.id
                break
    page.goto(f"{relay.base}/ui/runs/{steered}")
    chain = page.wait("document.querySelectorAll('#chain [data-chain]').length === 2 && "
                      "[...document.querySelectorAll('#chain [data-chain]')].map(a => a.dataset.chain)",
                      what="the chain of the steered run")
    assert chain == [steered, successor], chain
    summary = page.eval("document.getElementById('summary').innerText")
    assert "incomplete: steered" in summary and "Steered" in summary and "steer_" in summary, summary
    page.goto(f"{relay.base}/ui/runs/{successor}")
    text = page.wait("document.querySelectorAll('#chain [data-chain]').length === 2 && "
                     "document.getElementById('chain').innerText", what="the chain of the successor")
    assert text.startswith(steered + " (incomplete, steered) → " + successor), text
    clean(page, relay.base)
