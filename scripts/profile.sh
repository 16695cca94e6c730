#!/usr/bin/env bash
# Where a process of the benchmark spends its CPU: runs the `stream` scenario (release build,
# store: false first), samples the first process named PROC (`relay` or `floor`) with
# `perf record` for SECONDS once it has served a few seconds, then prints its CPU grouped by
# kind of work (scripts/perf_categories.py) and its top symbols. Needs `perf` (Debian's
# linux-perf) and the right to profile (root, or kernel.perf_event_paranoid <= 1).
#   bash scripts/profile.sh                    # relay, 10 s, 64 clients
#   bash scripts/profile.sh floor 10 --clients 64
#   PROFILE_CALLS=1 bash scripts/profile.sh    # with call stacks: inclusive costs per function
#   PROFILE_NTH=6 bash scripts/profile.sh      # the sixth relay the scenario starts: its stored
#                                              # phase on SQLite (1 is store: false)
# Further arguments go on to `bench` (`--clients`, `--delay-ms`, `--deltas`). With PROFILE_CALLS=1
# the binaries are built with frame pointers into target/fp/ (a build of its own) and the report
# lists each function with what it and its callees cost.
set -euo pipefail
cd "$(dirname "$0")/.."
proc="${1:-relay}"
seconds="${2:-10}"
shift $(( $# > 2 ? 2 : $# ))
[[ "$proc" == relay || "$proc" == floor ]] || { echo "profile.sh: PROC is relay or floor" >&2; exit 2; }
command -v perf >/dev/null || { echo "profile.sh: perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
target="${CARGO_TARGET_DIR:-target}"
record=(perf record -q -F 1999)
if [[ "${PROFILE_CALLS:-0}" == 1 ]]; then
  target="$target/fp"
  export RUSTFLAGS="${RUSTFLAGS:-} -C force-frame-pointers=yes"
  record+=(-g)
fi
CARGO_TARGET_DIR="$target" cargo build --release --bins --quiet
out="$(mktemp -d)"
trap 'kill "$bench" 2>/dev/null || true; pkill -P "$bench" 2>/dev/null || true; rm -rf "$out"' EXIT
args=(--scenario stream --clients 64 --seconds $((seconds + 10)) "$@")
"$target/release/bench" --no-build "${args[@]}" >"$out/bench.out" 2>"$out/bench.err" &
bench=$!
pid=""
for _ in $(seq 1 6000); do
  pid="$(grep -o "$proc pid [0-9]*" "$out/bench.err" | sed -n "${PROFILE_NTH:-1}p" | awk '{print $3}')" || true
  [[ -n "$pid" ]] && break
  sleep 0.1
done
[[ -n "$pid" ]] || { echo "profile.sh: no $proc started" >&2; cat "$out/bench.err" >&2; exit 2; }
sleep 3 # the warm-up: the clients' first runs are spread over one run's length
"${record[@]}" -p "$pid" -o "$out/perf.data" -- sleep "$seconds" 2>/dev/null
echo "$proc (pid $pid), ${seconds} s of bench ${args[*]}:"
python3 scripts/perf_categories.py "$out/perf.data" "$seconds"
echo
if [[ "${PROFILE_CALLS:-0}" == 1 ]]; then
  perf report -i "$out/perf.data" --children --sort sym --stdio -g none --percent-limit 1 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | cut -c1-160 | head -n 60
else
  perf report -i "$out/perf.data" --no-children --sort dso,sym --stdio 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | head -n 30
fi
