"""Codex CLI (the pinned `@openai/codex` 0.169.0 native binary) through the relay, unchanged.

`codex exec` runs against each relay (chat and responses upstream kinds) as a custom provider
(`[model_providers.relay]`, `wire_api = "responses"`) and as the built-in provider
(`openai_base_url`), with the fake upstream's scripted model deciding what the "model" does: a
prompt line `CALL <tool> <json>` makes it call that tool (see fixtures/README.md), so each case
drives Codex through one real path: a text answer; its `exec_command` shell tool, run in Codex's
own sandbox; an MCP server configured in Codex (a `namespace` tool, called with `namespace` and
the tool's own name); its `apply_patch` custom tool (model `gpt-5.5`, whose metadata makes Codex
send it); its hosted `web_search`, which the suite's relays run through an MCP server registered on
the relay (`[hosted_tools] web_search`, see run.sh).

The runner (scripts/conformance/run.sh) starts everything inside a network namespace of its own
(`unshare -n`: loopback only), so neither Codex nor anything else here can reach another address;
Codex's config also turns off what would try (analytics, plugins). Each case has its own
CODEX_HOME and HOME and a scratch work directory under the log dir, never the checkout.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

KINDS = ("chat", "responses")
CODEX = os.environ.get("RELAY_CODEX_BIN", "")
LOGS = pathlib.Path(os.environ.get("CONFORMANCE_LOG_DIR", "/tmp")) / "codex"


def relay_url(kind: str) -> str:
    url = os.environ.get(f"RELAY_URL_{kind.upper()}")
    assert url, f"RELAY_URL_{kind.upper()} is not set: run this suite through scripts/conformance/run.sh"
    return url.rstrip("/") + "/v1"


def toml_str(s: str) -> str:
    return json.dumps(s)


class Run:
    def __init__(self, rc: int, last: str, events: list[dict], stderr: str, work: pathlib.Path):
        self.rc, self.last, self.events, self.stderr, self.work = rc, last, events, stderr, work

    def items(self, kind: str) -> list[dict]:
        return [
            e["item"]
            for e in self.events
            if e.get("type") == "item.completed" and e.get("item", {}).get("type") == kind
        ]

    def __repr__(self) -> str:
        return f"rc={self.rc} last={self.last!r}\nevents={json.dumps(self.events)[:3000]}\nstderr={self.stderr[-3000:]}"


def codex(
    name: str,
    kind: str,
    prompt: str,
    *,
    model: str = "fake-model",
    builtin_provider: bool = False,
    mcp_url: str | None = None,
    websockets: bool = False,
) -> Run:
    assert CODEX and os.access(CODEX, os.X_OK), f"the Codex binary is missing: RELAY_CODEX_BIN={CODEX!r}"
    case = LOGS / f"{name}-{kind}"
    home, work = case / "home", case / "work"
    for d in (home, work):
        d.mkdir(parents=True, exist_ok=True)
    lines = [
        f"model = {toml_str(model)}",
        'approval_policy = "never"',
        'sandbox_mode = "workspace-write"',
    ]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(home),
        "LANG": "C.UTF-8",
    }
    if builtin_provider:
        lines.append(f"openai_base_url = {toml_str(relay_url(kind))}")
        env["CODEX_API_KEY"] = "sk-relay-test"
    else:
        lines.append('model_provider = "relay"')
        env["RELAY_API_KEY"] = "relay-test-key"
    lines += [
        "[analytics]",
        "enabled = false",
        "[features]",
        "plugins = false",
        "unbounded_connection_retries = false",
        "[sandbox_workspace_write]",
        "exclude_slash_tmp = true",
        "exclude_tmpdir_env_var = true",
    ]
    if not builtin_provider:
        lines += [
            "[model_providers.relay]",
            'name = "responses-relay"',
            f"base_url = {toml_str(relay_url(kind))}",
            'wire_api = "responses"',
            'env_key = "RELAY_API_KEY"',
            "request_max_retries = 0",
            "stream_max_retries = 0",
        ]
        if websockets:
            lines.append("supports_websockets = true")
    if mcp_url:
        lines += ["[mcp_servers.pytest]", f"url = {toml_str(mcp_url)}", 'default_tools_approval_mode = "approve"']
    (home / "config.toml").write_text("\n".join(lines) + "\n")
    last = case / "last.txt"
    cmd = [
        CODEX, "exec", "--json", "--skip-git-repo-check", "--ephemeral",
        "--sandbox", "workspace-write", "-c", "approval_policy=never",
        "-C", str(work), "-o", str(last), prompt,
    ]
    p = subprocess.run(cmd, env=env, cwd=work, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
    (case / "stdout.jsonl").write_text(p.stdout)
    (case / "stderr.txt").write_text(p.stderr)
    events = []
    for line in p.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    return Run(p.returncode, last.read_text() if last.exists() else "", events, p.stderr, work)


@pytest.mark.parametrize("kind", KINDS)
def test_codex_answers_as_a_custom_provider(kind):
    r = codex("text", kind, "Say hello to the relay")
    assert r.rc == 0, r
    assert r.last.strip().startswith("Hello! You said: Say hello to the relay"), r
    assert any(e.get("type") == "turn.completed" for e in r.events), r


def relay_log(kind: str) -> str:
    return (LOGS.parent / f"relay-{kind}.err").read_text()


def socket_lines(kind: str) -> list[str]:
    """The relay's log lines of WebSocket connections that ended, with their response counts."""
    return [line for line in relay_log(kind).splitlines() if "websocket connection closed" in line]


@pytest.mark.parametrize("kind", KINDS)
def test_codex_with_supports_websockets_uses_the_socket_and_never_falls_back(kind):
    # Codex warms up (`generate: false`, `store: false`), then sends its turn chained to the
    # warm-up, then the tool's output chained to that turn: all on one socket, no HTTP fallback.
    before = len(socket_lines(kind))
    call = json.dumps({"cmd": "echo over-the-socket > ws.txt && cat ws.txt", "login": False})
    r = codex("websocket", kind, f"CALL exec_command {call}", websockets=True)
    assert r.rc == 0, r
    assert "Falling back" not in r.stderr, r
    assert (r.work / "ws.txt").read_text() == "over-the-socket\n", r
    assert "Tool results:" in r.last and "over-the-socket" in r.last, r
    ended = socket_lines(kind)[before:]
    assert ended, f"no WebSocket connection reached the relay: {r}"
    assert sum(int(line.split("responses=")[1].split()[0]) for line in ended) >= 3, ended


@pytest.mark.parametrize("kind", KINDS)
def test_codex_answers_as_the_built_in_provider(kind):
    # The built-in provider also tags every input message with
    # `internal_chat_message_metadata_passthrough` (a 400 before the relay tolerated it).
    r = codex("builtin", kind, "Say hello, built-in provider", builtin_provider=True)
    assert r.rc == 0, r
    assert r.last.strip().startswith("Hello! You said: Say hello, built-in provider"), r


@pytest.mark.parametrize("kind", KINDS)
def test_codex_runs_its_shell_tool_and_answers_with_the_result(kind):
    call = json.dumps({"cmd": "echo relay-ran-this > out.txt && cat out.txt", "login": False})
    r = codex("shell", kind, f"CALL exec_command {call}")
    assert r.rc == 0, r
    assert (r.work / "out.txt").read_text() == "relay-ran-this\n", r
    commands = r.items("command_execution")
    assert commands and commands[0]["exit_code"] == 0, r
    assert "Tool results:" in r.last and "relay-ran-this" in r.last, r


@pytest.mark.parametrize("kind", KINDS)
def test_codex_calls_an_mcp_server_configured_in_codex_as_a_namespace_tool(kind):
    mcp = os.environ.get("RELAY_MCP_PY_URL")
    assert mcp, "RELAY_MCP_PY_URL is not set"
    # A first round with the shell gives Codex's MCP client time to list the server (Codex does
    # not wait for it before its first request); then the model calls `mcp__pytest__shout`,
    # which the relay hands back as `shout` in namespace `mcp__pytest`.
    warm = json.dumps({"cmd": "true", "login": False})
    shout = json.dumps({"text": "hello mcp"})
    r = codex("mcp", kind, f"CALL exec_command {warm}\nTHEN\nCALL mcp__pytest__shout {shout}", mcp_url=mcp)
    assert r.rc == 0, r
    calls = r.items("mcp_tool_call")
    assert calls, r
    assert calls[0]["server"] == "pytest" and calls[0]["tool"] == "shout", r
    assert calls[0].get("status") == "completed", r
    assert "HELLO MCP" in r.last, r


@pytest.mark.parametrize("kind", KINDS)
def test_codex_applies_a_patch_through_its_apply_patch_custom_tool(kind):
    patch = "*** Begin Patch\n*** Add File: hello.txt\n+hello from the relay\n*** End Patch\n"
    r = codex("patch", kind, f"CALL apply_patch {json.dumps({'input': patch})}", model="gpt-5.5")
    assert r.rc == 0, r
    assert (r.work / "hello.txt").read_text() == "hello from the relay\n", r
    assert r.items("file_change"), r
    assert "Tool results:" in r.last and "hello.txt" in r.last, r


@pytest.mark.parametrize("kind", KINDS)
def test_codex_searches_the_web_through_an_mcp_server_registered_on_the_relay(kind):
    # Codex always sends OpenAI's hosted `web_search`; the relays of this suite run it through the
    # `shout` tool of the MCP server registered as `search` (scripts/conformance/run.sh).
    call = json.dumps({"query": "hello from codex"})
    r = codex("websearch", kind, f"CALL web_search {call}")
    assert r.rc == 0, r
    searches = r.items("web_search")
    assert searches and searches[0]["action"] == {"type": "search", "query": "hello from codex"}, r
    assert "Tool results:" in r.last and "HELLO FROM CODEX" in r.last, r
