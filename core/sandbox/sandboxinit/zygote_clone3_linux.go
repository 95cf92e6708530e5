//go:build linux && !silas_fuzz

package sandboxinit

import (
	"syscall"
	"unsafe"
)

// cloneArgs is clone3(2)'s struct clone_args (its first version).
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls uint64
}

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
