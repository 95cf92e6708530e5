//go:build linux

package sandboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The zygote (issue 26): a root gateway starts its own binary once as a
// long-lived sandbox parent instead of re-executing it for every run. The
// zygote, in a mount namespace of its own, builds the sandbox's root once
// (system dirs read-only, hidden paths covered, /dev; setupFS) and pivots
// into it, so the host's tree is gone from it; the root and /dev are then
// read-only. For each run the gateway sends the run's spec and its
// descriptors (status, stdout, stderr, a "go" pipe, the work dir's
// detached tmpfs) on a SOCK_SEQPACKET socket; the zygote forks the run's
// init with clone(2) into new mount, PID, IPC, UTS, network and cgroup
// namespaces, as a child of the gateway (CLONE_PARENT: the gateway waits
// for it, kills it and reads its rusage as for a re-executed init), and
// replies with its pid. The gateway puts it in the run's cgroups and
// writes "go"; only then does the init build the run's part of the
// sandbox — its own /proc, /tmp and /dev/shm, the work dir at /work, the
// hostname — set the rlimits, drop every privilege (uid, groups,
// capabilities), set no_new_privs, apply Landlock and the seccomp filter,
// and start the program as its only child, exactly as a re-executed init
// does (sandboxInit), then reports the program's exit status and exits,
// which ends the PID namespace. What a run saves is the exec of the
// gateway's binary, the Go runtime's start and the build of the root.
//
// Between fork and exec there is no Go runtime in the child: the init is
// the zygote's thread continuing in raw system calls (childInit), on
// memory prepared before the fork, like syscall.forkAndExecInChild. It
// must never allocate, grow its stack, write a pointer or call anything
// that is not nosplit. On amd64 it reads and writes nothing but the fork
// region (zygote_mem_linux.go), on whose stack clone3 starts it, and the
// rest of the zygote's memory is not forked at all; elsewhere it is a
// whole copy, continuing on the forking goroutine's stack (forkInit).

//go:linkname beforeFork syscall.runtime_BeforeFork
func beforeFork()

//go:linkname afterFork syscall.runtime_AfterFork
func afterFork()

//go:linkname afterForkInChild syscall.runtime_AfterForkInChild
func afterForkInChild()

// ZygoteReply kinds, the first byte of the zygote's answer to a fork.
const (
	ZygotePid   = 'P' // "P <pid>": the init is forked and waits for its run
	ZygoteErr   = 'E' // "E <why>": the init could not be forked
	ZygoteStale = 'S' // a hidden path appeared since the root was built: start a new zygote
)

// ZygoteFork is the gateway's request for an init; ZygoteFDs descriptors
// come with it, in this order: stdout, stderr, status (write ends), the
// run's socket (a SOCK_SEQPACKET end): the child's 1 to 4 (0 is the
// zygote's /dev/null).
const (
	ZygoteFork = 'F'
	ZygoteFDs  = 4
)

// Descriptor numbers in the forked init: stdin, stdout, stderr, then
// status and the run's socket (both close-on-exec). Nothing else.
const (
	cfdStatus = 3
	cfdRun    = 4
	cfdCount  = 5
	// cfdLow: the zygote moves a fork's descriptors at or above it, so
	// that placing them at 0–4 in the child never overwrites one still
	// to be placed.
	cfdLow = 16
)

// Limits of a run's message to a forked init (ZygoteRun): it reads it
// into buffers of fixed size, without the Go runtime.
const (
	ZygoteRunMax = 128 << 10 // bytes
	zygoteMaxPtr = 4096      // argv and environment entries together, with their two nils and the program
)

// ZygoteRun encodes a run for a forked init: the CPU limit (8 bytes),
// argc and envc (4 bytes each, little-endian), then the program, every
// argument and every environment entry, each ending in a NUL. The work
// dir's mount comes with it (SCM_RIGHTS).
func ZygoteRun(rs RunSpec) ([]byte, error) {
	if !rs.WorkMount || rs.StageWork || rs.Program == "" || len(rs.Argv) == 0 {
		return nil, errors.New("zygote: a run needs its work dir's mount and a program")
	}
	if len(rs.Argv)+len(rs.Env)+3 > zygoteMaxPtr {
		return nil, errors.New("zygote: too many arguments and environment variables")
	}
	b := make([]byte, 16, 256)
	binary64(b[0:8], rs.CPU)
	binary32(b[8:12], uint32(len(rs.Argv)))
	binary32(b[12:16], uint32(len(rs.Env)))
	for _, list := range [][]string{{rs.Program}, rs.Argv, rs.Env} {
		for _, s := range list {
			for i := 0; i < len(s); i++ {
				if s[i] == 0 {
					return nil, errors.New("zygote: NUL in an argument or environment entry")
				}
			}
			b = append(b, s...)
			b = append(b, 0)
		}
	}
	if len(b) > ZygoteRunMax {
		return nil, fmt.Errorf("zygote: the run's arguments and environment take %d bytes, more than %d", len(b), ZygoteRunMax)
	}
	return b, nil
}

func binary64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func binary32(b []byte, v uint32) {
	for i := range 4 {
		b[i] = byte(v >> (8 * i))
	}
}

// zygote is the prepared state every run's init is forked from.
type zygote struct {
	spec    *Spec
	hidden  map[string]bool
	watch   []string // hidden paths that would be visible if they appeared
	devNull int
	filter  []unix.SockFilter
	args    *forkArgs // reused: each child has its own copy of it; in region
	reply   []byte    // the last fork's reply, reused
	// region holds everything an init touches (zygote_mem_linux.go);
	// clone is clone3's arguments for forking onto its stack.
	region *forkRegion
	clone  cloneArgs
	// ownStack: 0 until the first fork, then 1 if clone3 forks inits onto
	// the region (the rest of the zygote's memory is then not forked), -1
	// if this kernel cannot (before 5.5: no CLONE_CLEAR_SIGHAND), and
	// every init is a copy of the whole zygote, as fork(2) makes it.
	ownStack int8
	forks    int
	maps     int    // /proc/self/maps, opened before the pivot
	mapsBuf  []byte // its last read, reused
	// keepLo, keepHi: the binary's data the inits keep (keptDataRange).
	keepLo, keepHi uintptr
	// noBounding: the threads (by tid) whose bounding set is empty. An
	// init inherits the set of the thread that forks it, and serve's
	// goroutine runs on whichever thread the runtime gives it.
	noBounding map[int]bool
}

func zygoteMain(status *os.File, specJSON []byte) int {
	fail := func(err error) int { return fail(status, StatusSetupErr, err) }
	var spec Spec
	if err := json.Unmarshal(specJSON, &spec); err != nil {
		return fail(fmt.Errorf("zygote: bad spec: %w", err))
	}
	if !spec.SetUID || spec.Network || spec.UID == 0 {
		return fail(errors.New("zygote: only for a root gateway's network-off runs, never as root"))
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("init: PR_SET_DUMPABLE: %w", err))
	}
	// Opened before the root is built: the zygote's has no /proc. An init
	// closes it with every descriptor above its own five.
	maps, err := unix.Open("/proc/self/maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("zygote: /proc/self/maps: %w", err))
	}
	hidden, err := setupFS(&spec)
	if err != nil {
		return fail(err)
	}
	// finishFS without a work dir: the host's root goes, the root and
	// /dev become read-only (every run's init shares them, read-only).
	if err := hideAll("", spec.Hide, hidden); err != nil {
		return fail(err)
	}
	if err := unix.Unmount(oldRoot, unix.MNT_DETACH); err != nil {
		return fail(fmt.Errorf("init: detach old root: %w", err))
	}
	if err := unix.Rmdir(oldRoot); err != nil {
		return fail(fmt.Errorf("init: remove old root mount point: %w", err))
	}
	if err := unix.Mount("", "/dev", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fail(fmt.Errorf("init: remount /dev read-only: %w", err))
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fail(fmt.Errorf("init: remount root read-only: %w", err))
	}
	if auditArch == 0 {
		return fail(errors.New("init: no seccomp filter for this architecture"))
	}
	// The bounding set limits only what an execve may gain, and the
	// zygote never execs: it drops it whole, so its inits have nothing
	// left to drop one credential change at a time (they still check
	// every capability). Its own effective capabilities stay. It is a
	// thread's attribute: this thread now, each thread that forks an
	// init before its first fork (fork).
	if err := dropBoundingSet(); err != nil {
		return fail(err)
	}
	devNull, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("init: /dev/null: %w", err))
	}
	region, err := newForkRegion()
	if err != nil {
		return fail(fmt.Errorf("zygote: fork region: %w", err))
	}
	z := &zygote{spec: &spec, hidden: hidden, devNull: devNull, filter: seccompFilter(), noBounding: map[int]bool{},
		region: region, maps: maps}
	z.keepLo, z.keepHi = keptDataRange()
	// A hidden path not covered now that lies in a directory the root
	// shows would be visible once it appears: the zygote (and the gateway,
	// for its warm inits) watch for it.
	for _, h := range spec.Hide {
		if hidden[h] || inside(h, hidden) {
			continue
		}
		top := h
		if i := strings.IndexByte(h[1:], '/'); i >= 0 {
			top = h[:i+1]
		}
		if !slices.Contains(SystemDirs, top) {
			continue // /tmp, /work, /proc…: the run's own, never the host's
		}
		if fi, err := os.Lstat(top); err == nil && fi.IsDir() {
			z.watch = append(z.watch, h)
		}
	}
	z.args = z.forkArgs()
	if err := closeOnExecFrom(fdRun + 1); err != nil {
		return fail(err)
	}
	watch, _ := json.Marshal(z.watch)
	fmt.Fprintf(status, "%c %s\n", StatusReady, watch)
	status.Close()
	// Every descriptor below cfdCount stays taken (by /dev/null where
	// one is free, as the status pipe's now is): the descriptors of each
	// request then land above them, where fork need not move them.
	for fd := 0; fd < cfdCount; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == unix.EBADF {
			if err := unix.Dup3(devNull, fd, unix.O_CLOEXEC); err != nil {
				return fail(fmt.Errorf("zygote: descriptor %d: %w", fd, err))
			}
		}
	}
	// Served from a goroutine of its own: this one runs in a package's
	// init, where the runtime keeps it locked to the main thread, and a
	// locked goroutine that waits in the network poller hands its P to
	// another thread and back on every wake-up (two thread switches per
	// fork). This one just waits.
	done := make(chan struct{})
	go func() {
		defer close(done)
		z.serve(fdRun)
	}()
	<-done
	return 0
}

// dropBoundingSet empties the calling thread's bounding set (a
// per-thread attribute).
func dropBoundingSet() error {
	for c := uintptr(0); c <= unix.CAP_LAST_CAP; c++ {
		if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); e != 0 && e != syscall.EINVAL {
			return fmt.Errorf("init: drop capability %d from the bounding set: %w", c, e)
		}
	}
	return nil
}

// serve forks inits until the gateway closes its end of the socket.
//
// Between two forks the zygote waits in Go's network poller, not in a
// blocking system call, and what it does for a fork is raw system calls:
// the runtime's sysmon thread polls every 20 µs to 10 ms while a goroutine
// sits in a system call, is woken by the next one that enters, and sleeps
// while every P is idle. Waiting in recvmsg kept it polling; it was about
// a tenth of the zygote's CPU per run (BENCHMARKS.md "Issue 26 — sandbox
// CPU").
//
// The socket is watched through an epoll set of its own, for input only
// (InputPoll): in the poller itself it would be watched for output too,
// and the gateway's read of each reply, which makes it writable, woke the
// zygote for nothing once per run.
func (z *zygote) serve(sock int) {
	ep, err := InputPoll(sock)
	if err != nil {
		return
	}
	rc, err := ep.SyscallConn()
	if err != nil {
		return
	}
	var (
		buf   [64]byte
		oob   [64]byte // unix.CmsgSpace(ZygoteFDs*4) and then some: a larger one is cut (MSG_CTRUNC)
		iov   = unix.Iovec{Base: &buf[0]}
		hdr   = unix.Msghdr{Iov: &iov, Iovlen: 1, Control: &oob[0]}
		n     uintptr
		errno syscall.Errno
		reply []byte
	)
	iov.SetLen(len(buf))
	recv := func(uintptr) bool {
		hdr.SetControllen(len(oob))
		hdr.Flags = 0
		n, _, errno = syscall.RawSyscall(syscall.SYS_RECVMSG, uintptr(sock), uintptr(unsafe.Pointer(&hdr)), unix.MSG_CMSG_CLOEXEC)
		return errno != syscall.EAGAIN
	}
	for {
		if err := rc.Read(recv); err != nil {
			return
		}
		if errno == syscall.EINTR {
			continue
		}
		oobn := int(hdr.Controllen)
		if errno != 0 || (n == 0 && oobn == 0) {
			return // the gateway is gone: so are its runs
		}
		var fds []int
		if oobn > 0 {
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, m := range msgs {
					if f, err := unix.ParseUnixRights(&m); err == nil {
						fds = append(fds, f...)
					}
				}
			}
		}
		reply = z.fork(buf[:n], int(hdr.Flags), fds)
		for _, f := range fds {
			rawClose(f)
		}
		// The gateway reads each reply before its next request: a reply
		// fits at once. Should it not, wait for room outside the poller
		// (a blocking poll: there is nothing else to do meanwhile).
		for {
			_, _, errno = syscall.RawSyscall(syscall.SYS_WRITE, uintptr(sock), uintptr(unsafe.Pointer(&reply[0])), uintptr(len(reply)))
			if errno == syscall.EAGAIN {
				if _, err := unix.Poll([]unix.PollFd{{Fd: int32(sock), Events: unix.POLLOUT}}, -1); err != nil && err != unix.EINTR {
					return
				}
				continue
			}
			if errno != syscall.EINTR {
				break
			}
		}
		if errno != 0 || reply[0] == ZygoteStale {
			return
		}
	}
}

// InputPoll makes fd non-blocking and returns an epoll set of its own
// that watches it for input only (level-triggered), non-blocking and in
// the network poller: it turns readable when fd does, and nothing else —
// fd's turning writable, which the poller would report for fd itself,
// wakes nobody.
func InputPoll(fd int) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, err
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err == nil {
		_, err = unix.FcntlInt(uintptr(ep), unix.F_SETFL, unix.O_NONBLOCK)
	}
	if err != nil {
		unix.Close(ep)
		return nil, err
	}
	return os.NewFile(uintptr(ep), "input-poll"), nil
}

// rawClose closes fd without entering the runtime's system call path
// (see serve).
func rawClose(fd int) {
	syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
}

// fork forks one init and returns the reply for the gateway.
func (z *zygote) fork(msg []byte, flags int, fds []int) []byte {
	bad := func(err error) []byte { return fmt.Appendf(nil, "%c %s", ZygoteErr, err) }
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || len(fds) != ZygoteFDs || len(msg) != 1 || msg[0] != ZygoteFork {
		return bad(errors.New("zygote: bad request"))
	}
	// A hidden path that appeared since the root was built would be
	// visible: a new zygote builds a root that covers it.
	for _, h := range z.watch {
		if _, err := os.Lstat(h); err == nil {
			return []byte{ZygoteStale}
		}
	}
	// The init inherits this thread's bounding set, so this thread's
	// must be empty too: the runtime runs serve's goroutine on any of its
	// threads, and each has a set of its own. With only the main thread's
	// emptied, each init dropped the 40 capabilities itself, a credential
	// change each (commit_creds, plus what the host hooks on it): about
	// 0.05 ms per run (BENCHMARKS.md "Issue 26 — sandbox CPU, the
	// zygote's threads and the gateway's side"). The init still checks
	// every capability, whatever it inherits.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if tid, _, _ := syscall.RawSyscall(syscall.SYS_GETTID, 0, 0, 0); !z.noBounding[int(tid)] {
		if err := dropBoundingSet(); err != nil {
			return bad(err)
		}
		if z.ownStack >= 0 && threadHasRseq(z.region) {
			// A glibc-linked build whose zygote did not get the tunable
			// that turns it off (see the gateway's zygoteEnv): the init
			// could not run without this thread's memory. Whole copies,
			// from now on.
			z.ownStack = -1
			z.mapsBuf = markDontFork(z.maps, z.region, z.mapsBuf, unix.MADV_DOFORK, z.keepLo, z.keepHi)
		}
		z.noBounding[int(tid)] = true
	}
	a := z.args
	// The child's sources, each at cfdCount or above: moving them into
	// 0–4 there never overwrites one not yet moved. The zygote keeps its
	// own 0–4 open (zygoteMain), so what comes with a request lands above
	// them and needs no move; one below (a zygote whose 0–4 were not all
	// open) is copied to cfdLow and up for the fork.
	src := [cfdCount]int{z.devNull, fds[0], fds[1], fds[2], fds[3]}
	var moved [cfdCount]bool
	closeMoved := func() {
		for i, m := range moved {
			if m {
				rawClose(a.fds[i])
			}
		}
	}
	for i, f := range src {
		if f >= cfdCount {
			a.fds[i] = f
			continue
		}
		d, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(f), syscall.F_DUPFD_CLOEXEC, cfdLow)
		if e != 0 {
			closeMoved()
			return bad(fmt.Errorf("zygote: dup: %w", e))
		}
		a.fds[i], moved[i] = int(d), true
	}
	pid, errno := z.forkOne(a)
	closeMoved()
	if errno != 0 {
		return bad(fmt.Errorf("zygote: clone (namespaces): %w", errno))
	}
	z.reply = strconv.AppendInt(append(z.reply[:0], ZygotePid, ' '), int64(pid), 10)
	return z.reply
}

// remarkEvery: how many forks apart the zygote marks its mappings again
// (markDontFork): a mapping the runtime made since is copied into each
// init until then, which costs time, not safety.
const remarkEvery = 64

// forkOne forks the init: onto the region's stack with clone3 where the
// kernel can, else as fork(2) does.
func (z *zygote) forkOne(a *forkArgs) (int, syscall.Errno) {
	if z.ownStack >= 0 {
		// The init's signal mask: this thread's, as the runtime would
		// restore it in a forked child (beforeFork blocks every signal).
		syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_BLOCK, 0, uintptr(unsafe.Pointer(&a.sigmask)), 8, 0, 0)
		pid, errno := forkInitOwnStack(a, &z.clone)
		if z.ownStack == 0 {
			if errno == syscall.ENOSYS || errno == syscall.EINVAL || errno == syscall.E2BIG {
				z.ownStack = -1
				return z.forkOne(a)
			}
			if errno == 0 {
				z.ownStack = 1
			}
		}
		if errno == 0 {
			// Only now is nothing of the heap needed in an init.
			if z.forks%remarkEvery == 0 {
				z.mapsBuf = markDontFork(z.maps, z.region, z.mapsBuf, unix.MADV_DONTFORK, z.keepLo, z.keepHi)
			}
			z.forks++
		}
		return pid, errno
	}
	return forkInit(a)
}

// llRule is one Landlock path rule the child adds.
type llRule struct {
	path *byte
	attr unix.LandlockPathBeneathAttr
}

// rlimit is one resource limit the child sets (prlimit64).
type rlimit struct {
	res uintptr
	lim unix.Rlimit
}

// forkArgs is everything the forked init reads; built before the fork.
// The child writes only into its own copy, and never a Go pointer.
type forkArgs struct {
	cloneFlags uintptr
	fds        [cfdCount]int

	proc, procFS, tmp, tmpFS, tmpOpts, shm, shmOpts, work, empty *byte
	hostname                                                     *byte
	hostnameLen                                                  uintptr

	rlimits  [6]rlimit // RLIMIT_CPU (index rlimitCPU) comes with the run
	uid, gid uintptr

	capHdr  unix.CapUserHeader
	capData [2]unix.CapUserData
	resid   [3]uint32 // getresuid's answer

	llAttr  unix.LandlockRulesetAttr
	llSize  uintptr // 0: no Landlock on this kernel
	llRules []llRule

	fprog unix.SockFprog

	// The run, as it arrives (ZygoteRun).
	iov    unix.Iovec
	hdr    unix.Msghdr
	run    [ZygoteRunMax + 1]byte
	oob    [64]byte
	ptrs   [zygoteMaxPtr]uintptr // argv, nil, envp, nil
	workFD uintptr
	arg0   int // offset of argv[0] in run

	ready []byte
	msg   [256]byte // the status line being written
	ws    uint32

	sigmask uint64                  // the init's signal mask (clone3: set by childStart)
	names   *[len(stepNames)]string // stepNames, in the region
}

const rlimitCPU = 4

// Steps whose failure the child reports (StatusSetupErr, or StatusExecErr
// for the last two).
var stepNames = [...]string{
	"init: descriptors", "init: read run", "init: bad run spec", "init: the work dir's mount did not come with the run",
	"init: mount /proc (PID namespace)", "init: mount /tmp", "init: mount /dev/shm",
	"init: attach work dir", "init: work dir private", "init: sethostname (UTS namespace)", "init: setrlimit",
	"init: setpriority", "init: clear ambient capabilities", "init: drop capability from the bounding set",
	"init: setgroups", "init: setresgid", "init: setresuid", "init: capset", "init: refusing to run the program as uid 0",
	"init: no_new_privs", "init: landlock_create_ruleset", "init: landlock rule", "init: landlock_restrict_self",
	"init: seccomp filter", "start", "wait",
}

const (
	stepFDs = iota
	stepRead
	stepBadRun
	stepNoWork
	stepProc
	stepTmp
	stepShm
	stepWork
	stepWorkPrivate
	stepHostname
	stepRlimit
	stepNice
	stepAmbient
	stepBounding
	stepGroups
	stepGID
	stepUID
	stepCapset
	stepRoot
	stepNNP
	stepLLCreate
	stepLLRule
	stepLLRestrict
	stepSeccomp
	stepStart
	stepWait
)

// errnoSep precedes the number in a failed step's status line; the
// gateway replaces ": errno N" with the error's text (ErrnoText).
const errnoSep = ": errno "

// atFDCWD is AT_FDCWD (-100) as a system call argument.
const atFDCWD = ^uintptr(99)

// ErrnoText turns a forked init's "…: errno N" status payload into the
// error's text, as a re-executed init words it.
func ErrnoText(payload string) string {
	i := len(payload) - 1
	for i >= 0 && payload[i] >= '0' && payload[i] <= '9' {
		i--
	}
	head := payload[:i+1]
	if i == len(payload)-1 || !strings.HasSuffix(head, errnoSep) {
		return payload
	}
	n, err := strconv.Atoi(payload[i+1:])
	if err != nil || n == 0 {
		return strings.TrimSuffix(head, errnoSep)
	}
	return strings.TrimSuffix(head, errnoSep) + ": " + syscall.Errno(n).Error()
}

// forkArgs builds what every fork shares (the limits, the Landlock rules,
// the seccomp filter), in the fork region, with everything it points to:
// an init reads nothing else of the zygote's memory.
func (z *zygote) forkArgs() *forkArgs {
	sp := z.spec
	r := z.region
	cstr := r.cstr
	a := (*forkArgs)(r.alloc(unsafe.Sizeof(forkArgs{})))
	a.cloneFlags = unix.CLONE_PARENT | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS |
		unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | uintptr(unix.SIGCHLD)
	a.proc, a.procFS, a.tmp, a.tmpFS = cstr("/proc"), cstr("proc"), cstr("/tmp"), cstr("tmpfs")
	a.tmpOpts = cstr("mode=1777,size=" + strconv.FormatInt(sp.TmpSize, 10))
	a.shm, a.shmOpts, a.work, a.empty = cstr("/dev/shm"), cstr("mode=1777,size=16m"), cstr(WorkDir), cstr("")
	a.hostname, a.hostnameLen = cstr("silas-sandbox"), uintptr(len("silas-sandbox"))
	a.rlimits = [6]rlimit{
		{unix.RLIMIT_NPROC, unix.Rlimit{Cur: sp.NProc, Max: sp.NProc}},
		{unix.RLIMIT_DATA, unix.Rlimit{Cur: sp.Data, Max: sp.Data}},
		{unix.RLIMIT_FSIZE, unix.Rlimit{Cur: sp.FSize, Max: sp.FSize}},
		{unix.RLIMIT_NOFILE, unix.Rlimit{Cur: sp.NoFile, Max: sp.NoFile}},
		{unix.RLIMIT_CPU, unix.Rlimit{}}, // rlimitCPU: the run's
		{unix.RLIMIT_CORE, unix.Rlimit{}},
	}
	a.uid, a.gid = uintptr(sp.UID), uintptr(sp.GID)
	a.capHdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	a.ready = unsafe.Slice((*byte)(r.alloc(2)), 2)
	a.ready[0], a.ready[1] = StatusReady, '\n'
	a.names = (*[len(stepNames)]string)(r.alloc(unsafe.Sizeof(stepNames)))
	for i, n := range stepNames {
		a.names[i] = unsafe.String(cstr(n), len(n))
	}
	a.iov.Base = &a.run[0]
	a.iov.SetLen(ZygoteRunMax) // run[n] stays in bounds
	a.hdr.Iov = &a.iov
	a.hdr.Iovlen = 1
	a.hdr.Control = &a.oob[0]
	if abi := LandlockABI(); abi > 0 {
		// restrictLandlock's ruleset, for a network-off run.
		fs := llHandledFS(abi)
		a.llAttr = unix.LandlockRulesetAttr{Handled_access_fs: fs}
		a.llSize = unsafe.Sizeof(a.llAttr.Handled_access_fs)
		if abi >= 4 {
			a.llAttr.Handled_access_net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
			a.llSize += unsafe.Sizeof(a.llAttr.Handled_access_net)
		}
		if abi >= 6 {
			a.llAttr.Scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
			a.llSize += unsafe.Sizeof(a.llAttr.Scoped)
		}
		rules := []llRule{}
		add := func(p string, access uint64) {
			rules = append(rules, llRule{path: cstr(p), attr: unix.LandlockPathBeneathAttr{Allowed_access: access & fs}})
		}
		add("/", llRead)
		add(WorkDir, fs)
		add("/tmp", fs)
		add("/dev/shm", fs)
		for _, f := range devFiles {
			// Files: only the rights that make sense on one (llAddPath).
			add("/dev/"+f, (unix.LANDLOCK_ACCESS_FS_READ_FILE|unix.LANDLOCK_ACCESS_FS_WRITE_FILE|llTruncate)&llFileRights)
		}
		a.llRules = unsafe.Slice((*llRule)(r.alloc(uintptr(len(rules))*unsafe.Sizeof(llRule{}))), len(rules))
		copy(a.llRules, rules)
	}
	filter := unsafe.Slice((*unix.SockFilter)(r.alloc(uintptr(len(z.filter))*unsafe.Sizeof(unix.SockFilter{}))), len(z.filter))
	copy(filter, z.filter)
	a.fprog = unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	// clone3's arguments: the same namespaces, onto the region's stack,
	// every handled signal back to its default in the child (what the
	// runtime's AfterForkInChild does after a fork). No exit signal:
	// clone3 refuses one with CLONE_PARENT, which gives the child the
	// zygote's own (SIGCHLD, to the gateway), as clone(2) does.
	z.clone = cloneArgs{
		flags:     uint64(a.cloneFlags&^0xff) | unix.CLONE_CLEAR_SIGHAND | unix.CLONE_SETTLS,
		stack:     uint64(r.base() + regionTLS),
		stackSize: regionStack,
		tls:       uint64(r.base() + regionTLS),
	}
	return a
}
