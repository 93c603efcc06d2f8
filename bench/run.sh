#!/bin/sh
# Builds, vets and smoke-tests the comparison module (bench/), which depends on
# shmipc-go; the smcloop module itself never does. Run from anywhere:
#
#	bench/run.sh           build, vet, and the module's tests (two processes per point)
#	bench/run.sh -quick    build and vet only
set -eu
cd "$(dirname "$0")"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "gofmt needed: $unformatted" >&2
	exit 1
fi
go build -o /dev/null .  # the module has one package; no binary left behind
go vet ./...
if [ "${1:-}" = "-quick" ]; then
	exit 0
fi
# Not under the race detector: shmipc-go v0.2.0 itself races (a Stream's Read against
# its dispatcher) when a session closes; the harness and smcloop's transports are
# race-tested in the smcloop module.
go test -count=1 ./...
# One short run of the CLI itself, tables on stdout.
go run . bench -t shmipc,shmipc-zc,unix --lat-sizes 14 --bw-sizes 64K --duration 50ms --warmup 10ms >/dev/null
