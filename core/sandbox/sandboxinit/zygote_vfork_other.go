//go:build linux && !silas_fuzz && !amd64 && !arm64

package sandboxinit

import "syscall"

// No zygote runs here (no seccomp filter for this architecture): a plain
// fork, for the build.
const programCloneFlags = uintptr(syscall.SIGCHLD)

//go:nosplit
func rawVfork(trap, a1, a2, a3 uintptr) (r1, err uintptr) {
	r, _, e := syscall.RawSyscall6(trap, a1, a2, a3, 0, 0, 0)
	return r, uintptr(e)
}
