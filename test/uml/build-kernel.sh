#!/bin/bash
# build-kernel.sh builds the User-Mode Linux kernel the SMC-R tests boot, and caches it.
#
# The kernel is Debian's linux-source-6.12 built for ARCH=um with soft-RoCE (rdma_rxe), user
# verbs (/dev/infiniband/uverbs*), the kernel's SMC (SMC-R, SMC-D loopback-ism, smc_diag),
# hostfs (the instances boot on the host's root filesystem, read-only), the vector NIC (two
# instances joined over L2TPv3/UDP on host loopback), the BPF syscall and cgroup BPF (eBPF
# sock_ops, for the SMC TCP option the kernel's SMC negotiates with), modules off.
# UML_PCI_OVER_VIRTIO is what provides the IOMEM/DMA emulation and PCI that INFINIBAND and
# RDMA_RXE depend on.
#
# Cache: ${UMLTEST_CACHE:-$HOME/.cache/smcloop/uml}/<key>/linux, where <key> is a hash
# of the configuration below (options and build recipe) and the kernel source package's
# version. A rerun with the same key prints the cached path at once; a configuration change
# or a new linux-source-6.12 builds again (about 11 minutes on 2 cores). Concurrent runs for
# one key build once: the others wait on the key's lock. The kernel appears under its final
# name only when complete, next to its .config and build.log.
#
# Needs the packages test/uml/deps.sh installs. apt-get download fetches the source package
# (no root needed for that), so the first run needs the Debian mirror.
#
# Usage: test/uml/build-kernel.sh           prints the kernel's path on stdout, progress on
#                                           stderr; builds it first when it is not cached
#        test/uml/build-kernel.sh --cached  prints the cached kernel's path, or exits 1 with
#                                           nothing on stdout when it is not built (never
#                                           builds, never runs apt-get)
#        UMLTEST_JOBS=N                 parallel make jobs (default: nproc)
set -euo pipefail

# The body is one brace group, read whole before it runs: a build takes minutes, and bash
# reads a script as it goes, so an edit to this file mid-build must not change what runs.
{

cached=
case ${1:-} in
"") ;;
--cached) cached=1 ;;
*)
	echo "usage: $0 [--cached]" >&2
	exit 2
	;;
esac

srcpkg=linux-source-6.12

# The kernel configuration, applied with scripts/config on top of ARCH=um defconfig, and
# the patches applied to the source (xstate.patch: UML on a host with AMX; it needs the
# larger kernel stack). They, the recipe version and the source version are what the cache
# key hashes: change any and the kernel rebuilds.
recipe=3
patches=(xstate.patch)
config=(
	-e VIRTIO_UML -e UML_PCI_OVER_VIRTIO
	-e INFINIBAND -e INFINIBAND_USER_ACCESS -e INFINIBAND_ADDR_TRANS -e RDMA_RXE
	-e SMC -e SMC_DIAG -e SMC_LO
	-e UML_NET -e UML_NET_VECTOR -e DUMMY -e VETH -e NET_NS -e HOSTFS -e DEVTMPFS
	-e UNIX -e INET -e IPV6 -e PACKET -e TMPFS -e CRYPTO_CRC32 -e CRYPTO_CRC32C
	-e BPF_SYSCALL -e CGROUPS -e CGROUP_BPF -e SOCK_CGROUP_DATA
	-d MODULES -d SOUND -d UML_SOUND -d DEBUG_INFO -e DEBUG_INFO_NONE
	--set-val KERNEL_STACK_ORDER 4
)
# Options that must be =y in the final .config (olddefconfig silently drops an option whose
# dependencies are missing).
required=(RDMA_RXE INFINIBAND_USER_ACCESS SMC SMC_LO HOSTFS UML_NET_VECTOR BPF_SYSCALL CGROUP_BPF)

log() { echo "build-kernel.sh: $*" >&2; }

# The source version: what apt would download now. Lists that do not know the package yet
# (a fresh container) are refreshed once.
version() { apt-cache policy "$srcpkg" 2>/dev/null | sed -n 's/^ *Candidate: *//p'; }
ver=$(version)
if { [ -z "$ver" ] || [ "$ver" = "(none)" ]; } && [ -z "$cached" ]; then
	log "apt lists do not know $srcpkg; running apt-get update"
	if [ "$(id -u)" -eq 0 ]; then apt-get update -qq; else sudo apt-get update -qq; fi
	ver=$(version)
fi
if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then
	[ -n "$cached" ] && exit 1
	log "no candidate for $srcpkg in the apt sources"
	exit 1
fi

cache=${UMLTEST_CACHE:-$HOME/.cache/smcloop/uml}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
key=$( {
	printf '%s\n' "recipe=$recipe" "srcpkg=$srcpkg" "version=$ver" "${config[@]}"
	for p in "${patches[@]}"; do cat "$here/$p"; done
} | sha256sum | cut -c1-16)
dir=$cache/$key
if [ -x "$dir/linux" ]; then
	echo "$dir/linux"
	exit 0
fi
[ -z "$cached" ] || exit 1

mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [ -x "$dir/linux" ]; then # built by a concurrent run while this one waited
	echo "$dir/linux"
	exit 0
fi

work=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
buildlog=$dir/build.log
: >"$buildlog"
fail() {
	log "$* (last lines of $buildlog follow)"
	tail -n 40 "$buildlog" >&2
	exit 1
}

start=$(date +%s)
log "building $srcpkg $ver for ARCH=um into $dir (key $key); log in $buildlog"
(cd "$work" && apt-get download "$srcpkg=$ver") >>"$buildlog" 2>&1 || fail "apt-get download $srcpkg=$ver failed"
dpkg-deb -x "$work"/"$srcpkg"_*_all.deb "$work/pkg" >>"$buildlog" 2>&1 || fail "dpkg-deb -x failed"
tar -C "$work" -xf "$work/pkg/usr/src/$srcpkg.tar.xz" >>"$buildlog" 2>&1 || fail "unpacking the source failed"
rm -rf "$work/pkg" "$work"/"$srcpkg"_*_all.deb
src=$work/$srcpkg
for p in "${patches[@]}"; do
	patch -d "$src" -p1 <"$here/$p" >>"$buildlog" 2>&1 || fail "patch $p does not apply"
done
obj=$work/obj
mkdir -p "$obj"
mk() { make -s -C "$src" ARCH=um O="$obj" "$@" >>"$buildlog" 2>&1; }

mk defconfig || fail "make defconfig failed"
"$src"/scripts/config --file "$obj/.config" "${config[@]}" || fail "scripts/config failed"
mk olddefconfig || fail "make olddefconfig failed"
for opt in "${required[@]}"; do
	grep -qx "CONFIG_$opt=y" "$obj/.config" || fail "CONFIG_$opt did not get enabled"
done
grep -qx "CONFIG_KERNEL_STACK_ORDER=4" "$obj/.config" || fail "CONFIG_KERNEL_STACK_ORDER is not 4"
mk -j"${UMLTEST_JOBS:-$(nproc)}" linux || fail "make linux failed"

cp "$obj/.config" "$dir/config"
cp "$obj/linux" "$dir/.linux.tmp"
mv "$dir/.linux.tmp" "$dir/linux"
log "built in $(($(date +%s) - start)) s"
echo "$dir/linux"
exit 0
}
