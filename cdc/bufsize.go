package cdc

import "math/bits"

// Buffer sizes in the 4-bit compressed notation of the CLC messages
// (SMC-REFERENCE §5): size = MinBufSize << code.
const (
	MinBufSize     = 16384 // SMC_BUF_MIN_SIZE, code 0
	MaxSMCDBufCode = 6     // SMCD_DMBE_SIZES: largest SMC-D DMB is 1 MiB

	maxBufCode = 15 // largest value of the 4-bit field
)

// CompressSize returns the smallest code whose size holds size bytes,
// rounding up to a power of two, capped at maxCode (the kernel's
// smc_compress_bufsize): sizes up to 16 KiB give 0, 16 KiB+1 gives 1,
// 64 KiB gives 2 and 1 MiB gives 6. maxCode above 15 is treated as 15.
func CompressSize(size int, maxCode uint8) uint8 {
	maxCode = min(maxCode, maxBufCode)
	if size <= MinBufSize {
		return 0
	}
	code := bits.Len(uint((size - 1) >> 14)) // ilog2(...) + 1
	return uint8(min(code, int(maxCode)))
}

// UncompressSize returns the buffer size for code: 16 KiB << code (the
// kernel's smc_uncompress_bufsize). A code above 15 does not fit the 4-bit
// field and yields 0, so a caller's size check rejects it.
func UncompressSize(code uint8) int {
	if code > maxBufCode {
		return 0
	}
	return MinBufSize << code
}
