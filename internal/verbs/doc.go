// Package verbs is the RDMA verbs API the SMC-R backend uses: devices and their ports
// and GIDs, protection domains, memory regions over mapped memory, completion queues
// whose completion channel rides the Go runtime poller, and reliable-connected queue
// pairs with the INIT → RTR → RTS walk RoCE v2 needs (a global route, is_global = 1).
//
// It covers what net/smc does with verbs (smc_ib.c, smc_wr.c, smc_core.c, smc_llc.c):
// SEND for the 44-byte CDC and LLC messages (inline where the device allows), RDMA
// WRITE for data into the peer's RMB, RECV for incoming CDC and LLC messages, and
// completions polled from a send and a receive CQ. Nothing in net/smc posts immediate
// data, RDMA READ or atomics, so they are not here; nor are memory windows and fast
// registration (the kernel's IB_WR_REG_MR), since user space registers with ibv_reg_mr.
//
// Two implementations sit behind the interfaces: the libibverbs binding (cgo, built
// only with the rdma build tag on Linux; see docs/VERBS.md) returned by [System], and a
// pure-Go fake fabric with fault injection in package verbstest. Without the tag,
// [System] has no device: Devices is empty and Open fails with an error matching
// [ErrNoDevice], so SMC-R declines with the kernel's NOSMCRDEV.
//
// Every call's failure is an *[Error] naming the verbs function and wrapping the errno
// (errors.Is(err, syscall.EAGAIN) works); a failed work request is a [WC] whose Err is
// a *[CompletionError].
//
// Memory regions cover [Mem]: anonymous mappings outside the Go heap, so the address
// a device (or a peer's RDMA WRITE) writes to never moves and no C code keeps a Go
// pointer.
package verbs
