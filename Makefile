# Petrel build, test and run targets. Everything a target needs comes from the Go module proxy.
GO      ?= go
BIN     := bin
CMDS    := petrel-namesrv petrel-broker petrelctl petrel-bench
FUZZTIME ?= 20000x

.PHONY: all build test test-norace fuzz run bench verify clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

# test: the README's test command; CI (.ci/run) runs exactly this.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
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

# run: the main job. Builds, starts an embedded NameServer and broker on loopback (data in a
# temporary directory) and replays every loghub line through it with end-to-end verification.
run: build
	./$(BIN)/petrel-bench --payload-dir bench/testdata/loghub --verify

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

verify:
	@test -z "$$(gofmt -l .)" || (gofmt -l .; exit 1)
	$(GO) vet ./...
	$(GO) mod tidy -diff

clean:
	rm -rf $(BIN)
