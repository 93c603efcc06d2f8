// Package ism emulates an ISM (Internal Shared Memory) device in user space, modelled on
// the Linux loopback-ism device (drivers/dibs/dibs_loopback.c, formerly
// net/smc/smc_loopback.c).
//
// Every process that speaks SMC-D owns one Device. A device has a random 128-bit GID (a
// 64-bit GID plus a 64-bit extension, as Emulated-ISM devices carry) and the reserved CHID
// 0xFFFF. It registers DMBs (Direct Memory Buffers) of 16 KiB << c bytes (c ≤ 6, so at
// most 1 MiB), each with a random 64-bit token, an index on the device and two doorbells:
// Data, rung when data (or a close flag) arrives, and Space, rung when consumed space is
// given back. A DMB's memory is a slot of a slab (slab.go): a sealed memfd holding 64
// DMBs of one size registered for one peer device and one pool (RegisterDMBPool; a link
// group registers its DMBs in its own pool), so a peer that maps a slab reaches only
// DMBs issued to it. A doorbell is a Bell (bell.go), local to the process and holding no
// descriptor.
//
// Devices on the same host and in the same network namespace reach each other through an
// abstract unix socket named after the GID ("@smcloop-ism-<gid>"); abstract names are
// scoped to the network namespace exactly as ISM reachability is. Through that socket a
// peer device attaches a DMB by token (attach.go). The owner serves only trusted
// processes (SO_PEERCRED: the same uid, root, or a uid of SMCLOOP_PEER_UIDS; see
// internal/peercred), believes the sender GID a connection claims only if that process
// listens on the GID's name (auth.go), and hands a DMB registered for a peer device to
// that device alone. An attach reply passes the slab's memfd with SCM_RIGHTS and the
// DMB's offset in it; the attacher maps the DMB's span (no-copy: it writes straight into
// the owner's buffer) and closes the descriptor. The first attach over a device
// connection also passes that connection's signal channel (signal.go): a shared bitmap
// (a sealed memfd) and one end of a stream socket pair. The attacher rings a DMB's
// doorbells by setting its bits in the bitmap and sending a byte on the socket; the
// owner's dispatcher for that peer device reads the other end and rings the DMB's Bells.
// QueryRemoteGID is the reachability probe.
//
// Nothing survives the processes: a memfd lives only as long as some fd or mapping of it,
// so DMB memory disappears when the last process holding it exits, however it exits.
//
// # Platforms
//
// The device needs Linux: memfd seals, SO_PEERCRED, epoll and abstract unix sockets. Its
// system calls are in sys_linux.go; on other systems the package builds with the same
// API and Open returns ErrUnsupported (matching errors.ErrUnsupported), so there is no
// device and an SMC-D user falls back to TCP, as the kernel does without an ISM device.
package ism
