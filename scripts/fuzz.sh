#!/usr/bin/env bash
# Builds the cargo-fuzz targets in fuzz/ and runs each in turn for a fixed time, starting from the
# committed seeds (fuzz/seeds/TARGET) plus the working corpus (fuzz/corpus/TARGET, not committed),
# then prints executions, seconds, coverage and the outcome per target.
#
# Usage: scripts/fuzz.sh [-t SECONDS] [-s SANITIZER] [TARGET...]
#   -t SECONDS    time per target (default 600, or $FUZZ_SECONDS)
#   -s SANITIZER  address (default, or $FUZZ_SANITIZER), none, ...; builds keep debug assertions
#                 and overflow checks on, so the emitter's invalid-event assertion is live
#   TARGET        default: every target in fuzz/fuzz_targets/
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a C++ compiler. On a stable toolchain the
# sanitizer flags need RUSTC_BOOTSTRAP=1, which this script sets. One libFuzzer process per target
# (no -jobs/-workers: the runs are meant to share a small machine). Exit status 1 if any target
# crashed, hung, ran out of memory or broke an invariant; its input is in fuzz/artifacts/TARGET/.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${FUZZ_SECONDS:-600}"
sanitizer="${FUZZ_SANITIZER:-address}"
while getopts "t:s:h" opt; do
    case "$opt" in
        t) seconds="$OPTARG" ;;
        s) sanitizer="$OPTARG" ;;
        *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in "$root"/fuzz/fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2
    exit 2
fi
export RUSTC_BOOTSTRAP=1
cd "$root"

# Largest input per target: requests are small; transcoder inputs hold a turn or two of chunks.
max_len() {
    case "$1" in
        parse_request) echo 8192 ;;
        model_events) echo 8192 ;;
        *) echo 16384 ;;
    esac
}

echo "building ${targets[*]} (sanitizer: $sanitizer)"
for t in "${targets[@]}"; do
    cargo fuzz build -s "$sanitizer" "$t"
done

logs="$root/fuzz/target/logs"
mkdir -p "$logs"
summary=()
failed=0
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    args=(-max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
    if [ -f "fuzz/dicts/$t.dict" ]; then args+=(-dict="$root/fuzz/dicts/$t.dict"); fi
    seeds=()
    if [ -d "fuzz/seeds/$t" ]; then seeds=("$root/fuzz/seeds/$t"); fi
    log="$logs/$t.log"
    echo "== $t: ${seconds}s, log $log"
    start=$(date +%s)
    status=0
    cargo fuzz run -s "$sanitizer" "$t" "$root/fuzz/corpus/$t" "${seeds[@]}" -- "${args[@]}" >"$log" 2>&1 || status=$?
    # libFuzzer's own fuzzing time (the build before it is not counted), else the wall clock.
    elapsed=$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -n 1 | grep -Eo '[0-9]+ second' | grep -Eo '[0-9]+' || true)
    if [ -z "$elapsed" ]; then elapsed=$(( $(date +%s) - start )); fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || true)
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || true)
    cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -n 1 || true)
    if [ "$status" -eq 0 ]; then
        outcome="ok"
    else
        failed=1
        outcome="FAILED (exit $status): $(grep -Eo '(ERROR: libFuzzer: [a-z-]+|panicked at [^ ]+|ALARM: working on the last Unit for [0-9]+ seconds)' "$log" | head -n 1 || true)"
        echo "   $t failed; the end of its log:"
        tail -n 40 "$log" | sed 's/^/   | /'
    fi
    summary+=("$(printf '%-20s %12s execs %6ss %8s/s  %-34s %s' "$t" "${execs:-?}" "$elapsed" "${rate:-?}" "${cov:-cov: ?}" "$outcome")")
done

echo
echo "== summary (sanitizer $sanitizer, ${seconds}s per target)"
printf '%s\n' "${summary[@]}"
exit "$failed"
