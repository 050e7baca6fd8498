# Petrel build, test and run targets. Everything a target needs comes from the Go module proxy.
GO      ?= go
BIN     := bin
CMDS    := petrel-namesrv petrel-broker petrelctl petrel-bench
FUZZTIME ?= 20000x

.PHONY: all build test test-norace fuzz run bench bench-micro bench-compare chaos verify clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

# test: the README's test command; CI (.ci/run) runs exactly this.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	PETREL_WRITE_THROUGH_MAPPING=1 $(GO) test -race -count=1 -timeout 5m ./commitlog
	$(GO) -C cmd/benchgate vet ./...
	$(GO) -C cmd/benchgate test -count=1 ./...
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME)

test-norace:
	$(GO) test -count=1 ./...

# fuzz: a short pass over every fuzz target (go test -fuzz takes one target at a time).
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# run: the main job. Builds, starts an embedded NameServer and broker group (a SYNC_MASTER and two
# slaves) on loopback (data in a temporary directory) and replays every loghub line through it
# with end-to-end verification.
run: build
	./$(BIN)/petrel-bench --payload-dir bench/testdata/loghub --verify

# bench: the standard matrix (scripts/benchmarks.sh: machine baselines, Petrel single broker and
# replication, the same workloads on NATS JetStream R1 / R1 sync / R3, Go micro-benchmarks), then
# charts and the goal ratios in <OUT>/summary.md. DURATION=20s per run, SECTIONS="single replication
# nats micro", OUT=bench-results/<timestamp>, WRITE_THROUGH_MAPPING=1: every Petrel broker with
# commitLogWriteThroughFile=false (make exports command-line variables).
bench:
	bash scripts/benchmarks.sh $(OUT)

# bench-micro: only the Go micro-benchmarks of every package.
bench-micro:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# bench-compare: the regression gate (BENCHMARKS.md "Regression gate"). Builds BASE in a temporary
# git worktree and this working tree as HEAD, runs a short petrel-bench workload and the commitlog
# and protocol micro-benchmarks on both alternately, prints benchstat tables and exits 1 when HEAD
# is worse by more than THRESHOLD percent (default 5) with p < 0.05. Settings such as RUNS,
# THRESHOLD, HEAD_TAGS=petrelslow, MICRO=0 are passed on the command line (make exports them).
bench-compare:
	@test -n "$(BASE)" || { echo "usage: make bench-compare BASE=<git rev> [RUNS=6] [THRESHOLD=5] [HEAD_TAGS=...]" >&2; exit 2; }
	GO=$(GO) bash scripts/bench-compare.sh '$(BASE)'

# chaos: fault injection (cmd/petrel-chaos, README "Fault injection"; needs root): three NameServers, a
# Raft-elected group and a static group run as processes in network namespaces under
# petrel-bench --verify; CYCLES faults from SEED (0: random, printed) with MIX's weights, each
# held for a time in HOLD, healed, and the cluster's recovery awaited; then a one-line verdict
# (exit 1 on FAIL). SEGMENT is every broker's commit-log segment size; KEEP=1 keeps the run
# directory with the stores (a FAIL keeps its logs anyway); WRITE_THROUGH_MAPPING=1 sets every
# broker's commitLogWriteThroughFile=false (every append copied into the commit log's mapping).
CYCLES  ?= 100
SEED    ?= 0
SEGMENT ?= 1MiB
MIX     ?= stop-partition-heavy
HOLD    ?= 1s-6s
KEEP    ?=
chaos: build
	./$(BIN)/petrel-chaos --bin $(BIN) --cycles='$(CYCLES)' --seed='$(SEED)' --segment='$(SEGMENT)' --mix='$(MIX)' --hold='$(HOLD)' $(if $(filter 1 yes true,$(WRITE_THROUGH_MAPPING)),--write-through-mapping) $(if $(filter 1 yes true,$(KEEP)),--keep)

verify:
	@test -z "$$(gofmt -l .)" || (gofmt -l .; exit 1)
	$(GO) vet ./...
	$(GO) mod tidy -diff

clean:
	rm -rf $(BIN)
