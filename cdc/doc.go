// Package cdc holds the SMC Connection Data Control (CDC) primitives shared by
// both ends of an SMC-D connection: ring-cursor arithmetic, the layout of the
// 32-byte CDC area at the start of every DMB, atomic access to that area, the
// validation of cursors written by the (untrusted) peer, and the compressed
// buffer-size notation used in the CLC handshake.
//
// # Cursors
//
// A [Cursor] names a position in a ring of some size: Count is the byte
// offset inside the ring and Wrap counts how often the ring has wrapped,
// modulo 2^16. [Cursor.Add], [Diff], [Comp] and [DiffLarge] mirror the Linux
// helpers smc_curs_add, smc_curs_diff, smc_curs_comp and smc_curs_diff_large
// (net/smc/smc_cdc.h) so results match the kernel for every valid cursor. No
// other package does open-coded cursor arithmetic.
//
// Values read from shared memory go through [Advance] before use: it accepts
// a new peer cursor only if it lies in the ring, did not move backwards
// (across the 0xFFFF->0 wrap of Wrap too) and advanced by no more than the
// caller's limit. Violations are *[CursorError] values matching [ErrProtocol].
//
// # The CDC area (struct smcd_cdc_msg)
//
// The first [AreaSize] bytes of each DMB hold the SMC-D CDC message; ring
// payload starts at offset 32 (SMC-REFERENCE §3.1):
//
//	off  size  field
//	  0     1  type, 0xFE (MsgType)
//	  1     7  reserved in the kernel; smcloop: the peer's wake stamp (StoreStamp)
//	  8     8  producer cursor word (OffProd)
//	 16     8  consumer cursor word (OffCons), also carrying the producer
//	           flags (byte 22) and the connection state flags (byte 23)
//	 24     8  reserved in the kernel; smcloop: the DMB owner's wake word (OffWake)
//
// Each cursor word has the byte layout of the kernel's union smcd_cdc_cursor:
// bytes 0-1 wrap (u16), bytes 2-5 count (u32), byte 6 producer flags, byte 7
// connection state flags, all in host byte order as SMC-D does not byte-swap.
// [PackWord] and [UnpackWord] convert between that layout and a uint64 in
// host order; an [Area] loads and stores each word as one atomic 64-bit
// access, so a reader never sees a torn cursor.
//
// # Doorbell suppression
//
// The kernel leaves bytes 24..31 reserved. smcloop uses them as the DMB
// owner's wake word: before the owner's reader (waiting for the peer's
// producer cursor) or writer (waiting for the peer's consumer cursor) blocks on
// its doorbell it sets [WakeReader] or [WakeWriter] with [Area.OrWake],
// re-checks the cursor, and only then sleeps. The peer stores its new cursor
// word and then loads the wake word, ringing the doorbell only if the
// matching bit is set. Both sides' stores are read-modify-writes (the wake
// word an add, the cursor words swaps: see [Area.StoreProd]), full barriers
// in every build, so at least one side sees the other's store and no wake-up
// is lost. Two kernel peers never look at these bytes.
//
// # Buffer sizes
//
// [CompressSize] and [UncompressSize] implement the 4-bit size code of the
// CLC messages (size = 16 KiB << code; SMC-REFERENCE §5).
package cdc
