//go:build linux && !silas_fuzz && (amd64 || arm64)

package sandboxinit

import "golang.org/x/sys/unix"

// programCloneFlags start the program from the forked init as vfork(2)
// does: the child borrows the init's memory until its execve (the init
// waits meanwhile) instead of a copy of it. The init's memory is the
// zygote's, copied at its fork; copying its page tables again for the
// program, and tearing that copy down at the program's execve, was about
// a third of the init's CPU per run (BENCHMARKS.md "Issue 26 — sandbox
// CPU"). Nothing else changes: the same credentials, seccomp filter,
// Landlock domain and limits, and after execve a fresh address space.
const programCloneFlags = unix.CLONE_VM | unix.CLONE_VFORK | uintptr(unix.SIGCHLD)

// rawVfork is the clone system call for programCloneFlags (assembly:
// the child returns on the parent's stack).
//
//go:noescape
func rawVfork(trap, a1, a2, a3 uintptr) (r1, err uintptr)
