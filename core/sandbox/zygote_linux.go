//go:build linux

package sandbox

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/silas-gateway/silas/core/sandbox/sandboxinit"
)

// The gateway's side of the zygote (sandboxinit/zygote_linux.go says what
// it is). A root gateway whose work dirs are staged on tmpfs (fsmount)
// starts one zygote and forks its network-off runs from it; network-on
// runs (pasta attaches to a warm init), runs spoken to over their pipes
// and every run of an ordinary user keep the re-executed init. When no
// zygote is there (it could not start, died, or a hidden path appeared
// since it built its root) the run takes the re-executed init, and a new
// zygote is started in the background: the isolation is the same either
// way, only its cost differs.

// zygoteStartTimeout bounds how long a zygote may take to build its root.
const zygoteStartTimeout = 10 * time.Second

// zygoteReplyTimeout bounds how long a fork's reply may take.
const zygoteReplyTimeout = 10 * time.Second

// zygoteEnv is the zygote's environment: an init's, and in a build linked
// with glibc (cgo: the tests) no restartable sequences, which glibc
// registers in each thread's memory: the zygote's inits are forked without
// that memory (sandboxinit's fork region), and the kernel would write to
// it in each. A static build ignores it.
var zygoteEnv = append(slices.Clip(initEnv), "GLIBC_TUNABLES=glibc.pthread.rseq=0")

type zygote struct {
	cmd   *exec.Cmd
	sock  int         // SOCK_SEQPACKET, our end, non-blocking, out of the network poller; -1 once stopped
	ep    *os.File    // an epoll set of its own watching sock for input only, in the network poller (see startZygote)
	reply [4096]byte  // the zygote's reply (under mu)
	watch []string    // hidden paths not covered, visible if they appeared
	mu    sync.Mutex  // one fork's request and reply at a time
	dead  atomic.Bool // set under mu; read without it
}

// currentZygote returns the running zygote, or nil (starting one in the
// background when none is running or starting).
func (s *Subprocess) currentZygote() *zygote {
	s.zygMu.Lock()
	defer s.zygMu.Unlock()
	if s.zyg != nil && !s.zyg.dead.Load() {
		return s.zyg
	}
	if s.zygStarting || s.unavailable != nil {
		return nil
	}
	s.poolMu.Lock()
	closed := s.closed
	if !closed {
		s.poolWG.Add(1) // Close waits for it
	}
	s.poolMu.Unlock()
	if closed {
		return nil
	}
	s.zygStarting = true
	go func() {
		defer s.poolWG.Done()
		z, err := s.startZygote()
		s.zygMu.Lock()
		defer s.zygMu.Unlock()
		s.zygStarting = false
		if err != nil {
			s.log.LogAttrs(context.Background(), slog.LevelWarn, "sandbox: could not start the zygote; runs re-execute the init", slog.String("error", err.Error()))
			return
		}
		s.poolMu.Lock()
		closed := s.closed
		s.poolMu.Unlock()
		if closed {
			z.stop()
			return
		}
		s.zyg = z
	}()
	return nil
}

// startZygote starts the gateway's binary as the zygote and waits until
// it has built its root.
func (s *Subprocess) startZygote() (*zygote, error) {
	spec := initSpec{
		Zygote: true, Hide: s.hidden,
		NProc: uint64(s.limits.procs), Data: uint64(s.limits.memory), FSize: uint64(s.limits.fileSize),
		NoFile: uint64(s.limits.openFiles), TmpSize: s.limits.tmpSize, WorkSize: s.limits.work,
		SetUID: true, UID: s.uid, GID: s.gid, Root: filepath.Join(s.baseDir, rootMountPoint),
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("sandbox: zygote spec: %w", err)
	}
	if len(specJSON) > 60<<10 {
		return nil, fmt.Errorf("sandbox: zygote spec: %d bytes, more than a pipe holds", len(specJSON))
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	defer statusR.Close()
	specR, specW, err := os.Pipe()
	if err != nil {
		statusW.Close()
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	_, err = specW.Write(specJSON)
	specW.Close()
	if err != nil {
		statusW.Close()
		specR.Close()
		return nil, fmt.Errorf("sandbox: zygote spec: %w", err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		statusW.Close()
		specR.Close()
		return nil, fmt.Errorf("sandbox: socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(sp[1]), "zygote")
	cmd := exec.Command("/proc/self/exe", initSpecArg)
	cmd.Args[0] = initArg0 // the runs' /proc/1/cmdline is the zygote's: the same as an init's
	cmd.Env = zygoteEnv
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{statusW, theirs, specR} // fds 3, 4, 5 as for an init
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	// The zygote's runs die with the thread that started it (their
	// parent death signal): a thread kept for that alone (never exits).
	err = zygoteThread.do(cmd.Start)
	statusW.Close()
	specR.Close()
	theirs.Close()
	if err != nil {
		unix.Close(sp[0])
		return nil, fmt.Errorf("sandbox: start the zygote: %w", err)
	}
	// Waited on in the network poller, not in a blocking read: a
	// goroutine blocked in a system call keeps the runtime's sysmon
	// polling. A zygote that stops answering is replaced, not waited for
	// (fork's deadline). The socket itself is not in the poller: the
	// poller watches every descriptor for output too (edge-triggered),
	// and the zygote's read of each request makes ours writable — a
	// wake-up of an idle gateway for nothing, per run. An epoll set of
	// its own watches it for input only, and that set is in the poller.
	ep, err := sandboxinit.InputPoll(sp[0])
	if err != nil {
		unix.Close(sp[0])
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("sandbox: zygote socket: %w", err)
	}
	z := &zygote{cmd: cmd, sock: sp[0], ep: ep}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(statusR).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if strings.HasPrefix(l, string(statusReady)+" ") {
			// "R <hidden paths to watch, JSON>"
			if err := json.Unmarshal([]byte(l[2:]), &z.watch); err == nil {
				return z, nil
			}
		}
		z.stop()
		return nil, fmt.Errorf("sandbox: the zygote failed: %s", strings.TrimSpace(strings.TrimPrefix(l, string(statusSetupErr))))
	case <-time.After(zygoteStartTimeout):
		z.stop()
		<-line
		return nil, errors.New("sandbox: the zygote did not get ready")
	}
}

// stop ends the zygote (runs it forked are the gateway's children and
// go on).
func (z *zygote) stop() {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.stopLocked()
}

func (z *zygote) stopLocked() {
	if z.sock >= 0 {
		z.ep.Close()
		unix.Close(z.sock) // the zygote exits on EOF
		z.sock = -1
	}
	z.dead.Store(true)
	_ = z.cmd.Process.Kill()
	_ = z.cmd.Wait()
}

// errZygoteGone: the run could not be forked by the zygote and must take
// the re-executed init; nothing ran.
var errZygoteGone = errors.New("sandbox: no zygote")

// fork asks the zygote for an init with the given descriptors
// (sandboxinit.ZygoteFDs): it returns its pid, forked and waiting for
// its run.
func (z *zygote) fork(fds []int) (int, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.dead.Load() {
		return 0, errZygoteGone
	}
	rc, err := z.ep.SyscallConn()
	if err != nil {
		z.stopLocked()
		return 0, fmt.Errorf("%w: %w", errZygoteGone, err)
	}
	// Sent without waiting: one request at a time, each read by the
	// zygote before its reply, so a few bytes always fit (EAGAIN would
	// mean a zygote that stopped reading: it is replaced).
	var serr error
	for serr = unix.EINTR; serr == unix.EINTR; {
		serr = unix.Sendmsg(z.sock, []byte{sandboxinit.ZygoteFork}, unix.UnixRights(fds...), nil, 0)
	}
	if serr != nil {
		z.stopLocked()
		return 0, fmt.Errorf("%w: send: %w", errZygoteGone, serr)
	}
	var n int
	_ = z.ep.SetReadDeadline(time.Now().Add(zygoteReplyTimeout))
	if err := rc.Read(func(uintptr) bool {
		for serr = unix.EINTR; serr == unix.EINTR; {
			n, serr = unix.Read(z.sock, z.reply[:])
		}
		return serr != unix.EAGAIN
	}); err != nil || serr != nil || n == 0 {
		z.stopLocked()
		return 0, fmt.Errorf("%w: it died or did not answer", errZygoteGone)
	}
	reply := string(z.reply[:n])
	switch reply[0] {
	case sandboxinit.ZygotePid:
		pid, err := strconv.Atoi(strings.TrimSpace(reply[1:]))
		if err != nil || pid <= 0 {
			z.stopLocked()
			return 0, fmt.Errorf("%w: bad reply %q", errZygoteGone, reply)
		}
		return pid, nil
	case sandboxinit.ZygoteStale:
		z.stopLocked()
		return 0, fmt.Errorf("%w: a hidden path appeared since it built its root", errZygoteGone)
	default:
		return 0, fmt.Errorf("sandbox: zygote: %s", strings.TrimSpace(reply[1:]))
	}
}

// spawnZygote forks a warm init from the zygote: in new namespaces, in
// the run's cgroups, with a stage made ahead; it waits for its run on
// runW (sandboxinit.ZygoteRun).
func (s *Subprocess) spawnZygote(z *zygote) (*warmInit, error) {
	// The init's ends stay plain descriptors (sent to the zygote, then
	// closed), and none of ours is in the network poller: its stdout and
	// stderr are read from the init's own epoll set (initPoll), with its
	// pidfd. os.Pipe made both ends pollable: a non-blocking mode, a
	// poller registration and their undoing (Fd, Close) on each of three
	// init ends, per run.
	var ours []*os.File
	var theirs []int         // sandboxinit.ZygoteFDs, in its order: stdout, stderr, status, the run's socket
	outFDs := [2]int{-1, -1} // our ends of stdout, stderr (raw, blocking)
	fail := func(err error) (*warmInit, error) {
		closeAll(ours...)
		for _, fd := range theirs {
			unix.Close(fd)
		}
		for _, fd := range outFDs {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		return nil, err
	}
	// Our end of the status pipe stays blocking, out of the network
	// poller too: it is read once, after the init's exit (run), when
	// every line is in it and no writer is left.
	var sfd [2]int
	if err := unix.Pipe2(sfd[:], unix.O_CLOEXEC); err != nil {
		return fail(fmt.Errorf("sandbox: pipe: %w", err))
	}
	statusR, statusW := os.NewFile(uintptr(sfd[0]), "status"), sfd[1]
	ours = append(ours, statusR)
	theirs = append(theirs, statusW)
	var err error
	var outW [2]int
	for i := range outFDs {
		if outFDs[i], outW[i], err = outputPipe(); err != nil {
			return fail(err)
		}
		theirs = append(theirs, outW[i])
	}
	theirs = []int{outW[0], outW[1], statusW}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("sandbox: socketpair: %w", err))
	}
	runW := os.NewFile(uintptr(sp[0]), "run")
	ours = append(ours, runW)
	theirs = append(theirs, sp[1])
	runR := sp[1]
	w := &warmInit{statusR: statusR, runW: runW, stdout: &capWriter{}, stderr: &capWriter{}, zygote: z}
	if s.cgroups != nil {
		if w.cg, err = s.cgroups.create(s.limits.procs, s.limits.memory); err != nil {
			return fail(err)
		}
	}
	pid, err := z.fork(theirs)
	if errors.Is(err, errZygoteGone) {
		// The zygote was stopped without its reply (it timed out, or the
		// zygote died): it may have forked the init before, a child of
		// ours whose pid never reached us. Found by the run socket it
		// holds, it is killed and reaped, not left a zombie.
		reapLostInit(runR)
	}
	for _, fd := range theirs {
		unix.Close(fd)
	}
	theirs = nil
	if err != nil {
		if w.cg != nil {
			w.cg.put()
		}
		return fail(err)
	}
	// Our child (CLONE_PARENT): nobody else reaps it, so the pid stays
	// its until we wait for it. Its pidfd (blocking: not in the network
	// poller) is polled in the init's epoll set with its stdout and
	// stderr (waitPolled): the run's goroutine waits for all three in one
	// wait — no goroutine per pipe, each woken at its end besides the
	// exit's wake-up — and signals the init through it.
	w.pid = pid
	pfd, err := unix.PidfdOpen(pid, 0)
	if err == nil {
		w.pidfd = os.NewFile(uintptr(pfd), "init")
		if w.poll, err = newInitPoll(outFDs, pfd); err == nil {
			outFDs = [2]int{-1, -1} // the poll's now
		}
	} else if err == unix.EINVAL || err == unix.ENOSYS {
		// No pidfd_open (before Linux 5.3): waited for in wait4, as
		// os/exec does, its output copied by a goroutine per pipe.
		w.proc, err = os.FindProcess(pid)
	}
	if err != nil || (w.pidfd == nil && w.proc == nil) {
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
		if w.pidfd != nil {
			w.pidfd.Close()
		}
		if w.cg != nil {
			w.cg.put()
		}
		return fail(fmt.Errorf("sandbox: the forked init: pidfd: %w", err))
	}
	if w.poll == nil {
		for _, fd := range outFDs {
			if err := unix.SetNonblock(fd, true); err != nil { // into the network poller
				_ = w.proc.Kill()
				_, _ = w.proc.Wait()
				if w.cg != nil {
					w.cg.put()
				}
				return fail(fmt.Errorf("sandbox: pipe: %w", err))
			}
		}
		outR, errR := os.NewFile(uintptr(outFDs[0]), "|1"), os.NewFile(uintptr(outFDs[1]), "|2")
		outFDs = [2]int{-1, -1}
		w.copied = make(chan struct{})
		w.pipes = []*os.File{outR, errR}
		// The second copy to end closes copied (no goroutine of its own to
		// wait for both).
		var left atomic.Int32
		left.Store(2)
		for _, c := range []struct {
			r *os.File
			w io.Writer
		}{{outR, w.stdout}, {errR, w.stderr}} {
			go func() {
				copyOutput(c.w, c.r)
				if left.Add(-1) == 0 {
					close(w.copied)
				}
			}()
		}
	}
	if w.cg != nil {
		if err := w.cg.add(pid); err != nil {
			w.discard()
			return nil, err
		}
	}
	if w.stage, err = s.newStage(); err != nil {
		w.discard()
		return nil, err
	}
	return w, nil
}

// waitZygoteInit waits for the zygote's init w to exit and reaps it
// (without a pidfd: its output is copied by goroutines, see wait).
func (w *warmInit) waitZygoteInit() error {
	ps, err := w.proc.Wait()
	if err != nil {
		return err
	}
	w.waited = true
	w.ws, _ = ps.Sys().(syscall.WaitStatus)
	return nil
}

// initPoll is a zygote init's own epoll set: our ends of its stdout and
// stderr and its pidfd, level-triggered. The set itself is in the
// network poller (it turns readable when one of them does), so the
// goroutine that waits for the run waits there once for all of them.
type initPoll struct {
	ep    *os.File // the epoll set, non-blocking, in the network poller
	fds   [2]int   // stdout, stderr: raw, blocking (read once per report); -1 once at their end
	pidfd int      // the init's pidfd (owned by warmInit.pidfd), out of the set once reaped
}

// The tags of the set's members (EpollEvent.Fd).
const (
	pollStdout = 0
	pollStderr = 1
	pollPidfd  = 2
)

// newInitPoll makes the set of out (stdout, stderr) and pidfd; out is the
// poll's once it returns no error.
func newInitPoll(out [2]int, pidfd int) (*initPoll, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("sandbox: epoll: %w", err)
	}
	for tag, fd := range []int{out[0], out[1], pidfd} {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(tag)}
		if err = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			break
		}
	}
	if err == nil {
		// Non-blocking, so that os.NewFile puts it in the network
		// poller (an epoll descriptor has no other status flag to keep).
		_, err = unix.FcntlInt(uintptr(ep), unix.F_SETFL, unix.O_NONBLOCK)
	}
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("sandbox: epoll: %w", err)
	}
	return &initPoll{ep: os.NewFile(uintptr(ep), "init-poll"), fds: out, pidfd: pidfd}, nil
}

// closePipe takes our end of stdout or stderr out of the set and closes
// it (at its end, or given up on).
func (p *initPoll) closePipe(ep uintptr, i int) {
	if p.fds[i] < 0 {
		return
	}
	// Out of the set first: a fork elsewhere in the process may hold a
	// copy of the descriptor for a moment, and the set would go on
	// reporting the closed pipe.
	_ = unix.EpollCtl(int(ep), unix.EPOLL_CTL_DEL, p.fds[i], nil)
	unix.Close(p.fds[i])
	p.fds[i] = -1
}

// close closes the set and what is left of the pipes (idempotent).
func (p *initPoll) close() {
	if rc, err := p.ep.SyscallConn(); err == nil {
		_ = rc.Control(func(ep uintptr) {
			p.closePipe(ep, pollStdout)
			p.closePipe(ep, pollStderr)
		})
	}
	for i, fd := range p.fds { // the set is closed already
		if fd >= 0 {
			unix.Close(fd)
			p.fds[i] = -1
		}
	}
	p.ep.Close()
}

// waitPolled waits for the zygote's init w to exit and reaps it, copying
// its stdout and stderr to the capture meanwhile, and then up to
// waitDelay for both to reach their end (exec.ErrWaitDelay after that;
// its PID namespace is gone with it, so nothing of the run holds them).
// One goroutine — the caller's — and one wait at a time in the network
// poller for all three: a goroutine per pipe woke at its end, besides
// the exit's wake-up, and cost a goroutine start each per run.
func (w *warmInit) waitPolled() error {
	p := w.poll
	rc, err := p.ep.SyscallConn()
	if err != nil {
		return fmt.Errorf("sandbox: wait for the init: %w", err)
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var evs [3]unix.EpollEvent
	exited, deadline := false, false
	var werr error
	drain := func(ep uintptr, i int) {
		c := w.stdout
		if i == pollStderr {
			c = w.stderr
		}
		// One read per report: the set is level-triggered, so what is
		// left is reported again, and a read after a report does not
		// block (nothing else reads the pipe), so our end needs no
		// non-blocking mode (two fcntl per pipe per run).
		for p.fds[i] >= 0 {
			n, err := unix.Read(p.fds[i], buf)
			switch {
			case n > 0:
				_, _ = c.Write(buf[:n])
				return
			case err == unix.EINTR:
			default: // its end (or an error: nothing more comes from it)
				p.closePipe(ep, i)
			}
		}
	}
	reap := func(ep uintptr) {
		if exited {
			return
		}
		var ws syscall.WaitStatus
		n, err := syscall.Wait4(w.pid, &ws, syscall.WNOHANG, nil)
		for err == syscall.EINTR {
			n, err = syscall.Wait4(w.pid, &ws, syscall.WNOHANG, nil)
		}
		switch {
		case err != nil:
			werr = fmt.Errorf("sandbox: wait for the init: %w", err)
		case n == 0:
			return // running: its pidfd turns readable when it exits
		default:
			w.waited, w.ws = true, ws
		}
		exited = true
		if p.fds != [2]int{-1, -1} {
			// Output still to come (the init's exit closes its ends
			// before it turns its pidfd readable: seldom): out of the
			// set, or it would be reported on and on.
			_ = unix.EpollCtl(int(ep), unix.EPOLL_CTL_DEL, p.pidfd, nil)
		}
	}
	step := func(ep uintptr) bool {
		for {
			if exited && p.fds == [2]int{-1, -1} {
				return true // (its pidfd may be left in the set: reported on and on)
			}
			n, err := unix.EpollWait(int(ep), evs[:], 0)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				werr = fmt.Errorf("sandbox: wait for the init: epoll: %w", err)
				return true
			}
			if n == 0 {
				// Nothing ready: once exited, back to set the
				// output's deadline; else wait.
				return exited && !deadline
			}
			for _, ev := range evs[:n] {
				if ev.Fd == pollPidfd {
					reap(ep)
				} else {
					drain(ep, int(ev.Fd))
				}
			}
		}
	}
	for {
		err := rc.Read(step)
		if werr != nil && !exited {
			p.close()
			return werr
		}
		if err != nil {
			p.close()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return cmp.Or(werr, exec.ErrWaitDelay)
			}
			return cmp.Or(werr, fmt.Errorf("sandbox: wait for the init: %w", err))
		}
		if p.fds == [2]int{-1, -1} {
			return werr
		}
		// Exited, its output not at its end yet.
		_ = p.ep.SetReadDeadline(time.Now().Add(waitDelay))
		deadline = true
	}
}

// zygoteFits reports whether the zygote's warm init w can take a run in
// dir: it needs a stage (it cannot bind a caller's own dir), and no
// hidden path may have appeared since its zygote built the root (the
// zygote is then replaced; a re-executed init covers the path).
func (s *Subprocess) zygoteFits(w *warmInit, dir string) bool {
	if w.stage == nil || !isBelow(s.baseDir, dir) {
		return false
	}
	for _, h := range w.zygote.watch {
		if _, err := os.Lstat(h); err == nil {
			w.zygote.stop()
			return false
		}
	}
	return true
}

// reapLostInit kills and reaps every child of this process that holds
// sock (a forked init's end of its run socket) — an init whose zygote was
// stopped before its pid reached us. The zygote is dead and reaped by
// then, so no fork of it is still under way; a child is ours
// (CLONE_PARENT) and unreaped, so its pid is not reused while we look.
func reapLostInit(sock int) {
	var st unix.Stat_t
	if err := unix.Fstat(sock, &st); err != nil {
		return
	}
	want := "socket:[" + strconv.FormatUint(st.Ino, 10) + "]"
	self := strconv.Itoa(os.Getpid())
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue
		}
		// After the command (which may hold spaces): state, then ppid.
		_, rest, ok := strings.Cut(string(b), ") ")
		if f := strings.Fields(rest); !ok || len(f) < 2 || f[1] != self {
			continue
		}
		fds, err := os.ReadDir("/proc/" + p.Name() + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name()); err == nil && l == want {
				_ = unix.Kill(pid, unix.SIGKILL)
				var ws unix.WaitStatus
				for {
					if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
						break
					}
				}
				break
			}
		}
	}
}

// outputPipe makes a pipe for an init's stdout or stderr: its read end
// ours, its write end the init's (blocking, as a program expects its
// output to be), both plain descriptors, close-on-exec.
func outputPipe() (int, int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, fmt.Errorf("sandbox: pipe: %w", err)
	}
	return p[0], p[1], nil
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// zygoteThread starts zygotes from one OS thread that never exits: a
// run's parent death signal fires when the thread that started its
// zygote exits, not only when the gateway does.
var zygoteThread = &lockedThread{}

type lockedThread struct {
	once sync.Once
	jobs chan func()
}

func (t *lockedThread) do(f func() error) error {
	t.once.Do(func() {
		t.jobs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread stays
			for j := range t.jobs {
				j()
			}
		}()
	})
	done := make(chan error, 1)
	t.jobs <- func() { done <- f() }
	return <-done
}

// ZygoteCPU is the CPU time the running zygote has used so far (every
// thread's time on a CPU, from /proc/<pid>/task/*/schedstat, in ns): the
// part of the sandbox's cost that is not in the gateway's children's
// rusage until the zygote is reaped. Zero without one. (/proc/<pid>/stat's
// utime and stime count in 10 ms ticks: a whole benchmark's zygote CPU
// came out as a handful of ticks.)
func (s *Subprocess) ZygoteCPU() time.Duration {
	s.zygMu.Lock()
	z := s.zyg
	s.zygMu.Unlock()
	if z == nil || z.dead.Load() {
		return 0
	}
	dir := "/proc/" + strconv.Itoa(z.cmd.Process.Pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var d time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(dir + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		// "<ns on a CPU> <ns waiting> <timeslices>"
		f, _, _ := strings.Cut(string(b), " ")
		ns, _ := strconv.ParseInt(f, 10, 64)
		d += time.Duration(ns)
	}
	return d
}

// copyBufs are the buffers of the forked inits' output copies (two per
// run, each held until its init exits): pooled, not 32 kB of garbage per
// copy — io.Copy's own buffer was a quarter of what an execution
// allocated in silas-load's phase (c).
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// copyOutput copies r to w until r's end through a pooled buffer.
func copyOutput(w io.Writer, r *os.File) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	// Only r's Read: its WriteTo would copy through a buffer of its own.
	_, _ = io.CopyBuffer(w, struct{ io.Reader }{r}, *bp)
}
