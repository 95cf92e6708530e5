//go:build linux && !silas_fuzz

package sandboxinit

import (
	"syscall"
	"unsafe"
)

// cloneArgs is clone3(2)'s struct clone_args (its first version). The
// blank fields are pidfd, child_tid, parent_tid and exit_signal, which an
// init's clone leaves zero (see zygote_linux.go).
type cloneArgs struct {
	flags     uint64
	_         [4]uint64
	stack     uint64
	stackSize uint64
	tls       uint64
}

// childStart is called from assembly only (zygote_clone3_amd64.s); this
// use keeps it for the builds that do not assemble that file and tells
// staticcheck that it is used.
var _ = childStart

// childStart is where a clone3Init child starts, on the fork region's
// stack, with every signal blocked (beforeFork) and every handled one
// back to its default (CLONE_CLEAR_SIGHAND): it restores the signal mask
// as the runtime's AfterForkInChild does, and runs the init.
//
//go:norace
//go:nosplit
func childStart(a *forkArgs) {
	sys6(syscall.SYS_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, uintptr(unsafe.Pointer(&a.sigmask)), 0, 8, 0, 0)
	childInit(a)
}
