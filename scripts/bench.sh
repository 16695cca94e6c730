#!/usr/bin/env bash
# The relay's benchmark in one command: builds every binary in release mode, raises the
# open-file limit (the idle scenario holds thousands of streams), then runs `bench` with the
# arguments given, e.g.
#   bash scripts/bench.sh                      # every scenario, full size
#   bash scripts/bench.sh --smoke              # a few seconds per scenario (CI)
#   bash scripts/bench.sh --scenario stream --clients 64
#   bash scripts/bench.sh --store sqlite:/tmp/bench.db
#   bash scripts/bench.sh --compare REV        # this checkout's relay beside revision REV's
#   bash scripts/bench.sh --scenario peers     # the relay beside SMG and agentic-api (issue 34)
#   bash scripts/bench.sh --compare-limits     # this build beside itself with every limit set
# `--compare REV` builds REV's relay and this checkout's the same way (release, from `git
# archive` into a temporary directory, kept in target/compare/) and runs the `compare` scenario:
# both relays in the same windows, half the clients each, the ratios printed per workload. Other arguments go on to
# `bench` (`--reps`, `--clients`, `--seconds`).
# `--scenario peers` first makes (or reuses) the benchmark's own Python venv, target/bench-venv
# (BENCH_VENV=DIR to use another), with the peers pinned from PyPI (the one thing fetched from
# outside loopback); when they cannot be installed it says so in one line and the relay and
# the floor are measured alone.
# Exit status: 0 all targets met (smoke: no errors), 1 a target missed, 2 something errored.
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
target="${CARGO_TARGET_DIR:-target}"

# The relay of commit $1, built in release mode from `git archive` at a path of the same length
# for every commit, in one target directory (target/compare/), and kept there; prints its path.
relay_of() {
  local commit="$1" compare out src
  compare="$(realpath -m "$target")/compare"
  out="$compare/bin/responses-relay-${commit:0:12}"
  if [[ ! -x "$out" ]]; then
    # Outside this checkout, so that its Cargo.toml is not taken for a member of this workspace.
    src="/tmp/relay-compare-src/${commit:0:12}"
    rm -rf "$src"
    mkdir -p "$src"
    git archive "$commit" | tar -x -C "$src"
    echo "bench.sh: building ${commit:0:12} in $src" >&2
    (cd "$src" && CARGO_TARGET_DIR="$compare/build" cargo build --release --quiet --bin responses-relay)
    mkdir -p "$compare/bin"
    cp "$compare/build/release/responses-relay" "$out"
    rm -rf "$src"
  fi
  echo "$out"
}

args=()
while (($#)); do
  if [[ "$1" == "--compare" ]]; then
    [[ $# -ge 2 ]] || { echo "bench.sh: --compare needs a revision" >&2; exit 2; }
    rev="$2"
    shift 2
    commit="$(git rev-parse --verify --quiet "$rev^{commit}")" \
      || { echo "bench.sh: --compare $rev: not a revision of this repository" >&2; exit 2; }
    # This checkout (its tracked files, changes included) is built the same way as REV, so the
    # two binaries differ only by their source: built from a path and a target directory
    # apart from this checkout's, the same relay measured 5% apart.
    this="$(git stash create)"
    other="$(relay_of "$commit")"
    args+=(--scenario compare --this-relay "$(relay_of "${this:-$(git rev-parse HEAD)}")"
      --compare-relay "$other" --compare-label "$rev")
  elif [[ "$1" == "--compare-limits" ]]; then
    # This build beside itself with every limit configured (too high to refuse anything).
    shift
    args+=(--scenario compare --compare-relay "$(realpath -m "$target")/release/responses-relay"
      --compare-label "with limits" --compare-args "--key-requests-per-minute 1000000000
      --key-tokens-per-minute 1000000000000 --key-tokens-per-day 1000000000000
      --key-concurrent-runs 1000000 --key-mcp-calls-per-minute 1000000000")
  else
    [[ "$1" == "--scenario=peers" || ( "$1" == "--scenario" && "${2:-}" == "peers" ) ]] && peers=1
    args+=("$1")
    shift
  fi
done

# The peers, pinned, in the benchmark's own venv (reused while its pins match).
pins=(smg==1.13.0 agentic-api==0.9.0)
if [[ -n "${peers:-}" ]]; then
  venv="${BENCH_VENV:-$(realpath -m "$target")/bench-venv}"
  stamp="$venv/.bench-pins"
  why=""
  if [[ "$(cat "$stamp" 2>/dev/null)" != "${pins[*]}" ]]; then
    echo "bench.sh: installing ${pins[*]} into $venv (from PyPI)" >&2
    if ! command -v python3 >/dev/null; then
      why="python3 not found"
    elif ! python3 -m venv "$venv" >"$venv.log" 2>&1; then
      why="python3 -m venv failed, see $venv.log"
    elif ! "$venv/bin/pip" install --disable-pip-version-check --retries 1 --timeout 30 \
        "${pins[@]}" >>"$venv.log" 2>&1; then
      why="pip install failed, see $venv.log"
    else
      echo "${pins[*]}" >"$stamp"
    fi
  fi
  if [[ -z "$why" ]]; then
    args+=(--peers-venv "$venv")
  else
    echo "peers: SMG/agentic-api not installed ($why); measuring the relay and the floor only" >&2
  fi
fi

cargo build --release --bins --quiet
exec "$target/release/bench" --no-build "${args[@]}"
