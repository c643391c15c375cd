//go:build !unix

package oncekvtest

import "os"

// canKill reports whether CheckCrash can run here.
const canKill = false

func killSelf() { panic("oncekvtest: SIGKILL needs Unix") }

func killedBySIGKILL(*os.ProcessState) bool { return false }
