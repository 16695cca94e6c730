#!/usr/bin/env bash
# The relay's benchmark (issue 8) in one command: builds every binary in release mode, raises the
# open-file limit (the idle scenario holds thousands of streams), then runs `bench` with the
# arguments given, e.g.
#   bash scripts/bench.sh                      # every scenario, full size
#   bash scripts/bench.sh --smoke              # a few seconds per scenario (CI)
#   bash scripts/bench.sh --scenario stream --clients 64
#   bash scripts/bench.sh --store sqlite:/tmp/bench.db
# Exit status: 0 all targets met (smoke: no errors), 1 a target missed, 2 something errored.
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
cargo build --release --bins --quiet
exec "${CARGO_TARGET_DIR:-target}/release/bench" --no-build "$@"
