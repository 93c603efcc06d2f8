#!/usr/bin/env bash
# Builds, vets and tests the gRPC examples module (its own go.mod, so that grpc-go stays
# out of the library's). The tests run the examples and a tiny benchmark in two processes.
set -euo pipefail
cd "$(dirname "$0")"
# The library comes from ../.. by a replace directive: let go add whatever its go.mod
# newly requires, rather than fail on a go.sum that predates it.
export GOFLAGS="${GOFLAGS:-} -mod=mod"

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "gofmt: not formatted:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go build ./...
go vet ./...
go test -count=1 -timeout 5m ./...
