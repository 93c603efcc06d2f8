// Package ism emulates an ISM (Internal Shared Memory) device in user space, modelled on
// the Linux loopback-ism device (drivers/dibs/dibs_loopback.c, formerly
// net/smc/smc_loopback.c).
//
// Every process that speaks SMC-D owns one Device. A device has a random 128-bit GID (a
// 64-bit GID plus a 64-bit extension, as Emulated-ISM devices carry) and the reserved CHID
// 0xFFFF. It registers DMBs (Direct Memory Buffers): memfd-backed shared regions of
// 16 KiB << c bytes (c ≤ 6, so at most 1 MiB), each with a random 64-bit token and two
// eventfd doorbells, one rung when data (or a close flag) arrives and one rung when
// consumed space is given back.
//
// Devices on the same host and in the same network namespace reach each other through an
// abstract unix socket named after the GID ("@smcloop-ism-<gid>"); abstract names are
// scoped to the network namespace exactly as ISM reachability is. Through that socket a
// peer device attaches a DMB by token: the owner checks SO_PEERCRED (same user, or root),
// then passes the memfd and the doorbells with SCM_RIGHTS. The attacher maps the memfd
// (no-copy: it writes straight into the owner's buffer) and rings the doorbells.
// QueryRemoteGID is the reachability probe.
//
// Nothing survives the processes: a memfd lives only as long as some fd or mapping of it,
// so DMB memory disappears when the last process holding it exits, however it exits.
package ism
