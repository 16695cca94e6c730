#!/usr/bin/env bash
# Retakes the README's screenshot of the run viewer (docs/run-page.png): builds the binaries and
# runs the browser suite's run-page test with RELAY_SCREENSHOT_DIR=docs, in headless chromium,
# inside a loopback-only network namespace when the machine allows one.
#
#   bash scripts/screenshot.sh
#
# Needs what scripts/test.sh installs (chromium, the .venv).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --bins
mkdir -p docs
run() {
  (cd scripts/conformance/browser && RELAY_SCREENSHOT_DIR="$ROOT/docs" "$ROOT/.venv/bin/python" -m pytest -q \
    -k test_the_run_page_shows_mcp_calls_one_failed_usage_and_folded_raw_events)
}
if [ -z "${RELAY_SCREENSHOT_NETNS:-}" ] && command -v unshare >/dev/null 2>&1 && unshare -n true 2>/dev/null; then
  exec unshare -n env RELAY_SCREENSHOT_NETNS=1 bash "$0"
fi
[ -z "${RELAY_SCREENSHOT_NETNS:-}" ] || ip link set lo up
run
echo "wrote docs/run-page.png"
