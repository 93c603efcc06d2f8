#!/usr/bin/env bash
# Builds and runs every example in its one-command mode (server and client, two processes),
# then the gRPC examples module's own checks. Fails on the first error; works from any
# directory.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT

# run NAME SECONDS COMMAND...: runs the command under a timeout and names what failed.
run() {
	local name=$1 limit=$2
	shift 2
	echo "== $name"
	local rc=0
	timeout "$limit" "$@" || rc=$?
	if [ "$rc" -eq 124 ]; then
		echo "FAIL: $name: timed out after ${limit}s" >&2
		exit 1
	elif [ "$rc" -ne 0 ]; then
		echo "FAIL: $name: exit status $rc" >&2
		exit 1
	fi
}

examples=(echo http fileserver unix)
for ex in "${examples[@]}"; do
	go build -o "$bin/$ex" "./examples/$ex"
done
for ex in "${examples[@]}"; do
	run "examples/$ex" 120 "$bin/$ex"
done
run "examples/grpc (ci.sh)" 600 ./examples/grpc/ci.sh
echo "== all examples passed"
