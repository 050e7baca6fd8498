#!/usr/bin/env bash
# The cost of Raft election on the data path: the same workloads against conf/1m-2s-sync (a
# SYNC_MASTER and two slaves, static roles) and conf/raft-3-sync (three Raft-elected members, SYNC,
# minInSyncReplicas=2), alternately (A B A B), as processes on this machine with their sample
# ports (9876, 10911-10932, 10913, 10923, 10933) and data under a temporary directory:
#   - max-rate publish of the OMB 1 KiB workload (loghub lines as bodies, every message verified),
#   - synchronous sends, one message at a time per producer (send latency).
#
#   scripts/raft-cost.sh [ROUNDS]          (default 2; DURATION per run, default 20s)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
DURATION=${DURATION:-20s}
DATA=$(mktemp -d "${TMPDIR:-/tmp}/petrel-raft-cost.XXXXXX")
PIDS=()
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
}
trap 'stop_all; rm -rf "$DATA"' EXIT
make build >/dev/null
NS=127.0.0.1:9876

run_topology() { # topology directory
  local topo=$1 n=0
  rm -rf "${DATA:?}/$topo"
  mkdir -p "$DATA/$topo"
  bin/petrel-namesrv --listen $NS >"$DATA/$topo/namesrv.log" 2>&1 &
  PIDS+=($!)
  for f in conf/"$topo"/*.conf; do
    n=$((n + 1))
    sed "s#^storePathRootDir=.*#storePathRootDir=$DATA/$topo/b$n#" "$f" >"$DATA/$topo/b$n.conf"
    bin/petrel-broker -c "$DATA/$topo/b$n.conf" >"$DATA/$topo/b$n.log" 2>&1 &
    PIDS+=($!)
  done
  for _ in $(seq 100); do
    bin/petrelctl clusterList -n $NS 2>/dev/null | awk '$3 == 0' | grep -q broker-a && break
    sleep 0.1
  done
  sleep 1 # the slaves join the in-sync set
  bin/petrelctl updateTopic -n $NS -c DefaultCluster -t petrel-bench-cost-0 -r 16 -w 16 >/dev/null
  echo "### $topo: max-rate publish, 1 KiB workload"
  bin/petrel-bench -n $NS --workload bench/workloads/1-topic-16-partitions-1kb.yaml --payload-dir bench/testdata/loghub \
    --no-create-topic --topic-id cost --producer-rate 0 --duration "$DURATION" --warmup 5s --verify 2>&1 |
    grep -E '^  (publish rate|publish latency|end-to-end|messages) |^lost='
  echo "### $topo: synchronous sends"
  bin/petrel-bench -n $NS --workload bench/workloads/1-topic-16-partitions-1kb.yaml --payload-dir bench/testdata/loghub \
    --no-create-topic --topic-id cost --sync-send --producers 4 --duration "$DURATION" --warmup 5s --verify 2>&1 |
    grep -E '^  (publish rate|publish latency|messages) |^lost='
  stop_all
}

echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD); $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB"
for _ in $(seq "$ROUNDS"); do
  run_topology 1m-2s-sync
  run_topology raft-3-sync
done
