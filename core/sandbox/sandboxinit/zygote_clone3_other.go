//go:build linux && !silas_fuzz && (!amd64 || race)

package sandboxinit

import "syscall"

// No clone3Init here: every init is forked as fork(2) does (forkInit),
// a copy of the whole zygote. Under the race detector too: the assembly
// enters childStart through its ABI wrapper, which the race build
// instruments (racefuncenter reads the thread's g, which the child does
// not have).
//
//go:nosplit
func clone3Init(args *cloneArgs, size uintptr, a *forkArgs) (r1, err uintptr) {
	return 0, uintptr(syscall.ENOSYS)
}
