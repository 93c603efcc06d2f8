#!/bin/bash
# smoke.sh checks the UML rig end to end (make uml-smoke): two instances run
# ibv_rc_pingpong over rxe0 (RC queue pairs, RoCE v2 GID index 1), the server in instance 1
# and the client in instance 2; then the Go round trip, umltest's TestTwoInstances, builds
# its test binary on the host and runs it in two instances. Fails if either does, or if the
# Go test skipped (no kernel).
#
# Usage: test/uml/smoke.sh     (needs the kernel: make uml-kernel)
set -euo pipefail

# One brace group, read whole before it runs, so an edit to this file mid-run changes nothing.
{
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/../.."

# The client starts at about the same time as the server, so it retries while the server's
# TCP port (18515) is not listening yet; ibv_rc_pingpong exits 1 on a refused connection.
client='for i in $(seq 100); do
	out=$(ibv_rc_pingpong -d rxe0 -g 1 -n 100 "$UMLTEST_PEER" 2>&1) && { echo "$out"; exit 0; }
	case $out in *"Couldn'"'"'t connect"*) sleep 0.1 ;; *) echo "$out"; exit 1 ;; esac
done
echo "$out"; exit 1'
echo "== ibv_rc_pingpong between two UML instances over rxe0"
"$here/run.sh" -t 120 -c 'ibv_devices && ibv_rc_pingpong -d rxe0 -g 1 -n 100' -c "$client"

echo "== Go round trip (umltest TestTwoInstances) in two UML instances"
out=$(go test -count=1 -v -run '^TestTwoInstances$' ./test/uml/umltest 2>&1) || { echo "$out"; exit 1; }
echo "$out"
grep -q -- '^--- PASS: TestTwoInstances' <<<"$out" || { echo "smoke.sh: TestTwoInstances did not pass (skipped?)" >&2; exit 1; }
exit
}
