package clc

import "fmt"

// Decline reason codes, SMC_CLC_DECL_* (net/smc/smc_clc.h; SMC-REFERENCE §2).
// They travel in Decline.Code and are what fallback statistics report.
const (
	DeclMem          uint32 = 0x01010000 // insufficient memory resources
	DeclTimeoutCL    uint32 = 0x02010000 // timeout waiting for QP confirm link (SMC-R)
	DeclTimeoutAL    uint32 = 0x02020000 // timeout waiting for add link (SMC-R)
	DeclCnfErr       uint32 = 0x03000000 // configuration error
	DeclPeerNoSMC    uint32 = 0x03010000 // peer did not indicate SMC
	DeclIPSec        uint32 = 0x03020000 // IPsec usage
	DeclNoSMCDev     uint32 = 0x03030000 // no SMC device found (R or D)
	DeclNoSMCDDev    uint32 = 0x03030001 // no SMC-D device found
	DeclNoSMCRDev    uint32 = 0x03030002 // no SMC-R device found
	DeclNoISM2Supp   uint32 = 0x03030003 // hardware has no ISMv2 support
	DeclNoV2Ext      uint32 = 0x03030004 // peer sent no CLC v2 extension
	DeclNoV2DExt     uint32 = 0x03030005 // peer sent no SMC-Dv2 extension
	DeclNoSEID       uint32 = 0x03030006 // peer sent no SEID
	DeclNoSMCD2Dev   uint32 = 0x03030007 // no SMC-Dv2 device found
	DeclNoUEID       uint32 = 0x03030008 // peer sent no UEID
	DeclReleaseErr   uint32 = 0x03030009 // release version negotiation failed
	DeclMaxConnErr   uint32 = 0x0303000a // max connections negotiation failed
	DeclMaxLinkErr   uint32 = 0x0303000b // max links negotiation failed
	DeclModeUnsupp   uint32 = 0x03040000 // SMC modes do not match (R or D)
	DeclRMBEEC       uint32 = 0x03050000 // peer has eyecatcher in RMBE
	DeclOptUnsupp    uint32 = 0x03060000 // fastopen socket option not supported
	DeclDiffPrefix   uint32 = 0x03070000 // IP prefix / subnet mismatch
	DeclGetVLANErr   uint32 = 0x03080000 // error getting VLAN id of IP device
	DeclISMVLANErr   uint32 = 0x03090000 // error registering VLAN id on ISM device
	DeclNoActLink    uint32 = 0x030a0000 // no active SMC-R link in link group
	DeclNoSrvLink    uint32 = 0x030b0000 // SMC-R link from server not found
	DeclVersMismatch uint32 = 0x030c0000 // SMC version mismatch
	DeclMaxDMB       uint32 = 0x030d0000 // SMC-D DMB limit exceeded
	DeclNoRoute      uint32 = 0x030e0000 // SMC-Rv2: no route to peer
	DeclNoIndirect   uint32 = 0x030f0000 // SMC-Rv2: indirect/direct mismatch
	DeclSyncErr      uint32 = 0x04000000 // synchronization error (out-of-sync flag set)
	DeclPeerDecl     uint32 = 0x05000000 // peer declined during handshake (local reason)
	DeclIntErr       uint32 = 0x09990000 // internal error
	DeclErrRTok      uint32 = 0x09990001 // rtoken handling failed
	DeclErrRdyLnk    uint32 = 0x09990002 // IB ready link failed
	DeclErrRegBuf    uint32 = 0x09990003 // registering RDMA buffers failed
)

var codeNames = map[uint32]string{
	DeclMem:          "MEM",
	DeclTimeoutCL:    "TIMEOUT_CL",
	DeclTimeoutAL:    "TIMEOUT_AL",
	DeclCnfErr:       "CNFERR",
	DeclPeerNoSMC:    "PEERNOSMC",
	DeclIPSec:        "IPSEC",
	DeclNoSMCDev:     "NOSMCDEV",
	DeclNoSMCDDev:    "NOSMCDDEV",
	DeclNoSMCRDev:    "NOSMCRDEV",
	DeclNoISM2Supp:   "NOISM2SUPP",
	DeclNoV2Ext:      "NOV2EXT",
	DeclNoV2DExt:     "NOV2DEXT",
	DeclNoSEID:       "NOSEID",
	DeclNoSMCD2Dev:   "NOSMCD2DEV",
	DeclNoUEID:       "NOUEID",
	DeclReleaseErr:   "RELEASEERR",
	DeclMaxConnErr:   "MAXCONNERR",
	DeclMaxLinkErr:   "MAXLINKERR",
	DeclModeUnsupp:   "MODEUNSUPP",
	DeclRMBEEC:       "RMBE_EC",
	DeclOptUnsupp:    "OPTUNSUPP",
	DeclDiffPrefix:   "DIFFPREFIX",
	DeclGetVLANErr:   "GETVLANERR",
	DeclISMVLANErr:   "ISMVLANERR",
	DeclNoActLink:    "NOACTLINK",
	DeclNoSrvLink:    "NOSRVLINK",
	DeclVersMismatch: "VERSMISMAT",
	DeclMaxDMB:       "MAX_DMB",
	DeclNoRoute:      "NOROUTE",
	DeclNoIndirect:   "NOINDIRECT",
	DeclSyncErr:      "SYNCERR",
	DeclPeerDecl:     "PEERDECL",
	DeclIntErr:       "INTERR",
	DeclErrRTok:      "ERR_RTOK",
	DeclErrRdyLnk:    "ERR_RDYLNK",
	DeclErrRegBuf:    "ERR_REGBUF",
}

// CodeName returns the kernel name of a decline code without the
// SMC_CLC_DECL_ prefix, e.g. "PEERNOSMC", or "0x%08x" for an unknown code.
func CodeName(code uint32) string {
	if n, ok := codeNames[code]; ok {
		return n
	}
	return fmt.Sprintf("0x%08x", code)
}
