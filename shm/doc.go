// Package shm provides the operating-system pieces that an SMC-D link is built
// from: shared memory regions, doorbells, and the passing of both between
// processes over unix sockets.
//
// # Regions
//
// A [Region] is a memfd mapped MAP_SHARED. [NewRegion] creates the memfd with
// MFD_CLOEXEC|MFD_ALLOW_SEALING, sizes it, and seals it with
// F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL before mapping it, so its size can never
// change again. That matters because a peer that could shrink a shared file
// would turn every access past the new end into a SIGBUS in the other process.
//
// A region travels to a peer as its memfd ([Region.Fd]) over a unix socket
// ([SendFds]). The receiver hands the fd to [MapRegion], which refuses anything
// that is not a memfd sealed against shrinking or whose size is not the
// expected one, maps it, and closes the fd at once: the mapping alone keeps the
// memory alive, so a received region costs no descriptor. The memory is freed
// by the kernel when the last fd and the last mapping are gone, in whichever
// process; nothing is ever left behind in /dev/shm.
//
// [Region.Bytes] is plain memory shared with another process. The layout of
// what lives in it, and the atomic access to its control words, belong to the
// packages that define those layouts; this package only guarantees that the
// mapping is page aligned (and so 8-byte aligned) and that its size is fixed.
//
// # Doorbells
//
// A [Doorbell] is a connected AF_UNIX SOCK_SEQPACKET socket pair. Its owner keeps
// one end to itself and waits on it through the Go runtime poller: a goroutine
// blocked in [Doorbell.Wait] holds no OS thread, honours [Doorbell.SetDeadline],
// and is released by [Doorbell.Close]. The other end ([Doorbell.Fd]) goes to
// peers, who wrap it with [DoorbellFromFd] and ring by sending one message with
// MSG_DONTWAIT; the owner rings its own doorbell without a system call, by
// moving the read deadline of its end into the past. [Doorbell.Wait] and
// [Doorbell.TryConsume] take every queued ring at once, so any number of rings
// between two waits coalesce into one wake-up. Ring, Wait and TryConsume do not
// allocate.
//
// No call can block whatever a peer does to a descriptor it shares with us: a
// descriptor passed with SCM_RIGHTS shares its open file description, and so its
// O_NONBLOCK flag, with the peer, so every send and receive asks for
// MSG_DONTWAIT itself, and the owner never makes a system call on the end peers
// hold (an eventfd would have to be written through the shared description: a
// peer that made it blocking and saturated its counter would freeze the
// writer). See doorbell_linux.go for the details.
//
// Doorbells carry no data. The rule for when a producer needs to ring at all
// (the sleeper announces itself in shared memory, re-checks, then waits) is
// the business of the layer that owns the shared cursors.
//
// # Passing descriptors
//
// [SendFds] sends a non-empty message with descriptors attached as one
// SCM_RIGHTS control message; [RecvFds] receives one such message, with
// MSG_CMSG_CLOEXEC so no received descriptor leaks into a child process. A
// message that carried more descriptors than the caller asked for is refused
// and every descriptor it brought is closed. Both work on SOCK_STREAM and
// SOCK_SEQPACKET unix sockets. [ReadFds] is the primitive under RecvFds for a
// protocol with rules of its own: it reports the message, its descriptors and
// the kernel's truncation flags without judging them. [PeerCred] reports
// SO_PEERCRED, the pid, uid and gid of the process at the other end, for
// deciding whether to trust it before any descriptor is exchanged.
//
// [OpenFDs] and [CountMappings] count this process's descriptors and
// mappings, for tests that prove nothing leaks.
//
// # Platforms
//
// Everything here needs Linux (memfd, seals, recvmmsg, SO_PEERCRED). On other
// systems the package builds, and every constructor returns [ErrUnsupported].
package shm
