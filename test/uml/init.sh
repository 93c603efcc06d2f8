#!/bin/sh
# init.sh is PID 1 of a UML instance that run.sh boots on the host's root filesystem
# (hostfs, read-only). It mounts proc, sys, devtmpfs, a fresh tmpfs on /tmp and /run,
# cgroup2 on /sys/fs/cgroup and bpffs on /sys/fs/bpf, and the run's directory read-write at
# its host path; brings up eth0 (the vector NIC that joins the two instances, or a dummy NIC
# when there is only one) with the address from the kernel command line and the soft-RoCE
# device rxe0 on it; runs the instance's job, records the job's exit status and powers off.
#
# Kernel command line (set by run.sh): umltest.dir=RUNDIR umltest.index=N umltest.ip=10.0.0.N
# The job is RUNDIR/N/job.sh (written by run.sh; it sets the UMLTEST_* environment and
# runs the command). Its stdout and stderr are the console, which is the host-side
# RUNDIR/N/console. Its exit status goes to RUNDIR/N/status; the line
# "umltest: exit N" on the console says the same when the directory could not be mounted.
PATH=/usr/local/go/bin:/usr/bin:/usr/sbin:/bin:/sbin
export PATH
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
# cgroup2 and bpffs, for eBPF programs (sock_ops attaches to a cgroup).
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mount -t bpf bpf /sys/fs/bpf 2>/dev/null

arg() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" /proc/cmdline; }
dir=$(arg umltest.dir)
index=$(arg umltest.index)
ip=$(arg umltest.ip)

fail() {
	echo "umltest: setup: $*"
	echo "umltest: exit 125"
	poweroff -f -d
}
[ -n "$dir" ] && [ -n "$index" ] && [ -n "$ip" ] || fail "umltest.dir, umltest.index or umltest.ip missing from the kernel command line"
mount -t hostfs -o "$dir" hostfs "$dir" || fail "cannot mount $dir read-write"

ip link set lo up
if ip link show vec0 >/dev/null 2>&1; then
	ip link set vec0 name eth0
else
	ip link add eth0 type dummy
fi
ip addr add "$ip/24" dev eth0 || fail "ip addr add $ip/24 dev eth0"
ip link set eth0 up || fail "ip link set eth0 up"
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 type rxe netdev eth0"

up() { cut -d' ' -f1 /proc/uptime; }
booted=$(up)
echo "umltest: booted in $booted s"
cd /tmp
bash "$dir/$index/job.sh" </dev/null 2>&1
rc=$?
echo "umltest: command ran from $booted s to $(up) s of uptime"
echo "$rc" >"$dir/$index/status.tmp" && mv "$dir/$index/status.tmp" "$dir/$index/status"
echo "umltest: exit $rc"
sync
poweroff -f -d
