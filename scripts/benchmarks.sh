#!/usr/bin/env bash
# Produces the numbers in BENCHMARKS.md in one run: the machine's own limits (disk sequential
# write with dd, disk fdatasync rate, loopback TCP round trip) next to Petrel's (publish and
# consume rates for 1 KiB and 100 B messages under ASYNC_FLUSH and SYNC_FLUSH, synchronous send
# latency, replication), the same workloads on NATS JetStream, and the Go micro-benchmarks of the
# hot paths; then charts of Petrel and NATS side by side and the goals as ratios.
#
#   scripts/benchmarks.sh [OUTDIR]        (default bench-results/<timestamp>; `make bench` runs this)
#
# Sections (SECTIONS, default "single replication nats micro"; the machine baselines always run,
# so every ratio compares numbers of the same run):
#   single       embedded broker, no slaves: publish at the highest rate (1 KiB, 100 B) and
#                synchronous send (1 producer; 64 producers under SYNC_FLUSH), ASYNC_/SYNC_FLUSH;
#                end-to-end latency at OMB's 50k msg/s; consuming a backlog (OMB's backlog
#                workload: BACKLOG_GB, default 1, built at 50k msg/s, then drained while the
#                producers go on)
#   replication  1 KiB loghub bodies: no slaves vs ASYNC_MASTER vs SYNC_MASTER + 2 slaves, lag at
#                50k msg/s and the replication codecs
#   nats         the same workloads with --driver nats against servers started one at a time with
#                scripts/nats-server.sh (which installs nats-server into bin/ if missing): R1 for
#                the single-broker runs, r1-sync (sync_interval: always) for the SYNC_FLUSH ones,
#                r3 (--nats-replicas 3) for the replicated ones; NATS_PORT (default 4222, r3 uses
#                the next two as well and route ports +2000)
#   micro        Go micro-benchmarks (codec, append, read, replication chunks)
#   latency      only the latency runs of single and replication, each embedded and against
#                processes: e2e-50k, sync-send-1kb-ASYNC_FLUSH, repl-sync-50k, repl-sync-sync-send
#                and their -proc twins (those of a section also selected run once, in it)
# Each latency run (the four above) also runs as <name>-proc against a NameServer and broker
# group started as processes of their own (proc_start below), as brokers are deployed: the
# embedded cluster shares the bench's process and Go scheduler. Their ports are on 127.0.0.1
# from PROC_PORT (default 19876): the NameServer on PROC_PORT, broker i (0: the master, then
# the slaves) on PROC_PORT+1+2i and its replication port on the next one.
# Each latency run (and its -proc twin) has the machine's hiccup meter beside it: `petrel-bench
# baseline hiccup`, started just before the run and stopped (SIGTERM) right after it, records how
# late a thread that sleeps 1 ms at a time wakes under the same load (<name>.hiccup.json and
# .txt). That lateness is the machine's (steal, run queue), a floor under the run's latencies;
# the run's summary lines and the latency table show it beside them. The baselines measure it
# once on the idle machine (5 s).
# REPORT=1 measures nothing: it redraws the charts and appends the goal ratios to OUTDIR/summary.md
# from the results already in OUTDIR (SECTIONS=micro also appends the micro-benchmarks).
# WRITE_THROUGH_MAPPING=1 runs every Petrel broker (embedded and processes) with
# commitLogWriteThroughFile=false (petrel-bench --write-through-mapping): every append copies
# into the commit log's mapping instead of a pwrite; the summary's header says which.
# DURATION (default 20s) sets the length of each run. Every result is written as <name>.json and
# <name>.txt in OUTDIR; charts go to OUTDIR/charts/<comparison>/ and the goal ratios (with jq, else
# python3) to the end of OUTDIR/summary.md. Everything runs on this machine: the embedded
# NameServer and brokers (or the broker processes, or the NATS servers) share it with the load
# generator.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-results/$(date +%Y%m%d-%H%M%S)}
DURATION=${DURATION:-20s}
REPORT=${REPORT:-0}
if [[ $REPORT == 1 ]]; then SECTIONS=${SECTIONS:-}; else SECTIONS=${SECTIONS:-single replication nats micro}; fi
NATS_PORT=${NATS_PORT:-4222}
PROC_PORT=${PROC_PORT:-19876}
WRITE_THROUGH_MAPPING=${WRITE_THROUGH_MAPPING:-0}
[[ $WRITE_THROUGH_MAPPING == 0 || $WRITE_THROUGH_MAPPING == 1 ]] || { echo "WRITE_THROUGH_MAPPING=$WRITE_THROUGH_MAPPING: want 0 or 1" >&2; exit 2; }
want() { [[ " $SECTIONS " == *" $1 "* ]] && { [[ $REPORT != 1 ]] || [[ $1 == micro ]]; }; }
mkdir -p "$OUT"
DATA=$(mktemp -d "${TMPDIR:-/tmp}/petrel-benchmarks.XXXXXX")
NATS_PID=
nats_stop() { # stops the servers scripts/nats-server.sh started (its EXIT trap kills them)
  if [[ -n $NATS_PID ]]; then
    kill "$NATS_PID" 2>/dev/null || true
    wait "$NATS_PID" 2>/dev/null || true
    NATS_PID=
  fi
}

# Broker processes for the -proc runs: a NameServer and one broker group (broker-a), each a
# process of its own. proc_start takes the embedded cluster's settings from the run's own
# petrel-bench arguments (--flush, --slaves, --broker-role, --ha-compression, --segment-size,
# --write-through-mapping, with petrel-bench's defaults, which -n makes it ignore) and gives the
# processes the same, so a run and its -proc twin differ only in where the brokers run. What bench/embedded.go sets, the
# processes get too:
#   NameServer  registrationPeriod 1ns: the embedded one answers at once, not after 30 s
#   every       brokerClusterName DefaultCluster, brokerName broker-a, bound to and advertising
#   broker      127.0.0.1 (bindAddress, brokerIP1); flushDiskType (--flush, default
#               ASYNC_FLUSH); mappedFileSizeCommitLog (--segment-size, default 128 MiB, not the
#               broker's 1 GiB); haCompression (--ha-compression, default s2);
#               commitLogWriteThroughFile (false with --write-through-mapping); logs at warn
#               (petrel-bench's --log-level default, which the embedded servers log at)
#   master      brokerId 0, brokerRole --broker-role (default SYNC_MASTER with slaves,
#               ASYNC_MASTER without)
#   slave i     brokerId i, brokerRole SLAVE, slaveSyncInterval 500 ms (not 3 s: consumer offsets
#               reach the slaves within a short run); started once the master is registered, so
#               it learns the master's addresses from the NameServer, as an embedded slave does
# Everything else is the broker's default (broker.DefaultConfig, which the embedded brokers start
# from too), minInSyncReplicas 1 among them. What differs is the point: each process has its own
# Go runtime, GOMAXPROCS (the CPU count, plus one P per event loop: reserveLoopProcs) and garbage
# collector. proc_start returns once the NameServer lists every member and the master every
# slave connected, as startEmbedded does. Each member's store is under $DATA/procs, removed by
# proc_stop; the processes' logs (warnings and errors), when there are any, are kept as
# OUTDIR/<name>.procs.log.
PROC_NS=127.0.0.1:$PROC_PORT
PROC_MAX_SLAVES=2 # the -proc runs' largest group: the ports PROC_PORT..PROC_PORT+2+2*this are taken
PROC_PIDS=()      # the processes proc_start started: the NameServer, then the brokers
PROC_DIR=$DATA/procs
PROC_NAME=        # the run the processes serve, naming the kept logs
for p in "$NATS_PORT" $((NATS_PORT + 1)) $((NATS_PORT + 2)) $((NATS_PORT + 2000)) $((NATS_PORT + 2001)) $((NATS_PORT + 2002)); do
  if ((p >= PROC_PORT && p <= PROC_PORT + 2 + 2 * PROC_MAX_SLAVES)); then
    echo "PROC_PORT=$PROC_PORT: ports $PROC_PORT..$((PROC_PORT + 2 + 2 * PROC_MAX_SLAVES)) overlap the NATS servers' (NATS_PORT=$NATS_PORT, +1, +2, +2000..+2002)" >&2
    exit 2
  fi
done
((PROC_PORT > 0 && PROC_PORT + 2 + 2 * PROC_MAX_SLAVES <= 65535)) || { echo "PROC_PORT=$PROC_PORT: out of range" >&2; exit 2; }
proc_settings() { # petrel-bench arguments: sets P_FLUSH P_SLAVES P_ROLE P_HACOMP P_SEGMENT P_WTF to the embedded cluster's
  P_FLUSH=ASYNC_FLUSH P_SLAVES=2 P_ROLE= P_HACOMP=s2 P_SEGMENT=$((128 << 20)) P_WTF=true
  local v
  while (($# > 0)); do
    case $1 in
      --flush) P_FLUSH=$2; shift ;;
      --slaves) P_SLAVES=$2; shift ;;
      --broker-role) P_ROLE=$2; shift ;;
      --ha-compression) P_HACOMP=$2; shift ;;
      --write-through-mapping) P_WTF=false ;;
      --segment-size) # bytes, or with a K/M/G suffix (KiB, MiB, GiB), as petrel-bench reads it
        v=${2^^}; v=${v%IB}; v=${v%B}; shift
        case $v in
          *K) P_SEGMENT=$((${v%K} << 10)) ;;
          *M) P_SEGMENT=$((${v%M} << 20)) ;;
          *G) P_SEGMENT=$((${v%G} << 30)) ;;
          *) P_SEGMENT=$((v)) ;;
        esac ;;
      --flush=* | --slaves=* | --broker-role=* | --ha-compression=* | --segment-size=*)
        echo "proc_start: write $1 as two arguments" >&2; exit 2 ;;
    esac
    shift
  done
  if ((P_SLAVES > PROC_MAX_SLAVES)); then echo "proc_start: --slaves $P_SLAVES: at most $PROC_MAX_SLAVES" >&2; exit 2; fi
  if [[ -z $P_ROLE ]]; then
    if ((P_SLAVES > 0)); then P_ROLE=SYNC_MASTER; else P_ROLE=ASYNC_MASTER; fi
  fi
}
proc_addr() { echo "127.0.0.1:$((PROC_PORT + 1 + 2 * $1))"; } # member i's client address
proc_broker() { # i: writes member i's config (0: the master) and starts it
  local i=$1 port=$((PROC_PORT + 1 + 2 * $1)) role=$P_ROLE conf=$PROC_DIR/broker-a-$1.conf
  if ((i > 0)); then role=SLAVE; fi
  {
    echo "brokerClusterName=DefaultCluster"
    echo "brokerName=broker-a"
    echo "brokerId=$i"
    echo "brokerRole=$role"
    echo "flushDiskType=$P_FLUSH"
    echo "namesrvAddr=$PROC_NS"
    echo "bindAddress=127.0.0.1"
    echo "brokerIP1=127.0.0.1"
    echo "listenPort=$port"
    echo "haListenPort=$((port + 1))"
    echo "storePathRootDir=$PROC_DIR/broker-a-$i"
    echo "mappedFileSizeCommitLog=$P_SEGMENT"
    echo "haCompression=$P_HACOMP"
    echo "commitLogWriteThroughFile=$P_WTF"
    if ((i > 0)); then echo "slaveSyncInterval=500"; fi
  } >"$conf"
  bin/petrel-broker -c "$conf" --log-level warn >"$PROC_DIR/broker-a-$i.log" 2>&1 &
  PROC_PIDS+=($!)
}
proc_members() { # n: the NameServer lists n members of broker-a
  local got
  got=$(bin/petrelctl clusterList -n "$PROC_NS" -c DefaultCluster --timeout 2s 2>/dev/null | awk '$2 == "broker-a"' | wc -l || true)
  ((got >= $1))
}
proc_connected() { # n: the master has n slaves connected
  local got
  got=$(bin/petrelctl haStatus -b "$(proc_addr 0)" --timeout 2s 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && $7 == "true"' | wc -l || true)
  ((got >= $1))
}
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; } # port
proc_wait() { # what, then a check: retries the check for up to 30 s; stops the script if a process exits meanwhile
  local what=$1 t p; shift
  for ((t = 0; t < 150; t++)); do
    "$@" && return 0
    for p in "${PROC_PIDS[@]}"; do
      kill -0 "$p" 2>/dev/null && continue
      echo "a process of $PROC_NAME exited while waiting for $what; its logs:" >&2
      tail -n 20 "$PROC_DIR"/*.log >&2
      exit 1
    done
    sleep 0.2
  done
  echo "$PROC_NAME: timed out waiting for $what; the processes' logs:" >&2
  tail -n 20 "$PROC_DIR"/*.log >&2
  exit 1
}
proc_start() { # name, then the run's petrel-bench arguments: starts the NameServer and broker-a as processes
  local i p
  PROC_NAME=$1; shift
  proc_settings "$@"
  for ((p = PROC_PORT; p <= PROC_PORT + 2 + 2 * P_SLAVES; p++)); do
    if listening "$p"; then echo "port $p is already in use: stop what listens there or set PROC_PORT" >&2; exit 1; fi
  done
  rm -rf "$PROC_DIR"
  mkdir -p "$PROC_DIR"
  bin/petrel-namesrv --listen "$PROC_NS" --registration-period 1ns --log-level warn >"$PROC_DIR/namesrv.out" 2>"$PROC_DIR/namesrv.log" &
  PROC_PIDS+=($!)
  proc_wait "the NameServer to listen on $PROC_NS" listening "$PROC_PORT"
  proc_broker 0
  proc_wait "the master to register with the NameServer" proc_members 1
  for ((i = 1; i <= P_SLAVES; i++)); do proc_broker "$i"; done
  if ((P_SLAVES > 0)); then
    proc_wait "the $P_SLAVES slaves to register with the NameServer" proc_members $((1 + P_SLAVES))
    proc_wait "the $P_SLAVES slaves to connect to the master" proc_connected "$P_SLAVES"
  fi
  RUN_NOTE="processes: NameServer $PROC_NS, broker-a master $(proc_addr 0) ($P_ROLE)"
  if ((P_SLAVES > 0)); then
    RUN_NOTE+=", slaves$(for ((i = 1; i <= P_SLAVES; i++)); do printf ' %s' "$(proc_addr "$i")"; done)"
  fi
  RUN_NOTE+=", $P_FLUSH, haCompression $P_HACOMP, segments of $((P_SEGMENT >> 20)) MiB, commitLogWriteThroughFile $P_WTF"
}
proc_term() { # pids: SIGTERM, then waits for each (SIGKILL after 30 s), saying when one did not exit cleanly
  local p t rc
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "$@"; do
    for ((t = 0; t < 300; t++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$p" 2>/dev/null; then
      echo "$PROC_NAME: process $p did not stop within 30 s of SIGTERM: SIGKILL" >&2
      kill -KILL "$p" 2>/dev/null || true
    fi
    rc=0
    wait "$p" 2>/dev/null || rc=$?
    ((rc == 0)) || echo "$PROC_NAME: process $p exited with status $rc (logs in $OUT/$PROC_NAME.procs.log)" >&2
  done
}
proc_stop() { # stops the slaves, then the master (a slave would log its link to it going down), then the NameServer; removes their data
  local f
  ((${#PROC_PIDS[@]} > 0)) || return 0
  if ((${#PROC_PIDS[@]} > 2)); then proc_term "${PROC_PIDS[@]:2}"; fi
  if ((${#PROC_PIDS[@]} > 1)); then proc_term "${PROC_PIDS[1]}"; fi
  proc_term "${PROC_PIDS[0]}"
  PROC_PIDS=()
  for f in "$PROC_DIR"/*.log; do
    if [[ -s $f ]]; then echo "== $(basename "$f")"; cat "$f"; fi
  done >"$OUT/$PROC_NAME.procs.log"
  [[ -s $OUT/$PROC_NAME.procs.log ]] || rm -f "$OUT/$PROC_NAME.procs.log"
  rm -rf "$PROC_DIR"
}
# The machine's hiccup meter beside a latency run (run, when RUN_HICCUP is set): started just
# before the run, stopped right after it; its --duration (the run's warm-up + duration + 10 s)
# only bounds it should the script not get to stop it.
HICCUP_PID= # the meter running beside the current run
secs() { # a Go duration (20s, 1m30s, 500ms) in whole seconds, rounded up
  awk -v d="$1" 'BEGIN {
    t = 0
    while (d != "") {
      if (!match(d, /^[0-9.]+/)) { print "bad duration " d > "/dev/stderr"; exit 2 }
      v = substr(d, 1, RLENGTH) + 0; d = substr(d, RLENGTH + 1)
      if (!match(d, /^(ns|us|µs|ms|s|m|h)/)) { print "bad duration unit " d > "/dev/stderr"; exit 2 }
      u = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
      t += v * (u == "h" ? 3600 : u == "m" ? 60 : u == "s" ? 1 : u == "ms" ? 1e-3 : u == "ns" ? 1e-9 : 1e-6)
    }
    printf "%d\n", t == int(t) ? t : int(t) + 1
  }'
}
hiccup_start() { # name, then the run's petrel-bench arguments: the meter in the background, writing OUTDIR/<name>.hiccup.*
  local name=$1 d=0 w=-1; shift
  while (($# > 0)); do
    case $1 in
      --duration) d=$(secs "$2"); shift ;;
      --warmup) w=$(secs "$2"); shift ;;
    esac
    shift
  done
  ((w >= 0)) || w=$((d / 4)) # petrel-bench's default warm-up is at most a quarter of --duration
  $BENCH baseline hiccup --duration "$((w + d + 10))s" --json "$OUT/$name.hiccup.json" >"$OUT/$name.hiccup.txt" 2>&1 &
  HICCUP_PID=$!
}
hiccup_stop() { # SIGTERM to the meter, which then prints what it has recorded; waits for it
  local rc=0
  [[ -n $HICCUP_PID ]] || return 0
  kill -TERM "$HICCUP_PID" 2>/dev/null || true # it may have reached its --duration
  wait "$HICCUP_PID" 2>/dev/null || rc=$?
  HICCUP_PID=
  ((rc == 0)) || echo "the hiccup meter exited with status $rc" >&2
}
trap 'hiccup_stop; nats_stop; proc_stop; rm -rf "$DATA"' EXIT

make build >/dev/null
BENCH=bin/petrel-bench

section() { printf '\n## %s\n\n' "$*" | tee -a "$OUT/summary.md"; }
log() { tee -a "$OUT/summary.md"; }

if [[ $REPORT == 1 ]]; then
  [[ -f $OUT/summary.md && -f $OUT/baselines.txt ]] || { echo "REPORT=1: no summary.md and baselines.txt in $OUT" >&2; exit 2; }
  printf '\n(report regenerated %s on commit %s)\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" >>"$OUT/summary.md"
else
{
  echo "# Petrel benchmark run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
  echo "- cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, GOMAXPROCS=${GOMAXPROCS:-$(nproc)}"
  echo "- memory: $(free -g | awk '/^Mem:/ {print $2}') GiB"
  echo "- kernel: $(uname -r); $(go version)"
  if [[ $WRITE_THROUGH_MAPPING == 1 ]]; then
    echo "- Petrel brokers: commitLogWriteThroughFile=false (WRITE_THROUGH_MAPPING=1: every append copied into the commit log's mapping)"
  else
    echo "- Petrel brokers: commitLogWriteThroughFile=true (the default: the commit log written with pwrite, small batches into a populated mapping)"
  fi
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
  printf 'idle machine, '
  $BENCH baseline hiccup --duration 5s
} 2>&1 | tee "$OUT/baselines.txt" | log
fi

FAILED=() # runs that wrote a result but failed (verification): reported, and flagged in the goals
RUN_NOTE= # a line on what the next run runs against, printed under its command (proc_run)
RUN_HICCUP= # set: the next run has the machine's hiccup meter beside it (both, for the latency runs)
petrel_run() { # true when petrel-bench arguments run Petrel (not --driver nats)
  local a prev=
  for a in "$@"; do
    [[ $prev == --driver && $a != petrel ]] && return 1
    prev=$a
  done
  return 0
}
run() { # name, then petrel-bench arguments
  local name=$1 rc=0 hiccup=$RUN_HICCUP; shift
  if [[ $WRITE_THROUGH_MAPPING == 1 && " $* " != *" --write-through-mapping "* ]] && petrel_run "$@"; then set -- "$@" --write-through-mapping; fi
  RUN_HICCUP=
  echo "### $name" | log
  echo '```' | log
  echo "\$ petrel-bench $*" | log
  if [[ -n $RUN_NOTE ]]; then echo "$RUN_NOTE" | log; RUN_NOTE=; fi
  [[ -z $hiccup ]] || hiccup_start "$name" "$@"
  TMPDIR=$DATA $BENCH "$@" --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1 || rc=$?
  [[ -z $hiccup ]] || hiccup_stop
  if ((rc != 0)) && [[ ! -s $OUT/$name.json ]]; then tail -20 "$OUT/$name.txt"; exit 1; fi # no result: stop
  grep -E '^  (publish rate|consume rate|cpu|publish latency|end-to-end|messages|backlog drain|served by|replication|verification) ' "$OUT/$name.txt" | log || true
  [[ -z $hiccup ]] || grep -E '^hiccup:' "$OUT/$name.hiccup.txt" | sed 's/^/  machine /' | log || true
  grep -E '^lost=' "$OUT/$name.txt" | log || true
  if ((rc != 0)); then
    FAILED+=("$name")
    echo "FAILED (exit $rc), first problems:" | log
    grep -m5 -E '^  problem ' "$OUT/$name.txt" | log || true
  fi
  echo '```' | log
}

# Loghub lines joined into bodies of about 1 KiB: real log text, at the workload's message size.
L1K=(--workload bench/workloads/1-topic-16-partitions-1kb.yaml --payload-dir "$DATA/loghub-1k" --verify)
# The latency runs at OMB's 50k msg/s go without --verify: the verifier's bookkeeping of every
# message shares the 2 cores with the brokers and lengthens the tail it measures (BENCHMARKS.md);
# every other run verifies.
L1K_NV=(--workload bench/workloads/1-topic-16-partitions-1kb.yaml --payload-dir "$DATA/loghub-1k")
loghub_1k() {
  [[ -d $DATA/loghub-1k ]] && return
  mkdir -p "$DATA/loghub-1k"
  for f in bench/testdata/loghub/*.log; do
    awk '{ b = b (b == "" ? "" : " ") $0; if (length(b) >= 1000) { print substr(b, 1, 1024); b = "" } }' "$f" \
      >"$DATA/loghub-1k/$(basename "$f")"
  done
}
W1K=(--workload bench/workloads/1-topic-16-partitions-1kb.yaml)
W100=(--workload bench/workloads/1-topic-16-partition-100b.yaml)
# OMB's backlog workload (100 queues, 4 producers, 4 consumers): consumers start once BACKLOG_GB
# is backlogged (built at 50k msg/s, which NATS R1 sustains too), then drain it while the
# producers go on; the result's backlogDrainRate is the consume rate of the drain.
BACKLOG=(--workload bench/workloads/1-topic-100-partitions-1kb-4p-4c-200k-backlog.yaml --backlog-gb "${BACKLOG_GB:-1}"
  --producer-rate 50000 --warmup 0s --drain-timeout 120s)

# The latency runs, each embedded and as <name>-proc against broker processes (both): the same
# arguments, with -n. The 50k ones trace about 1 producer batch in 16 (--trace-every 16): their
# .txt ends with where the traced batches' latency went, stage by stage.
REPL_SYNC=(--slaves 2 --broker-role SYNC_MASTER)
REPL_SEND=("${L1K[@]}" --sync-send --producer-rate 0 --duration "$DURATION" --warmup 2s)
LAT_SYNC_SEND=(--slaves 0 "${W1K[@]}" --sync-send --producer-rate 0 --duration "$DURATION" --warmup 2s --flush ASYNC_FLUSH --verify)
LAT_E2E_50K=(--slaves 0 "${W1K[@]}" --producer-rate 50000 --duration "$DURATION" --warmup 5s --trace-every 16)
LAT_REPL_50K=("${REPL_SYNC[@]}" "${L1K_NV[@]}" --producer-rate 50000 --duration "$DURATION" --warmup 5s --trace-every 16)
proc_run() { # name, then petrel-bench arguments: the run against processes started for these arguments (proc_start)
  local name=$1; shift
  if [[ $WRITE_THROUGH_MAPPING == 1 ]]; then set -- "$@" --write-through-mapping; fi
  proc_start "$name" "$@"
  RUN_HICCUP=1
  run "$name" -n "$PROC_NS" "$@"
  proc_stop
}
both() { # name, then petrel-bench arguments: the run on the embedded cluster, then as name-proc on processes, each with the hiccup meter
  local name=$1; shift
  RUN_HICCUP=1
  run "$name" "$@"
  proc_run "$name-proc" "$@"
}

if want single; then
section "Publish and consume at the highest rate (embedded broker, no slaves, --verify)"
for flush in ASYNC_FLUSH SYNC_FLUSH; do
  run "publish-1kb-$flush" --slaves 0 --workload bench/workloads/1-topic-16-partitions-1kb.yaml --producer-rate 0 \
    --duration "$DURATION" --warmup 5s --flush "$flush" --verify
  run "publish-100b-$flush" --slaves 0 --workload bench/workloads/1-topic-16-partition-100b.yaml --producer-rate 0 \
    --duration "$DURATION" --warmup 5s --flush "$flush" --verify
done

section "Synchronous send, one message at a time (latency, no slaves; ASYNC_FLUSH embedded and as a broker process)"
both sync-send-1kb-ASYNC_FLUSH "${LAT_SYNC_SEND[@]}"
run "sync-send-1kb-SYNC_FLUSH" --slaves 0 "${W1K[@]}" --sync-send --producer-rate 0 \
  --duration "$DURATION" --warmup 2s --flush SYNC_FLUSH --verify
# 64 producers each waiting for its acknowledgement: what group commit makes of fdatasync.
run "sync-send-1kb-SYNC_FLUSH-64p" --slaves 0 "${W1K[@]}" --sync-send --producers 64 --producer-rate 0 \
  --duration "$DURATION" --warmup 2s --flush SYNC_FLUSH --verify

section "End-to-end latency at 50k msg/s (no slaves, embedded and as a broker process; without --verify, see above), and consuming a backlog (--verify)"
both e2e-50k "${LAT_E2E_50K[@]}"
run "backlog-1kb" --slaves 0 "${BACKLOG[@]}" --duration "$DURATION" --verify
fi

if want replication; then
loghub_1k

section "Replication: no slaves vs ASYNC_MASTER vs SYNC_MASTER (1 KiB loghub bodies, ASYNC_FLUSH, --verify)"
for mode in "none --slaves 0" "async --slaves 2 --broker-role ASYNC_MASTER" "sync --slaves 2 --broker-role SYNC_MASTER"; do
  set -- $mode; name=$1; shift
  run "repl-$name-max" "$@" "${L1K[@]}" --producer-rate 0 --duration "$DURATION" --warmup 5s
  runner=run
  [[ $name == sync ]] && runner=both # SYNC_MASTER's latency on processes too
  $runner "repl-$name-sync-send" "$@" "${REPL_SEND[@]}"
done
# Replication chunks uncompressed (haCompression=none): on loopback the bytes cost nothing and s2
# costs the master one compression per slave and each slave a decompression, on the same 2 cores.
run "repl-sync-max-none" --slaves 2 --broker-role SYNC_MASTER --ha-compression none "${L1K[@]}" --producer-rate 0 \
  --duration "$DURATION" --warmup 5s

section "Replication lag at 50k msg/s (SYNC_MASTER embedded and as processes) and compression codecs (master + 2 slaves, 1 KiB loghub bodies)"
both repl-sync-50k "${LAT_REPL_50K[@]}"
for codec in s2 zstd none; do
  run "repl-async-50k-$codec" --slaves 2 --broker-role ASYNC_MASTER --ha-compression "$codec" "${L1K[@]}" \
    --producer-rate 50000 --duration "$DURATION" --warmup 5s
done
fi

if want latency && ! { want single && want replication; }; then
loghub_1k
section "Latency, embedded and against broker processes (-proc)"
if ! want single; then
  both sync-send-1kb-ASYNC_FLUSH "${LAT_SYNC_SEND[@]}"
  both e2e-50k "${LAT_E2E_50K[@]}"
fi
if ! want replication; then
  both repl-sync-sync-send "${REPL_SYNC[@]}" "${REPL_SEND[@]}"
  both repl-sync-50k "${LAT_REPL_50K[@]}"
fi
fi

if want nats; then
nats_start() { # r1 | r1-sync | r3: starts scripts/nats-server.sh in the background, waits until ready
  local mode=$1 n=1 i t
  [[ $mode == r3 ]] && n=3
  for ((i = 0; i < n; i++)); do
    if listening "$((NATS_PORT + i))"; then
      echo "port $((NATS_PORT + i)) is already in use: stop that server or set NATS_PORT" >&2
      exit 1
    fi
  done
  if ! command -v nats-server >/dev/null 2>&1 && [[ ! -x bin/nats-server ]]; then
    echo "nats-server not found: scripts/nats-server.sh installs it into bin/ (go install)" | log
  fi
  TMPDIR=$DATA PORT=$NATS_PORT scripts/nats-server.sh "$mode" >"$OUT/nats-server-$mode.log" 2>&1 &
  NATS_PID=$!
  for ((i = 0; i < n; i++)); do
    until listening "$((NATS_PORT + i))"; do
      kill -0 "$NATS_PID" 2>/dev/null || { echo "nats-server ($mode) exited:" >&2; tail -20 "$OUT/nats-server-$mode.log" >&2; exit 1; }
      sleep 0.2
    done
  done
  if [[ $mode == r3 ]]; then # JetStream takes requests once the cluster has a metadata leader
    for ((t = 0; t < 300; t++)); do grep -q 'metadata leader' "$OUT/nats-server-$mode.log" && break; sleep 0.1; done
  fi
  grep -E '^(using|nats-server not found)' "$OUT/nats-server-$mode.log" | sed 's/^/nats: /' | log || true
}
NATS=(--driver nats --nats-url "nats://127.0.0.1:$NATS_PORT")
NATS3=(--driver nats --nats-replicas 3
  --nats-url "nats://127.0.0.1:$NATS_PORT,nats://127.0.0.1:$((NATS_PORT + 1)),nats://127.0.0.1:$((NATS_PORT + 2))")
loghub_1k

section "NATS JetStream R1 (scripts/nats-server.sh r1: fsync every 2 min), the single-broker workloads (--verify)"
nats_start r1
run "nats-r1-publish-1kb" "${NATS[@]}" "${W1K[@]}" --producer-rate 0 --duration "$DURATION" --warmup 5s --verify
run "nats-r1-publish-100b" "${NATS[@]}" "${W100[@]}" --producer-rate 0 --duration "$DURATION" --warmup 5s --verify
run "nats-r1-sync-send-1kb" "${NATS[@]}" "${W1K[@]}" --sync-send --producer-rate 0 --duration "$DURATION" --warmup 2s --verify
run "nats-r1-loghub-max" "${NATS[@]}" "${L1K[@]}" --producer-rate 0 --duration "$DURATION" --warmup 5s
run "nats-r1-loghub-sync-send" "${NATS[@]}" "${L1K[@]}" --sync-send --producer-rate 0 --duration "$DURATION" --warmup 2s
run "nats-r1-e2e-50k" "${NATS[@]}" "${W1K[@]}" --producer-rate 50000 --duration "$DURATION" --warmup 5s
run "nats-r1-backlog-1kb" "${NATS[@]}" "${BACKLOG[@]}" --duration "$DURATION" --verify
nats_stop

section "NATS JetStream R1, sync_interval: always (scripts/nats-server.sh r1-sync), the SYNC_FLUSH workloads (--verify)"
nats_start r1-sync
run "nats-r1sync-publish-1kb" "${NATS[@]}" "${W1K[@]}" --producer-rate 0 --duration "$DURATION" --warmup 5s --verify
run "nats-r1sync-publish-100b" "${NATS[@]}" "${W100[@]}" --producer-rate 0 --duration "$DURATION" --warmup 5s --verify
run "nats-r1sync-sync-send-1kb" "${NATS[@]}" "${W1K[@]}" --sync-send --producer-rate 0 --duration "$DURATION" --warmup 2s --verify
run "nats-r1sync-sync-send-1kb-64p" "${NATS[@]}" "${W1K[@]}" --sync-send --producers 64 --producer-rate 0 \
  --duration "$DURATION" --warmup 2s --verify
nats_stop

section "NATS JetStream R3 (scripts/nats-server.sh r3, --nats-replicas 3), the replicated workloads (1 KiB loghub bodies, --verify)"
nats_start r3
run "nats-r3-loghub-max" "${NATS3[@]}" "${L1K[@]}" --producer-rate 0 --duration "$DURATION" --warmup 5s
run "nats-r3-loghub-sync-send" "${NATS3[@]}" "${L1K[@]}" --sync-send --producer-rate 0 --duration "$DURATION" --warmup 2s
run "nats-r3-loghub-50k" "${NATS3[@]}" "${L1K_NV[@]}" --producer-rate 50000 --duration "$DURATION" --warmup 5s
nats_stop
fi

if want micro; then
section "Go micro-benchmarks (codec, append, read, replication chunks)"
go test -run '^$' -bench 'Frame|PullRequestView|SendResponseHeader|BatchBuild|ValidateBatch|MessageIterator|StampBatch' \
  -benchmem -count 1 ./protocol/ 2>&1 | grep -E '^Benchmark' | log
go test -run '^$' -bench 'Append|Read' -benchmem -count 1 ./commitlog/ 2>&1 | grep -E '^Benchmark' | log
go test -run '^$' -bench 'Chunk' -benchmem -count 1 ./ha/ 2>&1 | grep -E '^Benchmark' | log
fi
# Charts: Petrel and NATS side by side, one directory per comparison whose results both exist.
charts=(
  "publish-1kb|1 KiB, 16 queues, highest rate: Petrel ASYNC_FLUSH vs NATS R1|publish-1kb-ASYNC_FLUSH nats-r1-publish-1kb"
  "publish-100b|100 B, 16 queues, highest rate: Petrel ASYNC_FLUSH vs NATS R1|publish-100b-ASYNC_FLUSH nats-r1-publish-100b"
  "sync-send-1kb|1 KiB, one message at a time: Petrel ASYNC_FLUSH vs NATS R1|sync-send-1kb-ASYNC_FLUSH nats-r1-sync-send-1kb"
  "sync-flush-publish-1kb|1 KiB, highest rate: Petrel SYNC_FLUSH vs NATS R1 sync_interval always|publish-1kb-SYNC_FLUSH nats-r1sync-publish-1kb"
  "sync-flush-publish-100b|100 B, highest rate: Petrel SYNC_FLUSH vs NATS R1 sync_interval always|publish-100b-SYNC_FLUSH nats-r1sync-publish-100b"
  "sync-flush-sync-send-1kb|1 KiB, one at a time: Petrel SYNC_FLUSH vs NATS R1 sync_interval always|sync-send-1kb-SYNC_FLUSH nats-r1sync-sync-send-1kb"
  "sync-flush-sync-send-1kb-64p|1 KiB, 64 producers one at a time: Petrel SYNC_FLUSH vs NATS R1 sync_interval always|sync-send-1kb-SYNC_FLUSH-64p nats-r1sync-sync-send-1kb-64p"
  "loghub-single-max|1 KiB loghub, highest rate: Petrel no slaves vs NATS R1|repl-none-max nats-r1-loghub-max"
  "loghub-single-sync-send|1 KiB loghub, one at a time: Petrel no slaves vs NATS R1|repl-none-sync-send nats-r1-loghub-sync-send"
  "loghub-replicated-max|1 KiB loghub, highest rate: Petrel SYNC_MASTER + 2 slaves (s2, none) vs NATS R3|repl-sync-max repl-sync-max-none nats-r3-loghub-max"
  "loghub-replicated-sync-send|1 KiB loghub, one at a time: Petrel SYNC_MASTER + 2 slaves vs NATS R3|repl-sync-sync-send nats-r3-loghub-sync-send"
  "loghub-replicated-50k|1 KiB loghub, 50k msg/s: Petrel SYNC_MASTER + 2 slaves vs NATS R3|repl-sync-50k nats-r3-loghub-50k"
  "e2e-50k|1 KiB, 16 queues, 50k msg/s: Petrel vs NATS R1|e2e-50k nats-r1-e2e-50k"
  "backlog-1kb|1 KiB, 100 queues, backlog built then drained: Petrel vs NATS R1|backlog-1kb nats-r1-backlog-1kb"
)
drawn=()
for c in "${charts[@]}"; do
  IFS='|' read -r dir title names <<<"$c"
  files=()
  for n in $names; do [[ -f $OUT/$n.json ]] && files+=("$OUT/$n.json"); done
  (( ${#files[@]} == $(wc -w <<<"$names") )) || continue
  if $BENCH chart --out "$OUT/charts/$dir" --title "$title" "${files[@]}" >"$OUT/charts-$dir.log" 2>&1; then
    drawn+=("$dir")
  else
    echo "chart $dir failed: $(tail -1 "$OUT/charts-$dir.log")" >&2
  fi
done
rm -f "$OUT"/charts-*.log
if (( ${#drawn[@]} > 0 )); then
  section "Charts (Petrel vs NATS, in charts/)"
  for d in "${drawn[@]}"; do echo "- charts/$d/: $(cd "$OUT/charts/$d" && ls | tr '\n' ' ')"; done | log
fi

# The goals (BENCHMARKS.md) as ratios of numbers of this run (a row needs both of its numbers).
jget() { # file field: a number from a result's JSON, empty if the file or the field is missing
  [[ -f $1 ]] || return 0
  if command -v jq >/dev/null 2>&1; then
    jq -r --arg f "$2" '.[$f] // empty' "$1"
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print("" if v is None else v)' "$1" "$2"
  else # single-line number fields of the indented JSON petrel-bench writes
    awk -v f="\"$2\":" '$1 == f { v = $2; sub(/,$/, "", v); print v; exit }' "$1"
  fi
}
if [[ $REPORT == 1 ]]; then # the runs' verification outcomes, from their results
  for f in "$OUT"/*.json; do
    v=$(jget "$f" verified) p=$(jget "$f" passed)
    [[ ${v,,} == true && ${p,,} == false ]] && FAILED+=("$(basename "$f" .json)")
  done
fi
rate() { jget "$OUT/$1.json" aggregatedPublishRate; }
FSYNC_RATE=$(sed -nE 's/^fdatasync after each [0-9]+-byte write: ([0-9.]+)\/s.*/\1/p' "$OUT/baselines.txt")
RTT_1K_US=$(sed -nE 's/^loopback round trip, 1024 bytes: p50 ([0-9.]+) us.*/\1/p' "$OUT/baselines.txt")
us() { local v; v=$(jget "$OUT/$1.json" "$2"); [[ -n $v ]] && awk -v v="$v" 'BEGIN { printf "%.1f", v * 1000 }'; return 0; } # ms field -> us
SYNC_P50_US=$(us sync-send-1kb-ASYNC_FLUSH aggregatedPublishLatency50pct)
# dd's page-cache rate in MB/s ("... copied, 0.19 s, 5.7 GB/s"), and the 1 KiB publish rate in MB/s.
DD_MBS=$(awk '/page cache:/ { v = $(NF-1); u = $NF; print (u ~ /^GB/ ? v * 1000 : u ~ /^kB/ ? v / 1000 : v) }' "$OUT/baselines.txt")
PUB_MBS=$(jget "$OUT/publish-1kb-ASYNC_FLUSH.json" aggregatedPublishRate)
[[ -n $PUB_MBS ]] && PUB_MBS=$(awk -v v="$PUB_MBS" 'BEGIN { printf "%.1f", v * 1024 / 1e6 }')
lag_p99() { # the larger of the slaves' replication lag p99 (ms) in a result, empty without slaves
  [[ -f $OUT/$1.json ]] || return 0
  if command -v jq >/dev/null 2>&1; then
    jq -r '[.replication[]?.lagMs99pct] | max // empty' "$OUT/$1.json"
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])).get("replication") or []; print(max((x["lagMs99pct"] for x in r), default=""))' "$OUT/$1.json"
  else # one field per line in the indented JSON petrel-bench writes
    awk '$1 == "\"lagMs99pct\":" { v = $2 + 0; if (m == "" || v > m) m = v } END { if (m != "") print m }' "$OUT/$1.json"
  fi
}
ratio_rows=()
goal() { # goal, petrel label, petrel value, reference label, reference value, ">=" or "<=", target, runs
  local r met n bad=
  for n in $8; do [[ " ${FAILED[*]} " == *" $n "* ]] && bad+=" $n"; done
  if [[ -z $3 || -z $5 ]] || awk -v d="$5" 'BEGIN { exit !(d == 0) }'; then
    ratio_rows+=("| $1 | $2 ${3:-(not run)} | $4 ${5:-(not run)} | | $6 $7x | not measured |")
    return
  fi
  r=$(awk -v a="$3" -v b="$5" 'BEGIN { printf "%.2f", a / b }')
  if awk -v r="$r" -v t="$7" -v op="$6" 'BEGIN { exit !(op == ">=" ? r >= t : r <= t) }'; then met=met; else met="**not met**"; fi
  [[ -n $bad ]] && met+=" (failed verification:$bad)"
  ratio_rows+=("| $1 | $2 $3 | $4 $5 | ${r}x | $6 $7x | $met |")
}
bound() { # goal, label, value, "<", limit, runs: an absolute goal (the value must stay under limit)
  local met n bad=
  for n in $6; do [[ " ${FAILED[*]} " == *" $n "* ]] && bad+=" $n"; done
  if [[ -z $3 ]]; then
    ratio_rows+=("| $1 | $2 (not run) | | | $4 $5 $2 | not measured |")
    return
  fi
  if awk -v v="$3" -v l="$5" 'BEGIN { exit !(v < l) }'; then met=met; else met="**not met**"; fi
  [[ -n $bad ]] && met+=" (failed verification:$bad)"
  ratio_rows+=("| $1 | $3 $2 | | | $4 $5 $2 | $met |")
}
fmt() { if [[ -n $1 ]]; then awk -v v="$1" 'BEGIN { printf "%.0f", v }'; fi; }
goal "Publish max rate vs NATS R1 (1 KiB)" "msg/s" "$(fmt "$(rate publish-1kb-ASYNC_FLUSH)")" \
  "msg/s" "$(fmt "$(rate nats-r1-publish-1kb)")" ">=" 4 "publish-1kb-ASYNC_FLUSH nats-r1-publish-1kb"
goal "Publish max rate vs NATS R1 (100 B)" "msg/s" "$(fmt "$(rate publish-100b-ASYNC_FLUSH)")" \
  "msg/s" "$(fmt "$(rate nats-r1-publish-100b)")" ">=" 4 "publish-100b-ASYNC_FLUSH nats-r1-publish-100b"
goal "Publish max rate vs page-cache write (dd), 1 KiB" "MB/s" "$PUB_MBS" "MB/s" "$DD_MBS" ">=" 0.5 "publish-1kb-ASYNC_FLUSH"
goal "Sync-send p50 vs loopback RTT p50 (1 KiB)" "us" "$SYNC_P50_US" "us" "$RTT_1K_US" "<=" 1.5 "sync-send-1kb-ASYNC_FLUSH"
goal "Sync send rate vs NATS R1 sync publish (1 KiB)" "msg/s" "$(fmt "$(rate sync-send-1kb-ASYNC_FLUSH)")" \
  "msg/s" "$(fmt "$(rate nats-r1-sync-send-1kb)")" ">=" 2 "sync-send-1kb-ASYNC_FLUSH nats-r1-sync-send-1kb"
goal "SYNC_FLUSH, 64 sync producers vs fdatasync rate" "msg/s" "$(fmt "$(rate sync-send-1kb-SYNC_FLUSH-64p)")" \
  "fdatasync/s" "$(fmt "$FSYNC_RATE")" ">=" 20 "sync-send-1kb-SYNC_FLUSH-64p"
goal "SYNC_FLUSH, 64 sync producers vs NATS R1 sync_interval always" "msg/s" "$(fmt "$(rate sync-send-1kb-SYNC_FLUSH-64p)")" \
  "msg/s" "$(fmt "$(rate nats-r1sync-sync-send-1kb-64p)")" ">=" 20 "sync-send-1kb-SYNC_FLUSH-64p nats-r1sync-sync-send-1kb-64p"
goal "Master + 2 slaves (SYNC_MASTER) vs single broker, max rate" "msg/s" "$(fmt "$(rate repl-sync-max)")" \
  "msg/s" "$(fmt "$(rate repl-none-max)")" ">=" 0.5 "repl-sync-max repl-none-max"
goal "Master + 2 slaves (SYNC_MASTER) vs NATS R3, max rate" "msg/s" "$(fmt "$(rate repl-sync-max)")" \
  "msg/s" "$(fmt "$(rate nats-r3-loghub-max)")" ">=" 4 "repl-sync-max nats-r3-loghub-max"
goal "Master + 2 slaves, haCompression=none, vs single broker" "msg/s" "$(fmt "$(rate repl-sync-max-none)")" \
  "msg/s" "$(fmt "$(rate repl-none-max)")" ">=" 0.5 "repl-sync-max-none repl-none-max"
goal "Master + 2 slaves, haCompression=none, vs NATS R3" "msg/s" "$(fmt "$(rate repl-sync-max-none)")" \
  "msg/s" "$(fmt "$(rate nats-r3-loghub-max)")" ">=" 4 "repl-sync-max-none nats-r3-loghub-max"
goal "Sync-send p50, master + 2 slaves (SYNC_MASTER) vs NATS R3" "us" "$(us repl-sync-sync-send aggregatedPublishLatency50pct)" \
  "us" "$(us nats-r3-loghub-sync-send aggregatedPublishLatency50pct)" "<=" 0.5 "repl-sync-sync-send nats-r3-loghub-sync-send"
bound "Replication lag p99 at 50k msg/s (SYNC_MASTER, slower slave)" "ms" "$(lag_p99 repl-sync-50k)" "<" 5 "repl-sync-50k"
bound "Replication lag p99 at 50k msg/s (SYNC_MASTER, slower slave), broker processes" "ms" "$(lag_p99 repl-sync-50k-proc)" "<" 5 "repl-sync-50k-proc"
goal "Consume from backlog vs NATS R1 (drain rate)" "msg/s" "$(fmt "$(jget "$OUT/backlog-1kb.json" backlogDrainRate)")" \
  "msg/s" "$(fmt "$(jget "$OUT/nats-r1-backlog-1kb.json" backlogDrainRate)")" ">=" 4 "backlog-1kb nats-r1-backlog-1kb"
bound "End-to-end p99 at 50k msg/s, single broker" "ms" "$(jget "$OUT/e2e-50k.json" aggregatedEndToEndLatency99pct)" "<" 5 "e2e-50k"
bound "End-to-end p99 at 50k msg/s, master + 2 slaves (SYNC_MASTER)" "ms" "$(jget "$OUT/repl-sync-50k.json" aggregatedEndToEndLatency99pct)" "<" 5 "repl-sync-50k"
bound "End-to-end p99 at 50k msg/s, single broker process" "ms" "$(jget "$OUT/e2e-50k-proc.json" aggregatedEndToEndLatency99pct)" "<" 5 "e2e-50k-proc"
bound "End-to-end p99 at 50k msg/s, master + 2 slave processes (SYNC_MASTER)" "ms" "$(jget "$OUT/repl-sync-50k-proc.json" aggregatedEndToEndLatency99pct)" "<" 5 "repl-sync-50k-proc"
section "Goals (issue 5): ratios of this run"
{
  echo "| Goal | Petrel | Reference | Ratio | Target | |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${ratio_rows[@]}"
  if ((${#FAILED[@]} > 0)); then echo; echo "Runs that failed (see their .txt): ${FAILED[*]}"; fi
} | log
# The latency runs side by side, each embedded and against broker processes (-proc): the same
# arguments, the brokers in the bench's process or in their own.
ms() { local v; v=$(jget "$OUT/$1.json" "$2"); [[ -n $v ]] && awk -v v="$v" 'BEGIN { printf "%.3f", v }'; return 0; }
lat_rows=()
for n in e2e-50k repl-sync-50k sync-send-1kb-ASYNC_FLUSH repl-sync-sync-send; do
  for m in "$n" "$n-proc"; do
    [[ -f $OUT/$m.json ]] || continue
    label=$m
    [[ " ${FAILED[*]} " == *" $m "* ]] && label+=" (failed verification)"
    row="| $label | $(fmt "$(rate "$m")")"
    for f in Publish EndToEnd; do
      for q in 50pct 99pct 999pct Max; do row+=" | $(ms "$m" "aggregated${f}Latency$q")"; done
    done
    lag=$(lag_p99 "$m")
    row+=" | ${lag:--}"
    for q in p99Ms p999Ms maxMs; do v=$(ms "$m.hiccup" "$q"); row+=" | ${v:--}"; done
    lat_rows+=("$row |")
  done
done
if ((${#lat_rows[@]} > 0)); then
  section "Latency: embedded cluster vs broker processes (-proc), ms"
  {
    echo "| Run | msg/s | publish p50 | p99 | p99.9 | max | end-to-end p50 | p99 | p99.9 | max | lag p99, slower slave | machine hiccup p99 | p99.9 | max |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${lat_rows[@]}"
  } | log
fi
echo | log
echo "results in $OUT"
for n in "${FAILED[@]}"; do # a Petrel run that fails its verification fails the benchmark run
  [[ $n == nats-* ]] || { echo "Petrel run $n failed: see $OUT/$n.txt" >&2; exit 1; }
done
