//go:build !linux

package smcloop

// smcdAvailable reports whether SMC-D can work in this build. Off Linux (no memfd, no
// eventfd) it cannot: Dial and Listen speak no CLC and every connection is plain TCP
// with reason NOSMCDEV, as a kernel SMC socket on a host without an SMC device falls
// back (smc_connect_decline_fallback with SMC_CLC_DECL_NOSMCDEV).
const smcdAvailable = false
