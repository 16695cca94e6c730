#!/usr/bin/env bash
# The relay's benchmark in one command: builds every binary in release mode, raises the
# open-file limit (the idle scenario holds thousands of streams), then runs `bench` with the
# arguments given, e.g.
#   bash scripts/bench.sh                      # every scenario, full size
#   bash scripts/bench.sh --smoke              # a few seconds per scenario (CI)
#   bash scripts/bench.sh --scenario stream --clients 64
#   bash scripts/bench.sh --store sqlite:/tmp/bench.db
#   bash scripts/bench.sh --compare REV        # this checkout's relay beside revision REV's
# `--compare REV` builds REV's relay (release, from `git archive` into a temporary directory, its
# build kept in target/compare/) and runs the `compare` scenario: both relays in the same
# windows, half the clients each, the ratios printed per workload. Other arguments go on to
# `bench` (`--reps`, `--clients`, `--seconds`).
# Exit status: 0 all targets met (smoke: no errors), 1 a target missed, 2 something errored.
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
target="${CARGO_TARGET_DIR:-target}"

args=()
while (($#)); do
  if [[ "$1" == "--compare" ]]; then
    [[ $# -ge 2 ]] || { echo "bench.sh: --compare needs a revision" >&2; exit 2; }
    rev="$2"
    shift 2
    commit="$(git rev-parse --verify --quiet "$rev^{commit}")" \
      || { echo "bench.sh: --compare $rev: not a revision of this repository" >&2; exit 2; }
    compare="$(realpath -m "$target")/compare"
    other="$compare/bin/responses-relay-${commit:0:12}"
    if [[ ! -x "$other" ]]; then
      # Outside this checkout, so that its Cargo.toml is not taken for a member of this workspace.
      src="$(mktemp -d)"
      git archive "$commit" | tar -x -C "$src"
      echo "bench.sh: building $rev (${commit:0:12}) in $src" >&2
      CARGO_TARGET_DIR="$compare/build" \
        cargo build --release --quiet --manifest-path "$src/Cargo.toml" --bin responses-relay
      mkdir -p "$compare/bin"
      cp "$compare/build/release/responses-relay" "$other"
      rm -rf "$src"
    fi
    args+=(--scenario compare --compare-relay "$other" --compare-label "$rev")
  else
    args+=("$1")
    shift
  fi
done

cargo build --release --bins --quiet
exec "$target/release/bench" --no-build "${args[@]}"
