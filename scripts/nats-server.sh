#!/usr/bin/env bash
# Starts a NATS JetStream server for `petrel-bench --driver nats`, in the foreground (Ctrl-C, or
# SIGTERM when it runs in the background, where the shell ignores SIGINT, stops it; the store
# directory is removed on exit unless KEEP=1).
#
#   scripts/nats-server.sh [r1|r1-sync|r3]
#
#   r1       (default) one server, JetStream on, file store in a temporary directory: nats-server
#            -js -sd <tmp>; client port PORT (4222). Writes are fsynced every 2 min (NATS default).
#   r1-sync  one server whose store fsyncs every write (jetstream { sync_interval: always }):
#            the counterpart of Petrel's SYNC_FLUSH.
#   r3       three servers clustered over loopback routes (client ports PORT, PORT+1, PORT+2;
#            route ports PORT+2000..+2002), for --nats-replicas 3.
#
# Then, e.g.:
#   bin/petrel-bench --driver nats --workload bench/workloads/1-topic-16-partitions-1kb.yaml \
#     --duration 10s --verify
#   bin/petrel-bench --driver nats --nats-replicas 3 --nats-url nats://127.0.0.1:4222 ...
#
# nats-server is taken from PATH or bin/; when missing, it is installed into bin/ (gitignored)
# with `go install github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION`.
# Settings (environment variables): PORT=4222, STORE_DIR (default a new temporary directory),
# KEEP=1 keeps it, NATS_SERVER_VERSION=v2.15.3.
set -euo pipefail

mode=${1:-r1}
root=$(cd "$(dirname "$0")/.." && pwd)
PORT=${PORT:-4222}
NATS_SERVER_VERSION=${NATS_SERVER_VERSION:-v2.15.3}

if command -v nats-server >/dev/null 2>&1; then
	server=$(command -v nats-server)
elif [[ -x $root/bin/nats-server ]]; then
	server=$root/bin/nats-server
else
	echo "nats-server not found: installing github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION into $root/bin" >&2
	GOBIN=$root/bin go install "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION"
	server=$root/bin/nats-server
fi
echo "using $server ($("$server" --version))" >&2

store=${STORE_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/petrel-nats.XXXXXX")}
mkdir -p "$store"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ ${KEEP:-0} != 1 ]]; then rm -rf "$store"; else echo "store kept: $store" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

case $mode in
r1)
	echo "NATS R1 on nats://127.0.0.1:$PORT, store $store" >&2
	"$server" -a 127.0.0.1 -p "$PORT" -js -sd "$store" &
	pids+=($!)
	;;
r1-sync)
	conf=$store/nats.conf
	cat >"$conf" <<EOF
listen: 127.0.0.1:$PORT
jetstream {
  store_dir: "$store/js"
  sync_interval: always
}
EOF
	echo "NATS R1 (sync_interval: always) on nats://127.0.0.1:$PORT, store $store" >&2
	"$server" -c "$conf" &
	pids+=($!)
	;;
r3)
	routes="nats-route://127.0.0.1:$((PORT + 2000)),nats-route://127.0.0.1:$((PORT + 2001)),nats-route://127.0.0.1:$((PORT + 2002))"
	for i in 0 1 2; do
		echo "NATS node n$i on nats://127.0.0.1:$((PORT + i)), store $store/n$i" >&2
		"$server" -a 127.0.0.1 -p $((PORT + i)) -n "n$i" -js -sd "$store/n$i" \
			--cluster_name petrel-bench --cluster "nats://127.0.0.1:$((PORT + 2000 + i))" --routes "$routes" &
		pids+=($!)
	done
	echo "use --nats-replicas 3 --nats-url nats://127.0.0.1:$PORT,nats://127.0.0.1:$((PORT + 1)),nats://127.0.0.1:$((PORT + 2))" >&2
	;;
*)
	echo "usage: $0 [r1|r1-sync|r3]" >&2
	exit 2
	;;
esac
wait -n "${pids[@]}"
