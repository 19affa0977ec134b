# bench/lib.sh — shared helpers for the bench scripts (sourced, not run).
# KVD_BIN_DIR: where kvd, kvctl, kvd-bench are (default build/bin).
BIN=${KVD_BIN_DIR:-build/bin}
OUT=${KVD_BENCH_OUT:-bench/out}
mkdir -p "$OUT"
for b in kvd kvctl kvd-bench; do
    [ -x "$BIN/$b" ] || { echo "bench: $BIN/$b not built (make build, or set KVD_BIN_DIR)" >&2; exit 1; }
done

KVD_PIDS=()
KVD_DIRS=()
cleanup() {
    for pid in "${KVD_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${KVD_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    for d in "${KVD_DIRS[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT

# start_kvd VAR ARGS... — starts kvd in a fresh runtime dir, waits until it answers,
# sets VAR to the dir. ARGS go to kvd.
start_kvd() {
    local _var=$1; shift
    local _d; _d=$(mktemp -d /tmp/kvd-bench.XXXXXX)
    "$BIN/kvd" --runtime-dir "$_d" --log-level warn "$@" >"$_d/kvd.log" 2>&1 &
    KVD_PIDS+=($!)
    KVD_DIRS+=("$_d")
    for _ in $(seq 1 200); do
        "$BIN/kvctl" --runtime-dir "$_d" --timeout-ms 500 pool >/dev/null 2>&1 && {
            printf -v "$_var" '%s' "$_d"; return 0; }
        sleep 0.1
    done
    echo "bench: kvd did not start; log:" >&2
    tail -20 "$_d/kvd.log" >&2
    exit 1
}

# stop_kvd DIR — SIGTERM the kvd serving DIR and wait for it.
stop_kvd() {
    local i
    for i in "${!KVD_DIRS[@]}"; do
        if [ "${KVD_DIRS[$i]}" = "$1" ]; then
            kill -TERM "${KVD_PIDS[$i]}" 2>/dev/null || true
            wait "${KVD_PIDS[$i]}" 2>/dev/null || true
        fi
    done
}

# host line for the tables
host_line() {
    echo "$(uname -m), $(nproc) CPUs, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
}
