//go:build !unix

package asnobody

import "os/exec"

// runAsNobody is never reached here: Command skips every test unless it runs as root,
// and a system without unix credentials has no root (os.Geteuid returns -1).
func runAsNobody(*exec.Cmd) {}
