#!/bin/bash
# run.sh boots one or two User-Mode Linux instances with soft-RoCE and runs a command in
# each: the rig the SMC-R tests run real verbs on.
#
# Each instance boots the kernel test/uml/build-kernel.sh built on the host's root
# filesystem, read-only (hostfs), so host binaries run inside unchanged. Instance 1 is
# 10.0.0.1, instance 2 is 10.0.0.2, both /24 on eth0, joined by the vector NIC over
# L2TPv3/UDP on host 127.0.0.1; each has the verbs device rxe0 on eth0 (RoCE v2 GIDs,
# GID index 1 is the IPv4 one). A single instance gets a dummy eth0 with rxe0 on it.
#
# The command runs with a clean environment plus:
#   UMLTEST=1                  the process runs inside a UML instance of this rig
#   UMLTEST_ROLE               server (instance 1) or client (instance 2)
#   UMLTEST_INDEX              1 or 2
#   UMLTEST_INSTANCES          how many instances the run has (1 or 2)
#   UMLTEST_ADDR, UMLTEST_PEER this instance's address and the other's (empty with one)
#   UMLTEST_OUT                a writable directory of this instance, kept with -o
#   UMLTEST_BIN                the run's copy of the files given with -f
#   HOME=/tmp                  (/tmp is a fresh tmpfs in each instance)
# and the working directory is the caller's (-C to choose), or UMLTEST_OUT when that is
# under /tmp or /run, which the instance does not see.
#
# Binaries must not be under /tmp (each instance mounts a fresh tmpfs there): run.sh copies
# the command's program (the -- form, when it names a file) and every -f file into the
# run's directory, ${UMLTEST_CACHE:-$HOME/.cache/smcloop/uml}/run-XXXXXX, and runs the
# copies. Each run has its own directory, umids and UDP ports (claimed under
# $cache/ports), so runs at once do not collide; every exit path (success, failure,
# timeout, SIGINT, SIGTERM) kills the instances and removes the run's directory and claims.
#
# Usage:
#   run.sh [options] -- CMD [ARG...]         CMD in every instance
#   run.sh [options] -c 'SHELL' [-c 'SHELL'] one bash command line per instance (the
#                                             first -c is instance 1, the second instance 2)
# Options:
#   -n N        instances, 1 or 2 (default: the number of -c, else 2)
#   -t SECONDS  hard timeout of the whole run (default 300); instances still running are killed
#   -m MEM      memory of each instance (default 512M)
#   -e VAR=VAL  extra environment for the command (repeatable)
#   -f FILE     copy FILE into $UMLTEST_BIN (repeatable)
#   -C DIR      working directory of the command
#   -o DIR      keep each instance's directory as DIR/1 and DIR/2: console (the instance's
#               console: kernel messages and the command's stdout and stderr), status (the
#               command's exit status, absent if it never finished) and whatever the
#               command wrote to $UMLTEST_OUT. DIR must not exist or be empty.
#   -q          do not print the consoles (by default each line is printed on stdout,
#               prefixed [server] or [client], after the run)
#   -k KERNEL   the UML kernel (default: build-kernel.sh --cached)
#
# Exit status: 0 when every command exited 0; 1 when one failed, timed out or its instance
# stopped before it finished (stderr says which); 2 on a usage error; 3 when no kernel is
# built (run make uml-kernel).
set -euo pipefail

# One brace group, read whole before it runs, so an edit to this file mid-run changes nothing.
{

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${UMLTEST_CACHE:-$HOME/.cache/smcloop/uml}
usage() {
	sed -n '/^# Usage:/,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}
log() { echo "run.sh: $*" >&2; }
# The instances mount a fresh tmpfs on /tmp, so a run directory there vanishes inside them.
case $(mkdir -p "$cache" && cd "$cache" && pwd -P)/ in
/tmp/*) log "UMLTEST_CACHE=$cache is under /tmp, which the instances replace with an empty tmpfs; set it elsewhere (the default is \$HOME/.cache/smcloop/uml)"; exit 2 ;;
esac

n= timeout=300 mem=512M outdir= quiet= kernel= cwd=$PWD
envs=() files=() cmds=()
while getopts ":n:t:m:e:f:C:o:qk:c:h" opt; do
	case $opt in
	n) n=$OPTARG ;;
	t) timeout=$OPTARG ;;
	m) mem=$OPTARG ;;
	e) envs+=("$OPTARG") ;;
	f) files+=("$OPTARG") ;;
	C) cwd=$OPTARG ;;
	o) outdir=$OPTARG ;;
	q) quiet=1 ;;
	k) kernel=$OPTARG ;;
	c) cmds+=("$OPTARG") ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
argv=("$@")

if [ ${#cmds[@]} -gt 0 ] && [ ${#argv[@]} -gt 0 ]; then log "give -c or -- CMD, not both"; usage; fi
if [ ${#cmds[@]} -eq 0 ] && [ ${#argv[@]} -eq 0 ]; then log "no command"; usage; fi
[ -n "$n" ] || n=$((${#cmds[@]} > 0 ? ${#cmds[@]} : 2))
[ "$n" = 1 ] || [ "$n" = 2 ] || { log "-n must be 1 or 2, not $n"; usage; }
[ ${#cmds[@]} -eq 0 ] || [ ${#cmds[@]} -eq "$n" ] || { log "-n $n with ${#cmds[@]} -c commands"; usage; }
[[ $timeout =~ ^[1-9][0-9]*$ ]] || { log "-t must be a whole number of seconds, not $timeout"; usage; }
for e in ${envs[@]+"${envs[@]}"}; do
	[[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { log "-e wants VAR=VAL, not $e"; usage; }
done
if [ -n "$outdir" ] && [ -e "$outdir" ] && [ -n "$(ls -A "$outdir")" ]; then
	log "-o $outdir exists and is not empty"
	exit 2
fi

if [ -z "$kernel" ]; then
	kernel=$("$here/build-kernel.sh" --cached) || {
		log "no UML kernel built; run make uml-kernel (test/uml/build-kernel.sh)"
		exit 3
	}
fi
[ -x "$kernel" ] || { log "kernel $kernel is not an executable file"; exit 3; }

mkdir -p "$cache/ports"
run=$(mktemp -d "$cache/run-XXXXXX")
pids=()
claims=()
# An instance is its kernel process, which makes itself a session and process group leader
# early in boot, and the helper and user-space processes it forks into that group; killing
# the group (and the process, for the moment before it leads one) ends all of them.
killall_instances() {
	for p in ${pids[@]+"${pids[@]}"}; do kill -KILL -- "-$p" "$p" 2>/dev/null || true; done
}
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	[ -z "${watchdog:-}" ] || kill "$watchdog" 2>/dev/null || true
	killall_instances
	for p in ${pids[@]+"${pids[@]}"}; do wait "$p" 2>/dev/null || true; done
	for c in ${claims[@]+"${claims[@]}"}; do rm -rf "$c"; done
	if [ -n "$outdir" ] && [ -d "$run/1" ]; then
		mkdir -p "$outdir"
		for i in 1 2; do [ -d "$run/$i" ] && mv "$run/$i" "$outdir/$i"; done
	fi
	rm -rf "$run"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Two UDP ports, claimed against other runs by mkdir (atomic) and checked against the rest
# of the host with ss. A claim whose owner died is taken over.
claim() {
	local p=$1 d=$cache/ports/$1
	if ! mkdir "$d" 2>/dev/null; then
		local owner
		owner=$(cat "$d/pid" 2>/dev/null || true)
		# No pid yet: its owner is between mkdir and writing it.
		[ -z "$owner" ] && return 1
		kill -0 "$owner" 2>/dev/null && return 1
		rm -rf "$d"
		mkdir "$d" 2>/dev/null || return 1
	fi
	echo $$ >"$d/pid"
	claims+=("$d")
	if [ -n "$(ss -Hunl "sport = :$p")" ]; then
		rm -rf "$d"
		unset 'claims[-1]'
		return 1
	fi
}
port=
for _ in $(seq 100); do
	p=$((20000 + 2 * (RANDOM % 20000)))
	if claim "$p"; then
		if claim $((p + 1)); then port=$p; break; fi
		rm -rf "$cache/ports/$p"
		unset 'claims[-1]'
	fi
done
[ -n "$port" ] || { log "no free pair of UDP ports found"; exit 1; }

mkdir "$run/bin"
for f in ${files[@]+"${files[@]}"}; do cp -- "$f" "$run/bin/"; done
if [ ${#argv[@]} -gt 0 ] && [[ ${argv[0]} == */* ]] && [ -f "${argv[0]}" ]; then
	cp -- "${argv[0]}" "$run/bin/"
	argv[0]=$run/bin/$(basename -- "${argv[0]}")
fi
cp "$here/init.sh" "$run/init.sh"
chmod +x "$run/init.sh"

id=${run##*/run-}
roles=(server client)
start=$(date +%s%N)
for i in $(seq "$n"); do
	d=$run/$i
	mkdir -p "$d"
	addr=10.0.0.$i
	peer=
	[ "$n" = 2 ] && peer=10.0.0.$((3 - i))
	wd=$cwd
	case $wd in /tmp | /tmp/* | /run | /run/*) wd=$d ;; esac
	{
		echo "export UMLTEST=1 UMLTEST_ROLE=${roles[i - 1]} UMLTEST_INDEX=$i UMLTEST_INSTANCES=$n"
		echo "export UMLTEST_ADDR=$addr UMLTEST_PEER=$peer UMLTEST_OUT=$(printf %q "$d") UMLTEST_BIN=$(printf %q "$run/bin") HOME=/tmp"
		for e in ${envs[@]+"${envs[@]}"}; do echo "export $(printf %q "$e")"; done
		echo "cd $(printf %q "$wd") || exit 126"
		if [ ${#cmds[@]} -gt 0 ]; then
			echo "${cmds[i - 1]}"
		else
			printf 'exec'
			printf ' %q' "${argv[@]}"
			echo
		fi
	} >"$d/job.sh"
	net=
	if [ "$n" = 2 ]; then
		src=$((port + i - 1)) dst=$((port + 2 - i))
		net="vec0:transport=l2tpv3,udp=1,src=127.0.0.1,dst=127.0.0.1,srcport=$src,dstport=$dst,rx_session=$i$i,tx_session=$((3 - i))$((3 - i)),mac=02:00:0a:00:00:0$i"
	fi
	# The hostfs root is read-only; uml_dir keeps the instance's pid and mconsole socket in
	# the run's directory.
	# shellcheck disable=SC2086
	"$kernel" umid="smcloop-$id-$i" uml_dir="$run" mem="$mem" \
		rootfstype=hostfs rootflags=/ ro init="$run/init.sh" con=null con0=null,fd:1 quiet \
		umltest.dir="$run" umltest.index="$i" umltest.ip="$addr" $net \
		</dev/null >"$d/console" 2>&1 &
	pids+=($!)
done
# The hard timeout: a timer that kills every instance still running.
# Its sleep is killed with it and holds none of run.sh's output, so nothing outlives run.sh
# or keeps a caller's pipe open.
(
	trap - EXIT INT
	trap 'kill "$timer" 2>/dev/null; exit 0' TERM
	sleep "$timeout" &
	timer=$!
	wait "$timer"
	: >"$run/timedout"
	killall_instances
) </dev/null >/dev/null 2>&1 &
watchdog=$!

rc=0
for i in $(seq "$n"); do
	st=0
	wait "${pids[i - 1]}" || st=$?
	role=${roles[i - 1]}
	if [ -f "$run/$i/status" ]; then
		s=$(cat "$run/$i/status")
		[ "$s" = 0 ] || { log "$role: exit status $s"; rc=1; }
	elif [ -e "$run/timedout" ]; then
		log "$role: timed out after $timeout s, instance killed"
		rc=1
	else
		log "$role: instance stopped (status $st) before the command finished"
		rc=1
	fi
done
kill "$watchdog" 2>/dev/null || true
wait "$watchdog" 2>/dev/null || true
watchdog=
pids=()
log "$n instance(s), $(( ($(date +%s%N) - start) / 1000000 )) ms from boot to poweroff"
if [ -z "$quiet" ]; then
	for i in $(seq "$n"); do sed "s/\r\$//; s/^/[${roles[i - 1]}] /" "$run/$i/console"; done
fi
exit "$rc"
}
