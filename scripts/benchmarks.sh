#!/usr/bin/env bash
# Produces the numbers in BENCHMARKS.md in one run: the machine's own limits (disk sequential
# write with dd, disk fdatasync rate, loopback TCP round trip) next to Petrel's (publish and
# consume rates for 1 KiB and 100 B messages under ASYNC_FLUSH and SYNC_FLUSH, synchronous send
# latency) and the Go micro-benchmarks of the hot paths.
#
#   scripts/benchmarks.sh [OUTDIR]        (default bench-results/<timestamp>)
#
# DURATION (default 20s) sets the length of each Petrel run. SECTIONS (default "single replication
# micro") picks the sections; the machine baselines always run, so every ratio compares numbers of
# the same run. Everything runs on this machine: the embedded NameServer and brokers share it with
# the load generator.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-results/$(date +%Y%m%d-%H%M%S)}
DURATION=${DURATION:-20s}
SECTIONS=${SECTIONS:-single replication micro}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
mkdir -p "$OUT"
DATA=$(mktemp -d "${TMPDIR:-/tmp}/petrel-benchmarks.XXXXXX")
trap 'rm -rf "$DATA"' EXIT

make build >/dev/null
BENCH=bin/petrel-bench

section() { printf '\n## %s\n\n' "$*" | tee -a "$OUT/summary.md"; }
log() { tee -a "$OUT/summary.md"; }

{
  echo "# Petrel benchmark run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
  echo "- cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, GOMAXPROCS=${GOMAXPROCS:-$(nproc)}"
  echo "- memory: $(free -g | awk '/^Mem:/ {print $2}') GiB"
  echo "- kernel: $(uname -r); $(go version)"
  echo "- disk: $(df -h "$DATA" | awk 'NR==2 {print $1 " (" $2 ", " $4 " free)"}'), data dir $DATA"
} | tee "$OUT/summary.md"

section "Machine baselines"
{
  printf 'dd 1 GiB in 1 MiB blocks, page cache:      '
  dd if=/dev/zero of="$DATA/dd.tmp" bs=1M count=1024 2>&1 | tail -1
  rm -f "$DATA/dd.tmp"
  printf 'dd 1 GiB in 1 MiB blocks, conv=fdatasync:  '
  dd if=/dev/zero of="$DATA/dd.tmp" bs=1M count=1024 conv=fdatasync 2>&1 | tail -1
  rm -f "$DATA/dd.tmp"
  $BENCH baseline fdatasync --dir "$DATA" --size 4096 --duration 5s
  $BENCH baseline loopback --size 1024 --count 20000
  $BENCH baseline loopback --size 100 --count 20000
} 2>&1 | log

run() { # name, then petrel-bench arguments
  local name=$1; shift
  echo "### $name" | log
  echo '```' | log
  echo "\$ petrel-bench $*" | log
  TMPDIR=$DATA $BENCH "$@" --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1 || { tail -20 "$OUT/$name.txt"; exit 1; }
  grep -E '^  (publish rate|consume rate|publish latency|end-to-end|messages|served by|replication) ' "$OUT/$name.txt" | log
  grep -E '^lost=' "$OUT/$name.txt" | log
  echo '```' | log
}

if want single; then
section "Publish and consume at the highest rate (embedded broker, no slaves, --verify)"
for flush in ASYNC_FLUSH SYNC_FLUSH; do
  run "publish-1kb-$flush" --slaves 0 --workload bench/workloads/1-topic-16-partitions-1kb.yaml --producer-rate 0 \
    --duration "$DURATION" --warmup 5s --flush "$flush" --verify
  run "publish-100b-$flush" --slaves 0 --workload bench/workloads/1-topic-16-partition-100b.yaml --producer-rate 0 \
    --duration "$DURATION" --warmup 5s --flush "$flush" --verify
done

section "Synchronous send, one message at a time (latency, no slaves)"
for flush in ASYNC_FLUSH SYNC_FLUSH; do
  run "sync-send-1kb-$flush" --slaves 0 --workload bench/workloads/1-topic-16-partitions-1kb.yaml --sync-send --producer-rate 0 \
    --duration "$DURATION" --warmup 2s --flush "$flush" --verify
done
fi

if want replication; then
# Loghub lines joined into bodies of about 1 KiB: real log text, at the workload's message size.
mkdir -p "$DATA/loghub-1k"
for f in bench/testdata/loghub/*.log; do
  awk '{ b = b (b == "" ? "" : " ") $0; if (length(b) >= 1000) { print substr(b, 1, 1024); b = "" } }' "$f" \
    >"$DATA/loghub-1k/$(basename "$f")"
done
L1K=(--workload bench/workloads/1-topic-16-partitions-1kb.yaml --payload-dir "$DATA/loghub-1k" --verify)

section "Replication: no slaves vs ASYNC_MASTER vs SYNC_MASTER (1 KiB loghub bodies, ASYNC_FLUSH, --verify)"
for mode in "none --slaves 0" "async --slaves 2 --broker-role ASYNC_MASTER" "sync --slaves 2 --broker-role SYNC_MASTER"; do
  set -- $mode; name=$1; shift
  run "repl-$name-max" "$@" "${L1K[@]}" --producer-rate 0 --duration "$DURATION" --warmup 5s
  run "repl-$name-sync-send" "$@" "${L1K[@]}" --sync-send --producer-rate 0 --duration "$DURATION" --warmup 2s
done

section "Replication lag at 50k msg/s and compression codecs (master + 2 slaves, 1 KiB loghub bodies)"
run "repl-sync-50k" --slaves 2 --broker-role SYNC_MASTER "${L1K[@]}" --producer-rate 50000 --duration "$DURATION" --warmup 5s
for codec in s2 zstd none; do
  run "repl-async-50k-$codec" --slaves 2 --broker-role ASYNC_MASTER --ha-compression "$codec" "${L1K[@]}" \
    --producer-rate 50000 --duration "$DURATION" --warmup 5s
done
fi

if want micro; then
section "Go micro-benchmarks (codec, append, read, replication chunks)"
go test -run '^$' -bench 'Frame|PullRequestView|SendResponseHeader|BatchBuild|ValidateBatch|MessageIterator|StampBatch' \
  -benchmem -count 1 ./protocol/ 2>&1 | grep -E '^Benchmark' | log
go test -run '^$' -bench 'Append|Read' -benchmem -count 1 ./commitlog/ 2>&1 | grep -E '^Benchmark' | log
go test -run '^$' -bench 'Chunk' -benchmem -count 1 ./ha/ 2>&1 | grep -E '^Benchmark' | log
fi
echo | log
echo "results in $OUT"
