package clc

import (
	"fmt"
	"strings"
)

// ValidUEID reports whether eid is a valid user-defined EID, following
// the kernel's smc_clc_ueid_valid: after trailing white space is removed
// at least one character remains, the first is A-Z or 0-9, and every other
// is A-Z, 0-9, '.' or '-'. Padding is with blanks, never NUL.
func ValidUEID(eid [EIDLen]byte) bool {
	end := EIDLen
	for end > 0 && isSpace(eid[end-1]) {
		end--
	}
	if end == 0 || !isUpperAlnum(eid[0]) {
		return false
	}
	for _, c := range eid[1:end] {
		if !isUpperAlnum(c) && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// MakeEID blank-pads s to EIDLen bytes and checks it with ValidUEID.
func MakeEID(s string) ([EIDLen]byte, error) {
	var eid [EIDLen]byte
	if len(s) > EIDLen {
		return eid, fmt.Errorf("clc: EID %q longer than %d bytes", s, EIDLen)
	}
	copy(eid[:], s+strings.Repeat(" ", EIDLen-len(s)))
	if !ValidUEID(eid) {
		return eid, fmt.Errorf("clc: EID %q invalid: want A-Z, 0-9, '.', '-', starting with A-Z or 0-9", s)
	}
	return eid, nil
}

func isUpperAlnum(c byte) bool { return c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// isSpace is the C isspace set of the kernel's ctype table for ASCII.
func isSpace(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }
