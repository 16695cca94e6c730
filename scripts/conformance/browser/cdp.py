"""A small Chrome DevTools Protocol client: Debian's headless `chromium` driven over its
DevTools WebSocket (the `websockets` package the venv already has), enough for the viewer's tests.

`Browser()` starts chromium with a fresh profile and the flags that keep it off the network
(no sync, no component updates, no background networking, no QUIC); `browser.page()` opens a tab.
A `Page` navigates, evaluates JavaScript (awaiting promises), waits for a condition, takes
screenshots, and records every request URL, console error and uncaught exception it sees, so a
test can assert the page talked to the relay alone and ran without errors.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from websockets.sync.client import connect

CHROMIUM = os.environ.get("RELAY_CHROMIUM", "/usr/bin/chromium")

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider",
    "--metrics-recording-only",
    "--password-store=basic",
    "--use-mock-keychain",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
    "--window-size=1280,900",
]


class CdpError(Exception):
    pass


class Browser:
    def __init__(self) -> None:
        if not shutil.which(CHROMIUM):
            raise CdpError(f"{CHROMIUM} is missing: bash scripts/test.sh --install-only installs Debian's chromium")
        self.profile = tempfile.mkdtemp(prefix="relay-chromium-")
        self.stderr = open(os.path.join(self.profile, "stderr.log"), "w+")
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            stdin=subprocess.DEVNULL,
        )
        url = None
        deadline = time.time() + 60
        while time.time() < deadline and url is None:
            self.stderr.seek(0)
            m = re.search(r"DevTools listening on (ws://\S+)", self.stderr.read())
            if m:
                url = m.group(1)
            elif self.proc.poll() is not None:
                break
            else:
                time.sleep(0.1)
        if url is None:
            self.stderr.seek(0)
            log = self.stderr.read()[-3000:]
            self.close()
            raise CdpError(f"chromium did not start:\n{log}")
        self.ws = connect(url, max_size=None, open_timeout=30)
        self.ids = itertools.count(1)
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30) -> dict:
        n = next(self.ids)
        msg = {"id": n, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise CdpError(f"{method}: no answer within {timeout} s")
            reply = json.loads(self.ws.recv(timeout=left))
            if reply.get("id") == n:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def pump(self, seconds: float) -> None:
        """Reads events for up to `seconds` (they are kept for the pages to look at)."""
        deadline = time.time() + seconds
        while (left := deadline - time.time()) > 0:
            try:
                reply = json.loads(self.ws.recv(timeout=left))
            except TimeoutError:
                return
            if "method" in reply:
                self.events.append(reply)

    def page(self, width: int = 1280, height: int = 900) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Network", "Log"):
            page.send(f"{domain}.enable")
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        return page

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:
            pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def send(self, method: str, params: dict | None = None, timeout: float = 30) -> dict:
        return self.browser.send(method, params, session=self.session, timeout=timeout)

    def _events(self, method: str) -> list[dict]:
        return [e["params"] for e in self.browser.events
                if e.get("sessionId") == self.session and e.get("method") == method]

    def requests(self) -> list[str]:
        """Every URL this page requested so far."""
        return [e["request"]["url"] for e in self._events("Network.requestWillBeSent")]

    def errors(self) -> list[str]:
        """Uncaught exceptions, console errors and CSP reports seen so far."""
        out = [e["exceptionDetails"].get("exception", {}).get("description") or e["exceptionDetails"]["text"]
               for e in self._events("Runtime.exceptionThrown")]
        out += [e["entry"]["text"] for e in self._events("Log.entryAdded") if e["entry"]["level"] == "error"]
        out += [" ".join(str(a.get("value", a.get("description", ""))) for a in e["args"])
                for e in self._events("Runtime.consoleAPICalled") if e["type"] == "error"]
        return out

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.wait("document.readyState === 'complete' && location.href === " + json.dumps(url), what=f"{url} loads")

    def eval(self, expression: str):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise CdpError(f"{expression}: {r['exceptionDetails'].get('exception', {}).get('description') or r['exceptionDetails']['text']}")
        return r["result"].get("value")

    def wait(self, expression: str, timeout: float = 20, what: str | None = None):
        """Evaluates `expression` until it is truthy; returns its value."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                last = self.eval(expression)
            except CdpError as e:
                last = e
            if last and not isinstance(last, CdpError):
                return last
            self.browser.pump(0.05)
        raise CdpError(f"timed out waiting for {what or expression} (last: {last!r})")

    def reload(self) -> None:
        self.send("Page.reload")
        self.browser.pump(0.2)
        self.wait("document.readyState === 'complete'", what="reload")

    def screenshot(self, path: str) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.browser.send("Target.closeTarget", {"targetId": self.send("Target.getTargetInfo")["targetInfo"]["targetId"]})
        except CdpError:
            pass
