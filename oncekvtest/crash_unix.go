//go:build unix

package oncekvtest

import (
	"os"
	"syscall"
)

// canKill reports whether CheckCrash can run here.
const canKill = true

// killSelf SIGKILLs this process; it never returns.
func killSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// killedBySIGKILL reports whether the process ps describes ended by SIGKILL.
func killedBySIGKILL(ps *os.ProcessState) bool {
	if ps == nil {
		return false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
