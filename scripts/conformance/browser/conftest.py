"""Fixtures of the browser suite: the run viewer and playground in Debian's headless chromium.

Every process is started here from RELAY_BIN_DIR (default target/debug; scripts/conformance/run.sh
passes it), on 127.0.0.1 with port 0: the fake upstream (scripted model), the rmcp MCP test server,
a relay with it registered as `tools` (and loopback allowed, for servers added by URL), a relay
with two relay keys (tenants `team-a`, `team-b`), a relay with `[[keys]]` of tenants `team-a`,
`team-b` and an operator's key (tenant `ops`), and chromium itself (cdp.py). Logs go to
CONFORMANCE_LOG_DIR (default a temp dir). RELAY_SCREENSHOT_DIR, when set, receives the README's
screenshot of the run page (scripts/screenshot.sh sets it to docs/).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from cdp import Browser  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]
KEY_A, KEY_B, KEY_OP = "browser-key-a", "browser-key-b", "browser-key-operator"


def bin_dir() -> pathlib.Path:
    if os.environ.get("RELAY_BIN_DIR"):
        return pathlib.Path(os.environ["RELAY_BIN_DIR"])
    return pathlib.Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target") / "debug"


LOGS = pathlib.Path(os.environ.get("CONFORMANCE_LOG_DIR") or tempfile.mkdtemp(prefix="relay-browser-")) / "browser"
LOGS.mkdir(parents=True, exist_ok=True)


class Proc:
    """A process that printed `listening on http://ADDR` (and the lines after it, kept)."""

    def __init__(self, name: str, cmd: list[str], until: str = r"listening on (http://\S+)") -> None:
        self.out_path = LOGS / f"{name}.out"
        self.proc = subprocess.Popen(cmd, stdout=open(self.out_path, "w"), stderr=open(LOGS / f"{name}.err", "w"),
                                     stdin=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline:
            m = re.search(until, self.out_path.read_text())
            if m:
                self.match = m
                self.base = m.group(1)
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {(LOGS / f'{name}.err').read_text()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"{name} printed no address")

    def output(self) -> str:
        return self.out_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def call(method: str, url: str, body: dict | None = None, key: str | None = None) -> tuple[int, object]:
    """An HTTP request on loopback: status and the JSON answer (or the text)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=60) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


@pytest.fixture(scope="session")
def servers():
    b = bin_dir()
    upstream = Proc("fake-upstream", [str(b / "fake-upstream"), "--listen", "127.0.0.1:0"])
    mcp = Proc("mcp-test-server", [str(b / "mcp-test-server"), "--listen", "127.0.0.1:0"])
    mcp.base = mcp.base.rstrip("/")
    yield {"upstream": upstream.base + "/v1", "mcp": mcp.base}
    mcp.stop()
    upstream.stop()


def start_relay(name: str, servers: dict, *extra: str, toml_extra: str = "") -> Proc:
    toml = LOGS / f"{name}.toml"
    toml.write_text(f'[mcp_servers.tools]\nurl = "{servers["mcp"]}"\ndescription = "The rmcp test server"\n'
                    'require_approval = "never"\n' + toml_extra)
    return Proc(name, [str(bin_dir() / "responses-relay"), "serve", "--listen", "127.0.0.1:0",
                       "--upstream-url", servers["upstream"], "--store", "memory", "--config", str(toml),
                       "--mcp-allow-private-networks", *extra])


@pytest.fixture(scope="session")
def relay(servers):
    p = start_relay("relay", servers)
    yield p
    p.stop()


@pytest.fixture(scope="session")
def keyed_relay(servers):
    p = start_relay("relay-keyed", servers, "--api-key", KEY_A, "--api-key", KEY_B)
    yield p
    p.stop()


@pytest.fixture(scope="session")
def operator_relay(servers):
    keys = "".join(f'\n[[keys]]\nkey = "{key}"\ntenant = "{tenant}"\n' + ("operator = true\n" if tenant == "ops" else "")
                   for key, tenant in ((KEY_A, "team-a"), (KEY_B, "team-b"), (KEY_OP, "ops")))
    p = start_relay("relay-operator", servers, toml_extra=keys)
    yield p
    p.stop()


@pytest.fixture(scope="session")
def browser():
    b = Browser()
    yield b
    b.close()


@pytest.fixture
def page(browser):
    p = browser.page()
    yield p
    p.close()


@pytest.fixture(scope="session")
def screenshot_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("RELAY_SCREENSHOT_DIR") or LOGS)
