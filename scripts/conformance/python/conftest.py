"""Fixtures: one relay per upstream kind (`chat`, `responses`), each in front of the fake upstream,
and (`native_relays`) one per native upstream kind (`anthropic`, `gemini`) in front of the same
kind of fake, with an upstream key.

The runner (scripts/conformance/run.sh) starts the processes and passes their base URLs as
RELAY_URL_CHAT, RELAY_URL_RESPONSES, RELAY_URL_ANTHROPIC and RELAY_URL_GEMINI, and the MCP
servers' endpoints as RELAY_MCP_RUST_URL
(the rmcp `mcp-test-server`) and RELAY_MCP_PY_URL (the official Python MCP SDK server,
scripts/mcp_python_server.py). Without them, this file starts its own from RELAY_BIN_DIR (default:
target/debug under the cargo target dir), so a developer can run
`.venv/bin/pytest scripts/conformance/python -k refusal` after `cargo build --bins`.
"""

from __future__ import annotations

import os
import pathlib
import re
import socket
import subprocess
import sys
import tempfile
import time

import openai
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
KINDS = ("chat", "responses")
NATIVE_KINDS = ("anthropic", "gemini")
# The upstream key each native relay sends (x-api-key, x-goog-api-key), and its upstream URL's
# path on the fake: Gemini's API base is /v1beta.
NATIVE_KEYS = {"anthropic": "sk-ant-conformance-key", "gemini": "AIza-conformance-key"}
NATIVE_PATHS = {"anthropic": "/v1", "gemini": "/v1beta"}
MODEL = "fake-model"


class Relay:
    def __init__(self, kind: str, base: str) -> None:
        self.kind = kind
        self.base = base.rstrip("/")

    @property
    def v1(self) -> str:
        return self.base + "/v1"

    def __repr__(self) -> str:
        return f"Relay({self.kind}, {self.base})"


def _bin_dir() -> pathlib.Path:
    if os.environ.get("RELAY_BIN_DIR"):
        return pathlib.Path(os.environ["RELAY_BIN_DIR"])
    target = os.environ.get("CARGO_TARGET_DIR") or str(ROOT / "target")
    return pathlib.Path(target) / "debug"


def _spawn(cmd: list[str], logdir: pathlib.Path, name: str) -> tuple[subprocess.Popen, str]:
    out = open(logdir / f"{name}.out", "w+")
    err = open(logdir / f"{name}.err", "w")
    p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        text = (logdir / f"{name}.out").read_text()
        m = re.search(r"listening on (http://\S+)", text)
        if m:
            return p, m.group(1)
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    raise RuntimeError(f"{name} did not print its address: {(logdir / f'{name}.err').read_text()[-2000:]}")


@pytest.fixture(scope="session")
def relays():
    urls = {k: os.environ.get(f"RELAY_URL_{k.upper()}") for k in KINDS}
    if all(urls.values()):
        yield {k: Relay(k, u) for k, u in urls.items()}
        return
    bins = _bin_dir()
    # Loopback MCP servers need this once the SSRF guard is wired into `serve` (see run.sh).
    help_text = subprocess.run([str(bins / "responses-relay"), "serve", "--help"], capture_output=True, text=True).stdout
    extra = ["--mcp-allow-private-networks"] if "--mcp-allow-private-networks" in help_text else []
    procs = []
    with tempfile.TemporaryDirectory(prefix="relay-conformance-") as d:
        logdir = pathlib.Path(d)
        try:
            p, up = _spawn([str(bins / "fake-upstream"), "--listen", "127.0.0.1:0"], logdir, "fake-upstream")
            procs.append(p)
            out = {}
            for k in KINDS:
                p, base = _spawn(
                    [
                        str(bins / "responses-relay"),
                        "serve",
                        "--listen",
                        "127.0.0.1:0",
                        "--upstream-url",
                        up + "/v1",
                        "--upstream-api",
                        k,
                        "--store",
                        f"sqlite:{logdir}/store-{k}.sqlite3",
                        "--upstream-idle-timeout",
                        "3",
                        *extra,
                    ],
                    logdir,
                    f"relay-{k}",
                )
                procs.append(p)
                out[k] = Relay(k, base)
            yield out
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()


@pytest.fixture(scope="session")
def native_relays():
    urls = {k: os.environ.get(f"RELAY_URL_{k.upper()}") for k in NATIVE_KINDS}
    if all(urls.values()):
        yield {k: Relay(k, u) for k, u in urls.items()}
        return
    bins = _bin_dir()
    procs = []
    with tempfile.TemporaryDirectory(prefix="relay-conformance-native-") as d:
        logdir = pathlib.Path(d)
        try:
            p, up = _spawn([str(bins / "fake-upstream"), "--listen", "127.0.0.1:0"], logdir, "fake-upstream")
            procs.append(p)
            out = {}
            for k in NATIVE_KINDS:
                p, base = _spawn(
                    [
                        str(bins / "responses-relay"),
                        "serve",
                        "--listen",
                        "127.0.0.1:0",
                        "--upstream-url",
                        up + NATIVE_PATHS[k],
                        "--upstream-api",
                        k,
                        "--upstream-api-key",
                        NATIVE_KEYS[k],
                        "--store",
                        f"sqlite:{logdir}/store-{k}.sqlite3",
                        "--upstream-idle-timeout",
                        "3",
                        "--mcp-allow-private-networks",
                    ],
                    logdir,
                    f"relay-{k}",
                )
                procs.append(p)
                out[k] = Relay(k, base)
            yield out
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()


class McpServers:
    def __init__(self, rust: str, py: str) -> None:
        self.rust = rust
        self.py = py

    def __repr__(self) -> str:
        return f"McpServers(rust={self.rust}, py={self.py})"


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the Python MCP server does not accept connections on port {port}")


@pytest.fixture(scope="session")
def mcp_servers():
    rust, py = os.environ.get("RELAY_MCP_RUST_URL"), os.environ.get("RELAY_MCP_PY_URL")
    if rust and py:
        yield McpServers(rust, py)
        return
    procs = []
    with tempfile.TemporaryDirectory(prefix="relay-conformance-mcp-") as d:
        logdir = pathlib.Path(d)
        try:
            p, rust = _spawn([str(_bin_dir() / "mcp-test-server"), "--listen", "127.0.0.1:0"], logdir, "mcp-rust")
            procs.append(p)
            port = free_port()
            p, py = _spawn(
                [sys.executable, str(ROOT / "scripts" / "mcp_python_server.py"), "--port", str(port)], logdir, "mcp-python"
            )
            procs.append(p)
            _wait_port(port, p)
            yield McpServers(rust, py)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()


@pytest.fixture(params=KINDS)
def relay(request, relays) -> Relay:
    return relays[request.param]


@pytest.fixture
def client(relay) -> openai.OpenAI:
    c = openai.OpenAI(base_url=relay.v1, api_key="test-key", max_retries=0, timeout=60)
    yield c
    c.close()


@pytest.fixture(params=NATIVE_KINDS)
def native_relay(request, native_relays) -> Relay:
    return native_relays[request.param]


@pytest.fixture
def native_client(native_relay) -> openai.OpenAI:
    c = openai.OpenAI(base_url=native_relay.v1, api_key="test-key", max_retries=0, timeout=60)
    yield c
    c.close()


def pytest_terminal_summary(terminalreporter):
    """Lists what the deep surface test saw refused with a reason (docs/api.md lists these)."""
    mod = sys.modules.get("test_sdk_surface_deep")
    refusals = sorted(getattr(mod, "REFUSALS", ()) or ())
    if refusals:
        terminalreporter.write_sep("-", f"refused with a reason by the relay ({len(refusals)})")
        for line in refusals:
            terminalreporter.write_line(line)
