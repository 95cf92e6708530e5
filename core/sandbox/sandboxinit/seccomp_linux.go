//go:build linux

package sandboxinit

import (
	"fmt"
	"slices"
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
//
// The syscall number is looked up in a binary search tree, not a list:
// when a filter is attached the kernel runs it once for every syscall
// number of the architecture (the action cache, seccomp_cache_prepare,
// with interrupts off), and a list of ~55 comparisons made that about
// half of the seccomp system call's CPU in every run's init. The tree
// decides every number in a handful of comparisons; what it decides is
// the list's (TestSeccompFilterDecides). Its keys are runs of
// consecutive numbers with the same action (io_uring's three and the new
// mount API's six are one, 425–433): fewer instructions for the kernel
// to check, convert and compile on every run (79 → 55 on amd64).
func seccompFilter() []unix.SockFilter {
	const (
		ldW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	// Jump targets: an instruction's index, or one of the shared blocks
	// at the end (resolved once the tree's size is known).
	const (
		toNext = -1 - iota
		toAllow
		toEperm
		toEnosys
		toClone
	)
	type insn struct {
		code   uint16
		k      uint32
		jt, jf int // absolute indexes or a to* target; toNext: the next one
	}
	var p []insn
	emit := func(code uint16, k uint32, jt, jf int) int {
		p = append(p, insn{code, k, jt, jf})
		return len(p) - 1
	}
	emit(ldW, sdArch, toNext, toNext)
	kill := emit(jeq, auditArch, toNext, toNext) // jf patched below
	emit(ret, unix.SECCOMP_RET_KILL_PROCESS, 0, 0)
	p[kill].jt, p[kill].jf = kill+2, kill+1
	emit(ldW, sdNr, toNext, toNext)
	if x32Bit != 0 {
		emit(jge, x32Bit, toEperm, toNext)
	}
	// Every number with an action of its own, sorted, in runs of
	// consecutive numbers with the same action; the rest is allowed.
	type entry struct {
		lo, hi uint32 // lo ≤ nr ≤ hi
		target int
	}
	var nums []entry
	for _, nr := range deniedSyscalls {
		nums = append(nums, entry{uint32(nr), uint32(nr), toEperm})
	}
	nums = append(nums, entry{unix.SYS_CLONE3, unix.SYS_CLONE3, toEnosys}, entry{unix.SYS_CLONE, unix.SYS_CLONE, toClone})
	slices.SortFunc(nums, func(a, b entry) int { return int(a.lo) - int(b.lo) })
	nums = slices.CompactFunc(nums, func(a, b entry) bool { return a.lo == b.lo })
	var keys []entry
	for _, e := range nums {
		if n := len(keys); n > 0 && keys[n-1].target == e.target && keys[n-1].target != toClone && keys[n-1].hi+1 == e.lo {
			keys[n-1].hi = e.lo
			continue
		}
		keys = append(keys, e)
	}
	var tree func(keys []entry)
	tree = func(keys []entry) {
		if len(keys) <= 3 {
			// Checked in turn; a number in none of them is allowed.
			for i, e := range keys {
				next := toNext
				if i == len(keys)-1 {
					next = toAllow
				}
				if e.lo == e.hi {
					emit(jeq, e.lo, e.target, next)
					continue
				}
				skip := next
				if skip == toNext {
					skip = len(p) + 2 // past this run's two instructions
				}
				emit(jge, e.lo, toNext, skip)
				emit(jge, e.hi+1, skip, e.target)
			}
			return
		}
		mid := len(keys) / 2
		at := emit(jge, keys[mid].lo, 0, toNext) // jt: the right half, after the left
		tree(keys[:mid])
		p[at].jt = len(p)
		tree(keys[mid:])
	}
	tree(keys)
	// The shared blocks.
	clone := len(p)
	emit(ldW, sdArg0, toNext, toNext)
	emit(jset, nsCloneFlags, toEperm, toAllow)
	enosys := emit(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS), 0, 0)
	eperm := emit(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM), 0, 0)
	allow := emit(ret, unix.SECCOMP_RET_ALLOW, 0, 0)

	out := make([]unix.SockFilter, len(p))
	for i, in := range p {
		rel := func(t int) uint8 {
			switch t {
			case toNext:
				t = i + 1
			case toAllow:
				t = allow
			case toEperm:
				t = eperm
			case toEnosys:
				t = enosys
			case toClone:
				t = clone
			}
			d := t - (i + 1)
			if in.code&0x07 == unix.BPF_JMP && (d < 0 || d > 255) {
				panic("seccomp: jump out of range") // a constant program: caught by its tests
			}
			return uint8(d)
		}
		out[i] = unix.SockFilter{Code: in.code, K: in.k}
		if in.code&0x07 == unix.BPF_JMP {
			out[i].Jt, out[i].Jf = rel(in.jt), rel(in.jf)
		}
	}
	return out
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
