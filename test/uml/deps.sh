#!/bin/bash
# deps.sh installs what the UML test rig and the SMC-R verbs binding need on a Debian host:
# the tools build-kernel.sh uses to build the User-Mode Linux kernel (flex, bison, bc,
# libelf-dev, libssl-dev, the compiler, make, xz), rdma-core's libibverbs with its headers
# and the rxe provider (libibverbs-dev, ibverbs-providers), ibverbs-utils (ibv_devices,
# ibv_rc_pingpong, which the smoke run uses), rdma-core and iproute2 (the `rdma` and `ip`
# commands the instances' init runs).
#
# Idempotent and quiet: when every package is installed it prints nothing, touches nothing
# and does not run apt-get. Needs root (or sudo) only when something is missing.
#
# Usage: test/uml/deps.sh
set -euo pipefail

pkgs=(
	build-essential flex bison bc libelf-dev libssl-dev xz-utils
	libibverbs-dev ibverbs-providers ibverbs-utils rdma-core iproute2
)

missing=()
for p in "${pkgs[@]}"; do
	if [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" != installed ]; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
	cat "$log" >&2
	echo "deps.sh: installing ${missing[*]} failed" >&2
	exit 1
fi
