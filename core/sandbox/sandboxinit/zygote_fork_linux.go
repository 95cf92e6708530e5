//go:build linux && !silas_fuzz

package sandboxinit

// The zygote's child side: the forked init between fork and exec, in raw
// system calls on memory prepared before the fork (see zygote_linux.go).
// Every function here is nosplit. Fuzzing instruments every package a
// fuzz target's test binary links, and the instrumented comparisons push
// this chain past the nosplit stack limit, so that build (make fuzz,
// -tags silas_fuzz) links zygote_fuzz_linux.go instead: a fuzz target
// tests a parser, never runs the sandbox.

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// forkInit clones the run's init as fork(2) does, a copy of the whole
// zygote (where forkInitOwnStack cannot: see zygote_clone3_other.go). In
// the parent it returns the child's pid (as this process sees it); the
// child never returns.
//
//go:norace
//go:nosplit
func forkInit(a *forkArgs) (int, syscall.Errno) {
	beforeFork()
	r1, _, errno := syscall.RawSyscall6(syscall.SYS_CLONE, a.cloneFlags, 0, 0, 0, 0, 0)
	if errno != 0 || r1 != 0 {
		afterFork()
		return int(r1), errno
	}
	afterForkInChild()
	childInit(a)
	return 0, 0
}

// forkInitOwnStack clones the run's init onto the fork region's stack
// (clone3Init); only the parent returns.
//
//go:norace
//go:nosplit
func forkInitOwnStack(a *forkArgs, ca *cloneArgs) (int, syscall.Errno) {
	beforeFork()
	r1, errno := clone3Init(ca, unsafe.Sizeof(*ca), a)
	afterFork()
	return int(r1), syscall.Errno(errno)
}

//go:norace
//go:nosplit
func sys(trap, a1, a2, a3 uintptr) (uintptr, syscall.Errno) {
	r, _, e := syscall.RawSyscall6(trap, a1, a2, a3, 0, 0, 0)
	return r, e
}

//go:norace
//go:nosplit
func sys6(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, syscall.Errno) {
	r, _, e := syscall.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
	return r, e
}

//go:norace
//go:nosplit
func exitNow(code uintptr) {
	for {
		syscall.RawSyscall6(syscall.SYS_EXIT_GROUP, code, 0, 0, 0, 0, 0)
	}
}

// report writes "<kind> <step>: errno <n>\n" (or, for StatusExit, "W
// <n>\n") to the status descriptor.
//
//go:norace
//go:nosplit
func report(a *forkArgs, kind byte, step int, n uint32) {
	i := 0
	a.msg[i] = kind
	a.msg[i+1] = ' '
	i += 2
	if kind != StatusExit {
		name := a.names[step]
		for j := 0; j < len(name) && i < len(a.msg)-40; j++ {
			a.msg[i] = name[j]
			i++
		}
		if kind == StatusExecErr && step == stepStart {
			// start "prog": errno n (the name unquoted inside: it is only
			// shown, as the re-executed init's %q does)
			a.msg[i] = ' '
			a.msg[i+1] = '"'
			i += 2
			for j := a.arg0; j < len(a.run) && a.run[j] != 0 && i < len(a.msg)-40; j++ {
				a.msg[i] = a.run[j]
				i++
			}
			a.msg[i] = '"'
			i++
		}
		for j := 0; j < len(errnoSep); j++ {
			a.msg[i] = errnoSep[j]
			i++
		}
	}
	// The number, most significant digit first.
	var digits [10]byte
	d := 0
	for {
		digits[d] = byte('0' + n%10)
		d++
		n /= 10
		if n == 0 {
			break
		}
	}
	for d > 0 {
		d--
		a.msg[i] = digits[d]
		i++
	}
	a.msg[i] = '\n'
	i++
	sys(syscall.SYS_WRITE, cfdStatus, uintptr(unsafe.Pointer(&a.msg[0])), uintptr(i))
}

//go:norace
//go:nosplit
func setupFailed(a *forkArgs, step int, errno syscall.Errno) {
	report(a, StatusSetupErr, step, uint32(errno))
	exitNow(125)
}

// childInit is the run's init, PID 1 of its PID namespace, between the
// fork and its end. Its steps are sandboxInit's phase 2 for a work dir
// that comes as a mount, in the same order.
//
//go:norace
//go:nosplit
func childInit(a *forkArgs) {
	// The whole run dies with the gateway (its parent).
	if _, e := sys(syscall.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); e != 0 {
		exitNow(125)
	}
	// Its descriptors at 0–4 (status and the run's socket close-on-exec),
	// nothing else: not the zygote's, not another run's.
	for i := 0; i < cfdCount; i++ {
		flags := uintptr(0)
		if i >= cfdStatus {
			flags = unix.O_CLOEXEC
		}
		if _, e := sys(syscall.SYS_DUP3, uintptr(a.fds[i]), uintptr(i), flags); e != 0 {
			exitNow(125)
		}
	}
	if _, e := sys(unix.SYS_CLOSE_RANGE, cfdCount, ^uintptr(0), 0); e != 0 {
		// Kernels before 5.9: close one by one.
		for fd := uintptr(cfdCount); fd < 4096; fd++ {
			sys(syscall.SYS_CLOSE, fd, 0, 0)
		}
	}

	// Ready (StatusReady: the root is built, in the zygote); wait for the
	// run (the gateway sends it once this process is in the run's
	// cgroups: nothing may fork before that). EOF: it gave up.
	sys(syscall.SYS_WRITE, cfdStatus, uintptr(unsafe.Pointer(&a.ready[0])), uintptr(len(a.ready)))
	var n uintptr
	for {
		a.hdr.SetControllen(len(a.oob))
		a.hdr.Flags = 0
		r, e := sys(syscall.SYS_RECVMSG, cfdRun, uintptr(unsafe.Pointer(&a.hdr)), unix.MSG_CMSG_CLOEXEC)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			setupFailed(a, stepRead, e)
		}
		if r == 0 {
			exitNow(125)
		}
		n = r
		break
	}
	sys(syscall.SYS_CLOSE, cfdRun, 0, 0)
	// The work dir's mount: one SCM_RIGHTS message of one descriptor.
	if a.hdr.Flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || a.hdr.Controllen < unix.SizeofCmsghdr+4 {
		setupFailed(a, stepNoWork, 0)
	}
	cm := (*unix.Cmsghdr)(unsafe.Pointer(&a.oob[0]))
	if cm.Level != unix.SOL_SOCKET || cm.Type != unix.SCM_RIGHTS || cm.Len != unix.SizeofCmsghdr+4 {
		setupFailed(a, stepNoWork, 0)
	}
	a.workFD = uintptr(*(*int32)(unsafe.Pointer(&a.oob[unix.SizeofCmsghdr])))
	if n < 16+3 {
		setupFailed(a, stepBadRun, 0)
	}
	a.run[n] = 0 // a missing terminator ends at the bound
	var cpu uint64
	for i := 7; i >= 0; i-- {
		cpu = cpu<<8 | uint64(a.run[i])
	}
	argc := uintptr(a.run[8]) | uintptr(a.run[9])<<8 | uintptr(a.run[10])<<16 | uintptr(a.run[11])<<24
	envc := uintptr(a.run[12]) | uintptr(a.run[13])<<8 | uintptr(a.run[14])<<16 | uintptr(a.run[15])<<24
	if argc == 0 || argc+envc+3 > zygoteMaxPtr {
		setupFailed(a, stepBadRun, 0)
	}
	// The program, then argc arguments and envc entries, each ending in
	// a NUL within the n bytes received.
	off := uintptr(16)
	k := uintptr(0)
	for s := uintptr(0); s < 1+argc+envc; s++ {
		if off >= n {
			setupFailed(a, stepBadRun, 0)
		}
		p := uintptr(unsafe.Pointer(&a.run[off]))
		for off < n && a.run[off] != 0 {
			off++
		}
		if off >= n {
			setupFailed(a, stepBadRun, 0)
		}
		off++
		switch {
		case s == 0:
			a.ptrs[zygoteMaxPtr-1] = p // the program, kept at the end
		case s <= argc:
			if s == 1 {
				a.arg0 = int(p - uintptr(unsafe.Pointer(&a.run[0])))
			}
			a.ptrs[k] = p
			k++
		default:
			if s == argc+1 {
				a.ptrs[k] = 0
				k++
			}
			a.ptrs[k] = p
			k++
		}
	}
	if envc == 0 {
		a.ptrs[k] = 0
		k++
	}
	a.ptrs[k] = 0
	a.rlimits[rlimitCPU].lim.Cur = cpu
	a.rlimits[rlimitCPU].lim.Max = cpu + 1

	// The run's own filesystems (finishFS).
	if _, e := sys6(syscall.SYS_MOUNT, uintptr(unsafe.Pointer(a.procFS)), uintptr(unsafe.Pointer(a.proc)), uintptr(unsafe.Pointer(a.procFS)),
		unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, uintptr(unsafe.Pointer(a.empty)), 0); e != 0 {
		setupFailed(a, stepProc, e)
	}
	if _, e := sys6(syscall.SYS_MOUNT, uintptr(unsafe.Pointer(a.tmpFS)), uintptr(unsafe.Pointer(a.tmp)), uintptr(unsafe.Pointer(a.tmpFS)),
		unix.MS_NOSUID|unix.MS_NODEV, uintptr(unsafe.Pointer(a.tmpOpts)), 0); e != 0 {
		setupFailed(a, stepTmp, e)
	}
	if _, e := sys6(syscall.SYS_MOUNT, uintptr(unsafe.Pointer(a.tmpFS)), uintptr(unsafe.Pointer(a.shm)), uintptr(unsafe.Pointer(a.tmpFS)),
		unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, uintptr(unsafe.Pointer(a.shmOpts)), 0); e != 0 {
		setupFailed(a, stepShm, e)
	}
	// The work dir's tmpfs (the gateway's fsmount: nosuid, nodev), then
	// private: a clone of a shared mount stays its peer.
	if _, e := sys6(unix.SYS_MOVE_MOUNT, a.workFD, uintptr(unsafe.Pointer(a.empty)), atFDCWD,
		uintptr(unsafe.Pointer(a.work)), unix.MOVE_MOUNT_F_EMPTY_PATH, 0); e != 0 {
		setupFailed(a, stepWork, e)
	}
	sys(syscall.SYS_CLOSE, a.workFD, 0, 0)
	if _, e := sys6(syscall.SYS_MOUNT, uintptr(unsafe.Pointer(a.empty)), uintptr(unsafe.Pointer(a.work)), uintptr(unsafe.Pointer(a.empty)),
		unix.MS_PRIVATE, 0, 0); e != 0 {
		setupFailed(a, stepWorkPrivate, e)
	}
	if _, e := sys(syscall.SYS_SETHOSTNAME, uintptr(unsafe.Pointer(a.hostname)), a.hostnameLen, 0); e != 0 {
		setupFailed(a, stepHostname, e)
	}

	// setLimits.
	for i := range a.rlimits {
		if _, e := sys6(syscall.SYS_PRLIMIT64, 0, a.rlimits[i].res, uintptr(unsafe.Pointer(&a.rlimits[i].lim)), 0, 0, 0); e != 0 {
			setupFailed(a, stepRlimit, e)
		}
	}
	if _, e := sys(syscall.SYS_SETPRIORITY, unix.PRIO_PROCESS, 0, 10); e != 0 {
		setupFailed(a, stepNice, e)
	}

	// dropPrivileges.
	if _, e := sys6(syscall.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); e != 0 {
		setupFailed(a, stepAmbient, e)
	}
	for c := uintptr(0); c <= unix.CAP_LAST_CAP; c++ {
		// The zygote emptied its own bounding set (zygoteMain): each drop
		// is a new set of credentials, so only what is still in it.
		if in, e := sys(syscall.SYS_PRCTL, unix.PR_CAPBSET_READ, c, 0); e == 0 && in == 0 {
			continue
		}
		if _, e := sys(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); e != 0 && e != syscall.EINVAL {
			setupFailed(a, stepBounding, e)
		}
	}
	if _, e := sys(syscall.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		setupFailed(a, stepGroups, e)
	}
	if _, e := sys(syscall.SYS_SETRESGID, a.gid, a.gid, a.gid); e != 0 {
		setupFailed(a, stepGID, e)
	}
	if _, e := sys(syscall.SYS_SETRESUID, a.uid, a.uid, a.uid); e != 0 {
		setupFailed(a, stepUID, e)
	}
	if _, e := sys(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&a.capHdr)), uintptr(unsafe.Pointer(&a.capData[0])), 0); e != 0 {
		setupFailed(a, stepCapset, e)
	}
	if _, e := sys(syscall.SYS_GETRESUID, uintptr(unsafe.Pointer(&a.resid[0])), uintptr(unsafe.Pointer(&a.resid[1])), uintptr(unsafe.Pointer(&a.resid[2]))); e != 0 ||
		a.resid[0] == 0 || a.resid[1] == 0 || a.resid[2] == 0 {
		setupFailed(a, stepRoot, e)
	}
	if _, e := sys6(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); e != 0 {
		setupFailed(a, stepNNP, e)
	}

	// restrictLandlock, on the run's own mounts (a rule on the mount point
	// underneath would not cover what is mounted on it).
	if a.llSize > 0 {
		rs, e := sys(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&a.llAttr)), a.llSize, 0)
		if e != 0 {
			setupFailed(a, stepLLCreate, e)
		}
		for i := range a.llRules {
			r := &a.llRules[i]
			fd, e := sys6(syscall.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(r.path)), unix.O_PATH|unix.O_CLOEXEC, 0, 0, 0)
			if e != 0 {
				setupFailed(a, stepLLRule, e)
			}
			r.attr.Parent_fd = int32(fd)
			if _, e := sys6(unix.SYS_LANDLOCK_ADD_RULE, rs, unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&r.attr)), 0, 0, 0); e != 0 {
				setupFailed(a, stepLLRule, e)
			}
			sys(syscall.SYS_CLOSE, fd, 0, 0)
		}
		if _, e := sys(unix.SYS_LANDLOCK_RESTRICT_SELF, rs, 0, 0); e != 0 {
			setupFailed(a, stepLLRestrict, e)
		}
		sys(syscall.SYS_CLOSE, rs, 0, 0)
	}
	if _, e := sys(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&a.fprog))); e != 0 {
		setupFailed(a, stepSeccomp, e)
	}

	// The program, in its own process group, in /work: vforked
	// (programCloneFlags), this process waits until its execve.
	pid, e := rawVfork(syscall.SYS_CLONE, programCloneFlags, 0, 0)
	if e != 0 {
		report(a, StatusExecErr, stepStart, uint32(e))
		exitNow(125)
	}
	if pid == 0 {
		execProgram(a, argc)
	}
	// Reap everything (orphans are re-parented here) until the program
	// ends; then report and exit, which kills the rest.
	for {
		wpid, e := sys6(syscall.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(&a.ws)), 0, 0, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			report(a, StatusExecErr, stepWait, uint32(e))
			exitNow(125)
		}
		if wpid == pid {
			report(a, StatusExit, 0, a.ws)
			exitNow(0)
		}
	}
}

// execProgram is the program's side of the vfork: it runs on this
// process's stack below childInit's frame (never returning into it, so
// the init's frame is as the init left it) until execve replaces it.
//
//go:norace
//go:nosplit
//go:noinline
func execProgram(a *forkArgs, argc uintptr) {
	sys(syscall.SYS_SETPGID, 0, 0, 0)
	if _, e := sys(syscall.SYS_CHDIR, uintptr(unsafe.Pointer(a.work)), 0, 0); e != 0 {
		report(a, StatusExecErr, stepStart, uint32(e))
		exitNow(127)
	}
	_, e := sys(syscall.SYS_EXECVE, a.ptrs[zygoteMaxPtr-1], uintptr(unsafe.Pointer(&a.ptrs[0])), uintptr(unsafe.Pointer(&a.ptrs[argc+1])))
	report(a, StatusExecErr, stepStart, uint32(e))
	exitNow(127)
}
