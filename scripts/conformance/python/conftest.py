"""Fixtures: one relay per upstream kind (`chat`, `responses`), each in front of the fake upstream.

The runner (scripts/conformance/run.sh) starts the processes and passes their base URLs as
RELAY_URL_CHAT and RELAY_URL_RESPONSES. Without them, this file starts its own from
RELAY_BIN_DIR (default: target/debug under the cargo target dir), so a developer can run
`.venv/bin/pytest scripts/conformance/python -k refusal` after `cargo build --bins`.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import tempfile
import time

import openai
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
KINDS = ("chat", "responses")
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
                        "memory",
                        "--upstream-idle-timeout",
                        "3",
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


@pytest.fixture(params=KINDS)
def relay(request, relays) -> Relay:
    return relays[request.param]


@pytest.fixture
def client(relay) -> openai.OpenAI:
    c = openai.OpenAI(base_url=relay.v1, api_key="test-key", max_retries=0, timeout=60)
    yield c
    c.close()
