#!/usr/bin/env bash
# Failover of a Raft-elected group under load, with the bench's own verification: a NameServer
# and the three members of conf/raft-3-sync run as processes on this machine (their ports: 9876,
# 10911-10932, 10913, 10923, 10933; data under a temporary directory), petrel-bench --verify runs the OMB
# 1 KiB workload with loghub lines as bodies, and the master is killed with SIGKILL RUNS times,
# INTERVAL seconds apart; each killed member is restarted 2 s later and rejoins as a slave. At the
# end: the bench's summary (its failover lines, lost=, duplicated=, ...) and every member's log
# checksum up to the same offset (equal: byte-identical logs).
#
#   scripts/raft-failover.sh [RUNS]        (default 10; INTERVAL default 6)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-10}
INTERVAL=${INTERVAL:-6}
DATA=$(mktemp -d "${TMPDIR:-/tmp}/petrel-raft-failover.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "logs kept in $DATA"; else rm -rf "$DATA"; fi
}
trap cleanup EXIT
make build >/dev/null
NS=127.0.0.1:9876

bin/petrel-namesrv --listen $NS >"$DATA/namesrv.log" 2>&1 &
PIDS+=($!)
declare -A MEMBER # client port -> member number
start_member() {
  local i=$1
  sed "s#^storePathRootDir=.*#storePathRootDir=$DATA/b$i#" "conf/raft-3-sync/broker-a-b$i.conf" >"$DATA/b$i.conf"
  bin/petrel-broker -c "$DATA/b$i.conf" >>"$DATA/b$i.log" 2>&1 &
  PIDS+=($!)
  eval "PID_$i=$!"
}
for i in 1 2 3; do
  start_member $i
done
MEMBER=([10911]=1 [10921]=2 [10931]=3)
master() { bin/petrelctl clusterList -n $NS 2>/dev/null | awk '$2 == "broker-a" && $3 == 0 {print $4}'; }
for _ in $(seq 50); do [ -n "$(master)" ] && break; sleep 0.2; done
TOPIC=petrel-bench-raftfo-0
bin/petrelctl updateTopic -n $NS -c DefaultCluster -t $TOPIC -r 16 -w 16 >/dev/null
DURATION=$(( RUNS * INTERVAL + 8 ))
bin/petrel-bench -n $NS --workload bench/workloads/1-topic-16-partitions-1kb.yaml \
  --payload-dir bench/testdata/loghub --no-create-topic --topic-id raftfo \
  --duration ${DURATION}s --warmup 2s --verify >"$DATA/bench.txt" 2>&1 &
BENCH_PID=$!
sleep 5
for run in $(seq "$RUNS"); do
  m=$(master)
  i=${MEMBER[${m##*:}]}
  kill -9 "$(eval echo \$PID_$i)"
  echo "run $run: killed the master $m (member b$i) at $(date +%T.%3N)"
  sleep 2
  start_member "$i"
  sleep $(( INTERVAL - 2 ))
done
wait $BENCH_PID || true
grep -E '^  (publish rate|end-to-end|messages|failover) |^lost=' "$DATA/bench.txt" || tail -30 "$DATA/bench.txt"
end=$(bin/petrelctl haStatus -b "$(master)" | awk '$1 == "#LogEndOffset" {print $2}')
for i in 1 2 3; do
  for _ in $(seq 100); do
    e=$(bin/petrelctl haStatus -b 127.0.0.1:109${i}1 2>/dev/null | awk '$1 == "#LogEndOffset" {print $2}' || true)
    [ "$e" = "$end" ] && break
    sleep 0.1
  done
  bin/petrelctl logChecksum -b 127.0.0.1:109${i}1 --to "$end"
done
grep -h "acting as master" "$DATA"/b*.log | sed 's/.*time=\([^ ]*\).*brokerId=\([0-9]*\) epoch=\([0-9]*\).*took=\([^ ]*\).*/master: \1 brokerId \2 epoch \3 (took \4)/' | sort || true
grep -h "truncating it through a restart" "$DATA"/b*.log | sed 's/.*brokerId=\([0-9]*\) logEnd=\([0-9]*\) truncateTo=\([0-9]*\).*/truncated: brokerId \1 from \2 to \3 on rejoining/' || true
