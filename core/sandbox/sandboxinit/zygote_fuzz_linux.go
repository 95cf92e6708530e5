//go:build linux && silas_fuzz

package sandboxinit

import "syscall"

// forkInit in a fuzzing build (-tags silas_fuzz, see zygote_fork_linux.go):
// no init is ever forked, the zygote answers every fork with an error.
func forkInit(*forkArgs) (int, syscall.Errno) { return 0, syscall.ENOSYS }

type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls uint64
}

func forkInitOwnStack(*forkArgs, *cloneArgs) (int, syscall.Errno) { return 0, syscall.ENOSYS }
