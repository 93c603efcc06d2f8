//go:build unix

package asnobody

import (
	"os/exec"
	"syscall"
)

// runAsNobody makes cmd start with nobody's uid and gid.
func runAsNobody(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: UID, Gid: GID}}
}
