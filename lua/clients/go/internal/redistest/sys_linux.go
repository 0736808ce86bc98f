package redistest

import "syscall"

// dieWithParent: the server gets SIGKILL when the test process dies.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
