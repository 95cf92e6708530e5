//go:build linux

package sandboxinit

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside the sandbox: they change mounts or
// namespaces, inspect or control other processes, load code into the
// kernel, or touch host-wide state (clock, swap, reboot, keyrings, audit).
// The program has no capabilities either; the filter makes the boundary
// independent of kernel bugs reachable through these calls.
var deniedSyscalls = append([]uintptr{
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_SETNS, unix.SYS_UNSHARE,
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV, unix.SYS_KCMP, unix.SYS_PIDFD_GETFD,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT, unix.SYS_QUOTACTL,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_LOOKUP_DCOOKIE,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOVE_MOUNT,
	unix.SYS_OPEN_TREE, unix.SYS_MOUNT_SETATTR,
	unix.SYS_USERFAULTFD, unix.SYS_SYSLOG, unix.SYS_VHANGUP,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
	// io_uring performs file and network operations the filter cannot see.
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
}, archDeniedSyscalls...)

// nsCloneFlags are the clone flags that create namespaces (CLONE_NEWTIME
// shares its bit with the exit signal in clone(2) and only works via clone3).
const nsCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP

// Offsets in struct seccomp_data.
const (
	sdNr   = 0
	sdArch = 4
	sdArg0 = 16 // low 32 bits on little-endian (amd64, arm64)
)

// seccompFilter builds the BPF program: wrong architecture → kill; x32
// syscalls → EPERM; denied syscalls → EPERM; clone3 → ENOSYS (its flags
// live in memory the filter cannot read; libc falls back to clone); clone
// with namespace flags → EPERM; everything else allowed.
func seccompFilter() []unix.SockFilter {
	const (
		ldW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, K: k, Jt: jt, Jf: jf}
	}
	allow := stmt(ret, unix.SECCOMP_RET_ALLOW)
	eperm := stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))

	p := []unix.SockFilter{
		stmt(ldW, sdArch),
		jump(jeq, auditArch, 1, 0),
		stmt(ret, unix.SECCOMP_RET_KILL_PROCESS),
		stmt(ldW, sdNr),
	}
	if x32Bit != 0 {
		p = append(p, jump(jge, x32Bit, 0, 1), eperm)
	}
	for _, nr := range deniedSyscalls {
		p = append(p, jump(jeq, uint32(nr), 0, 1), eperm)
	}
	p = append(p,
		jump(jeq, unix.SYS_CLONE3, 0, 1),
		stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS)),
		jump(jeq, unix.SYS_CLONE, 0, 3),
		stmt(ldW, sdArg0),
		jump(jset, nsCloneFlags, 0, 1),
		eperm,
		allow,
	)
	return p
}

// installSeccomp loads the filter on the calling (locked) thread; it needs
// no_new_privs. Without TSYNC only this thread is filtered, which is the
// thread that starts the program.
func installSeccomp() error {
	if auditArch == 0 {
		return fmt.Errorf("init: no seccomp filter for this architecture")
	}
	f := seccompFilter()
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("init: seccomp filter: %w", errno)
	}
	return nil
}
