# The targets people and CI share. `make test` is the whole suite (what .ci/run runs).
GO      ?= go
PKGS    := ./...
# FUZZTIME, if set (e.g. 30s or 1000000x), replaces every target's smoke budget.
FUZZTIME ?=
# staticcheck, pinned: `go run` fetches this version through the module proxy once and
# caches its build, and it stays out of go.mod.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# The systems the module must build on besides Linux: darwin is vetted (tests included),
# windows built. Where SMC-D cannot work, Dial and Listen are plain TCP.
CROSS_VET_GOOS   ?= darwin
CROSS_BUILD_GOOS ?= windows
# The modules of this repository besides the root one, each with its own go.mod.
SUBMODULES := bench examples/grpc

.PHONY: all build test unit race stream load soak fuzz-smoke bench-smoke bench-module examples bench lint vet staticcheck cross tidy-check clean uml-kernel uml-smoke uml-race

all: build test

build:
	$(GO) build -o bin/smcloop ./cmd/smcloop

# The whole suite: lint (gofmt, vet, the CGO_ENABLED=0 build, staticcheck, go.mod tidiness
# of every module, the darwin and windows builds), every package under the race detector
# (the short variants of the long cross-process tests), the 1 GiB two-process stream and
# 10,000 concurrent SMC-D connections between two processes without the race detector, a
# short fuzz of every fuzz target, one iteration of every Go benchmark, the comparison
# module (bench/, with shmipc-go) and every example, each run once.
test: lint race uml-race stream load fuzz-smoke bench-smoke bench-module examples

# The tests that boot UML instances (named ...InUML) run in uml-race, after the others:
# beside the race-detector run of every package on 2 vCPUs, the instances lost enough of
# their network's frames to stall soft-RoCE. Without a built UML kernel they skip.
UML_TESTS := 'InUML$$'
UML_PKGS  := . ./cmd/smcloop ./internal/verbs

race:
	$(GO) test -race -short -count=1 -timeout 15m -skip $(UML_TESTS) $(PKGS)

uml-race:
	$(GO) test -race -short -count=1 -timeout 15m -run $(UML_TESTS) $(UML_PKGS)

unit:
	$(GO) test -count=1 $(PKGS)

stream:
	$(GO) test -count=1 -timeout 10m -run 'TestCrossProcessStream1GiB' ./test

load:
	$(GO) test -count=1 -timeout 10m -v -run 'TestLoad10kConns' ./test

# Not part of test: 100 connections with random sizes and settings for SOAK (10m), checksums
# on every stream, RSS sampled (the README's soak figures).
SOAK ?= 10m
soak:
	SMCLOOP_TEST_SOAK=$(SOAK) $(GO) test -count=1 -timeout 0 -v -run '^TestSoak$$' ./test

fuzz-smoke:
	@set -e; for spec in $$($(GO) run ./internal/fuzzlist); do \
		pkg=$${spec%%:*}; rest=$${spec#*:}; fn=$${rest%%:*}; budget=$${rest##*:}x; \
		budget=$(if $(FUZZTIME),$(FUZZTIME),$$budget); \
		echo "fuzz $$pkg $$fn ($$budget)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $$budget $$pkg > /tmp/smcloop-fuzz.log 2>&1 || { cat /tmp/smcloop-fuzz.log; exit 1; }; \
	done

bench-smoke:
	$(GO) test -run '^$$' -bench . -benchtime 1x $(PKGS)

# The comparison module (its own go.mod: shmipc-go stays out of the library's): build,
# vet, its tests under the race detector and a short run.
bench-module:
	bench/run.sh

# Every example in its one-command mode, the gRPC module's tests included.
examples:
	examples/run.sh

# The comparison the README quotes: smcloop vs Go TCP vs Go unix sockets, separate processes.
bench: build
	./bin/smcloop bench

lint: vet staticcheck tidy-check cross

# gofmt, go vet and the CGO_ENABLED=0 build (the verbs binding's stub).
vet:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	CGO_ENABLED=0 $(GO) build $(PKGS)

staticcheck:
	$(GO) run $(STATICCHECK) $(PKGS)

# Every package builds on the other systems: vetted (test files too) for darwin, built for
# windows.
cross:
	GOOS=$(CROSS_VET_GOOS) $(GO) vet $(PKGS)
	GOOS=$(CROSS_BUILD_GOOS) $(GO) build $(PKGS)

# go.mod and go.sum of every module are what `go mod tidy` would write. -diff prints the
# difference and fails without touching the files.
tidy-check:
	$(GO) mod tidy -diff
	@set -e; for m in $(SUBMODULES); do echo "tidy-check $$m"; (cd $$m && $(GO) mod tidy -diff); done

clean:
	rm -rf bin

# The UML rig (test/uml, docs/UML.md): real RDMA verbs on soft-RoCE inside User-Mode Linux.
# uml-kernel installs the rig's packages and builds the kernel once per machine (about 11
# minutes on 2 cores), cached under ${UMLTEST_CACHE:-$HOME/.cache/smcloop/uml}.
# uml-smoke boots two instances: ibv_rc_pingpong between them, then a Go test's round trip.
uml-kernel:
	test/uml/deps.sh
	test/uml/build-kernel.sh

uml-smoke: uml-kernel
	test/uml/smoke.sh
