#!/usr/bin/env bash
# Regression gate: builds BASE (a git revision, in a temporary worktree) and HEAD (this working
# tree, uncommitted changes included; HEAD_REV=<rev> builds a revision instead), runs the same
# short petrel-bench workload on both alternately (base, head, base, head, ...; RUNS each) and the
# Go micro-benchmarks of MICRO_PKGS the same way, prints benchstat tables and fails when HEAD is
# worse than BASE by more than THRESHOLD percent with p < ALPHA (Mann-Whitney U test).
#
#   scripts/bench-compare.sh BASE          or   make bench-compare BASE=<rev>
#
# Exit status: 0 no regression, 1 regression, 2 error (bad revision, build or run failure, ...).
# See BENCHMARKS.md "Regression gate". Settings (environment variables):
#
#   RUNS=6                 runs of each side, per workload (at least 4: below that the U test can
#                          never reach p < 0.05)
#   THRESHOLD=5            percent: slower, less throughput, higher latency or more memory than
#                          this (and significant) fails
#   ALPHA=0.05             significance level
#   HEAD_TAGS, BASE_TAGS   go build tags of each side (HEAD_TAGS=petrelslow: the deliberately
#                          slowed build of protocol/slowdown_petrelslow.go)
#   HEAD_REV               build this revision as HEAD instead of the working tree
#   E2E=1, MICRO=1         0 skips the end-to-end or the micro-benchmark part
#   WORKLOAD=bench/workloads/1-topic-16-partitions-1kb.yaml   PAYLOAD_DIR=bench/testdata/loghub
#   DURATION=10s WARMUP=2s BENCH_ARGS=   (extra petrel-bench flags)
#   MICRO_PKGS="./commitlog ./protocol"   MICRO_BENCH=.   MICRO_BENCHTIME=250ms
#   OUT=bench-results/compare-<time>     where the runs' JSON, logs and benchstat inputs stay
#   KEEP_WORKTREE=1        keep the temporary worktree and binaries (printed at the end)
#
# Both sides get the same input: the workload file and payload of this working tree. Each side's
# binaries are built once, before any run; the runs then alternate so that drift of the machine
# (other load, thermal state, page cache) spreads over both sides instead of favouring one.
set -Eeuo pipefail
trap 'echo "bench-compare: failed at line $LINENO: $BASH_COMMAND" >&2; exit 2' ERR

cd "$(dirname "$0")/.."
ROOT=$(pwd)
BASE=${1:-${BASE:-}}
RUNS=${RUNS:-6}
THRESHOLD=${THRESHOLD:-5}
ALPHA=${ALPHA:-0.05}
HEAD_TAGS=${HEAD_TAGS:-}
BASE_TAGS=${BASE_TAGS:-}
HEAD_REV=${HEAD_REV:-}
E2E=${E2E:-1}
MICRO=${MICRO:-1}
WORKLOAD=${WORKLOAD:-bench/workloads/1-topic-16-partitions-1kb.yaml}
PAYLOAD_DIR=${PAYLOAD_DIR:-bench/testdata/loghub}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
BENCH_ARGS=${BENCH_ARGS:-}
MICRO_PKGS=${MICRO_PKGS:-./commitlog ./protocol}
MICRO_BENCH=${MICRO_BENCH:-.}
MICRO_BENCHTIME=${MICRO_BENCHTIME:-250ms}
GO=${GO:-go}

die() { echo "bench-compare: $*" >&2; exit 2; }
[[ -n $BASE ]] || die "usage: scripts/bench-compare.sh BASE (a git revision, e.g. origin/main or HEAD~1)"
if ! [[ $RUNS =~ ^[0-9]+$ ]] || ((RUNS < 4)); then
  die "RUNS=$RUNS: need at least 4 runs per side (6 or more recommended)"
fi
BASE_SHA=$(git rev-parse --verify --quiet "$BASE^{commit}") || die "BASE=$BASE is not a git revision"
if [[ -n $HEAD_REV ]]; then
  HEAD_SHA=$(git rev-parse --verify --quiet "$HEAD_REV^{commit}") || die "HEAD_REV=$HEAD_REV is not a git revision"
fi
[[ -f $WORKLOAD ]] || die "no workload file $WORKLOAD"
[[ -d $PAYLOAD_DIR ]] || die "no payload directory $PAYLOAD_DIR"
WORKLOAD=$ROOT/${WORKLOAD#"$ROOT/"}
PAYLOAD_DIR=$ROOT/${PAYLOAD_DIR#"$ROOT/"}
OUT=${OUT:-bench-results/compare-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/petrel-bench-compare.XXXXXX")
WORKTREES=()
# shellcheck disable=SC2317 # cleanup runs from the EXIT trap
cleanup() {
  local rc=$?
  trap - ERR EXIT INT TERM
  if [[ ${KEEP_WORKTREE:-0} == 1 ]]; then
    echo "bench-compare: kept $TMP (worktrees: ${WORKTREES[*]:-none}); remove with git worktree remove --force" >&2
  else
    for wt in "${WORKTREES[@]}"; do git -C "$ROOT" worktree remove --force "$wt" 2>/dev/null || true; done
    rm -rf "$TMP"
    git -C "$ROOT" worktree prune 2>/dev/null || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "bench-compare: interrupted" >&2; exit 130' INT
trap 'echo "bench-compare: terminated" >&2; exit 143' TERM

worktree() { # dir, commit
  git -C "$ROOT" worktree add --quiet --detach "$1" "$2" || die "git worktree add $2 failed"
  WORKTREES+=("$1")
}
worktree "$TMP/base" "$BASE_SHA"
BASE_TREE=$TMP/base
if [[ -n $HEAD_REV ]]; then
  worktree "$TMP/head" "$HEAD_SHA"
  HEAD_TREE=$TMP/head
  HEAD_DESC="$HEAD_REV ($(git rev-parse --short "$HEAD_SHA"))"
else
  HEAD_TREE=$ROOT
  HEAD_DESC="working tree at $(git rev-parse --short HEAD)$(git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
fi
BASE_DESC="$BASE ($(git rev-parse --short "$BASE_SHA"))"
[[ -n $BASE_TAGS ]] && BASE_DESC+=" tags=$BASE_TAGS"
[[ -n $HEAD_TAGS ]] && HEAD_DESC+=" tags=$HEAD_TAGS"

{
  echo "# bench-compare $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "base: $BASE_DESC"
  echo "head: $HEAD_DESC"
  echo "runs: $RUNS per side, alternating; threshold ${THRESHOLD}%, alpha $ALPHA"
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $($GO version)"
} | tee "$OUT/summary.txt"

# The statistics tools come from cmd/benchgate's own module (golang.org/x/perf pinned in its
# go.mod), always from this working tree: BASE may predate them.
mkdir -p "$TMP/bin" "$TMP/tmp"
$GO -C "$ROOT/cmd/benchgate" build -o "$TMP/bin/benchgate" . || die "building cmd/benchgate failed"
$GO -C "$ROOT/cmd/benchgate" build -o "$TMP/bin/benchstat" golang.org/x/perf/cmd/benchstat || die "building benchstat failed"
BENCHGATE=$TMP/bin/benchgate
BENCHSTAT=$TMP/bin/benchstat

read -r -a PKGS <<<"$MICRO_PKGS"
build_side() { # side, tree, tags
  local side=$1 tree=$2 tags=$3 pkg
  mkdir -p "$TMP/$side"
  echo "building $side ($tree${tags:+, tags $tags})"
  if [[ $E2E == 1 ]]; then
    $GO -C "$tree" build -tags "$tags" -o "$TMP/$side/petrel-bench" ./cmd/petrel-bench || die "$side: go build ./cmd/petrel-bench failed"
  fi
  if [[ $MICRO == 1 ]]; then
    for pkg in "${PKGS[@]}"; do
      [[ -d $tree/$pkg ]] || die "$side: no package $pkg"
      $GO -C "$tree" test -c -tags "$tags" -o "$TMP/$side/$(basename "$pkg").test" "$pkg" || die "$side: go test -c $pkg failed"
    done
  fi
}
build_side base "$BASE_TREE" "$BASE_TAGS"
build_side head "$HEAD_TREE" "$HEAD_TAGS"

STATUS=0
gate() { # title, base file, head file, extra gate flags...
  local title=$1 b=$2 h=$3 rc=0
  shift 3
  {
    echo
    echo "## $title: benchstat base=$(basename "$b") head=$(basename "$h")"
    echo
    (cd "$(dirname "$b")" && "$BENCHSTAT" "base=$(basename "$b")" "head=$(basename "$h")")
    echo
  } | tee -a "$OUT/summary.txt"
  "$BENCHGATE" gate -threshold "$THRESHOLD" -alpha "$ALPHA" "$@" "$b" "$h" | tee -a "$OUT/summary.txt" || rc=${PIPESTATUS[0]}
  case $rc in
    0) ;;
    1) STATUS=1 ;;
    *) die "benchgate failed on $b $h" ;;
  esac
}

if [[ $E2E == 1 ]]; then
  NAME=Publish/$(basename "$WORKLOAD" .yaml)
  echo
  echo "end-to-end: petrel-bench --workload ${WORKLOAD#"$ROOT/"} --payload-dir ${PAYLOAD_DIR#"$ROOT/"} --producer-rate 0 --duration $DURATION --warmup $WARMUP $BENCH_ARGS" | tee -a "$OUT/summary.txt"
  for ((i = 1; i <= RUNS; i++)); do
    for side in base head; do
      json=$OUT/e2e-$side-$i.json
      # shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
      TMPDIR=$TMP/tmp "$TMP/$side/petrel-bench" --workload "$WORKLOAD" --payload-dir "$PAYLOAD_DIR" \
        --producer-rate 0 --duration "$DURATION" --warmup "$WARMUP" --json "$json" $BENCH_ARGS \
        >"$OUT/e2e-$side-$i.log" 2>&1 || { tail -20 "$OUT/e2e-$side-$i.log" >&2; die "$side run $i failed (log $OUT/e2e-$side-$i.log)"; }
      printf '  run %d/%d %-4s %s\n' "$i" "$RUNS" "$side" "$("$BENCHGATE" omb -name "$NAME" "$json" | tail -1 | cut -d' ' -f3-)"
    done
  done
  "$BENCHGATE" omb -name "$NAME" "$OUT"/e2e-base-*.json >"$OUT/e2e-base.txt"
  "$BENCHGATE" omb -name "$NAME" "$OUT"/e2e-head-*.json >"$OUT/e2e-head.txt"
  gate "end-to-end (petrel-bench)" "$OUT/e2e-base.txt" "$OUT/e2e-head.txt" -v
fi

if [[ $MICRO == 1 ]]; then
  echo
  echo "micro-benchmarks: go test -run '^\$' -bench '$MICRO_BENCH' -benchmem -benchtime $MICRO_BENCHTIME $MICRO_PKGS, -count 1 per run" | tee -a "$OUT/summary.txt"
  : >"$OUT/micro-base.txt"
  : >"$OUT/micro-head.txt"
  for ((i = 1; i <= RUNS; i++)); do
    for side in base head; do
      [[ $side == base ]] && tree=$BASE_TREE || tree=$HEAD_TREE
      for pkg in "${PKGS[@]}"; do
        # A test binary runs in its package's directory, as go test runs it (testdata/).
        (cd "$tree/$pkg" && TMPDIR=$TMP/tmp "$TMP/$side/$(basename "$pkg").test" -test.run '^$' \
          -test.bench "$MICRO_BENCH" -test.benchmem -test.count 1 -test.benchtime "$MICRO_BENCHTIME") \
          >>"$OUT/micro-$side.txt" 2>&1 || { tail -20 "$OUT/micro-$side.txt" >&2; die "$side: $pkg benchmarks failed (run $i)"; }
      done
      printf '  run %d/%d %s done\n' "$i" "$RUNS" "$side"
    done
  done
  gate "micro-benchmarks (go test -bench)" "$OUT/micro-base.txt" "$OUT/micro-head.txt"
fi

echo
if ((STATUS == 0)); then
  echo "bench-compare: PASS: head is not worse than base by more than ${THRESHOLD}% (p < $ALPHA); results in $OUT" | tee -a "$OUT/summary.txt"
else
  echo "bench-compare: FAIL: head is worse than base by more than ${THRESHOLD}% (p < $ALPHA); results in $OUT" | tee -a "$OUT/summary.txt"
fi
exit "$STATUS"
