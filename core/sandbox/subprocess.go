//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/silas-gateway/silas/core"
)

// waitDelay bounds how long Run waits for stdout/stderr to close after the
// program exited or was killed (a process that escaped the process group may
// hold them open). After it the pipes are closed and Run returns.
const waitDelay = 2 * time.Second

// probeTimeout bounds the network-namespace probe in New.
const probeTimeout = 10 * time.Second

// Subprocess is the subprocess sandbox backend. It is safe for concurrent
// use. See the package documentation for what it isolates and what not.
type Subprocess struct {
	baseDir        string // absolute, symlinks resolved
	defaultTimeout time.Duration
	maxOutput      int
	cred           *syscall.Credential // nil: run as the gateway's user
	runAs          string
	netMode        nsMode
	log            *slog.Logger
}

var _ core.Sandbox = (*Subprocess)(nil)

// New validates cfg, prepares BaseDir, resolves RunAs and probes once whether
// network namespaces can be created here (see [Subprocess.NetworkIsolation]).
// An unavailable network namespace is not an error here: requests that need
// it are refused by Run.
func New(cfg Config) (*Subprocess, error) {
	if cfg.BaseDir == "" {
		return nil, errors.New("sandbox: Config.BaseDir is required")
	}
	if cfg.DefaultTimeout < 0 {
		return nil, errors.New("sandbox: Config.DefaultTimeout must not be negative")
	}
	if cfg.MaxOutput < 0 {
		return nil, errors.New("sandbox: Config.MaxOutput must not be negative")
	}
	s := &Subprocess{
		defaultTimeout: cfg.DefaultTimeout,
		maxOutput:      cfg.MaxOutput,
		log:            cfg.Logger,
		runAs:          cfg.RunAs,
	}
	if s.defaultTimeout == 0 {
		s.defaultTimeout = DefaultTimeout
	}
	if s.maxOutput == 0 {
		s.maxOutput = DefaultMaxOutput
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}

	base, err := filepath.Abs(cfg.BaseDir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: base dir: %w", err)
	}
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: create base dir: %w", err)
	}
	if base, err = filepath.EvalSymlinks(base); err != nil {
		return nil, fmt.Errorf("sandbox: base dir: %w", err)
	}
	fi, err := os.Stat(base)
	if err != nil {
		return nil, fmt.Errorf("sandbox: base dir: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("sandbox: base dir %q is not a directory", base)
	}
	s.baseDir = base

	if cfg.RunAs != "" {
		cred, err := lookupCredential(cfg.RunAs)
		if err != nil {
			return nil, err
		}
		euid := os.Geteuid()
		switch {
		case euid == 0:
			s.cred = cred
		case int(cred.Uid) == euid:
			// Already that user; nothing to drop.
		default:
			return nil, fmt.Errorf("sandbox: RunAs %q requires the gateway to run as root", cfg.RunAs)
		}
		if s.cred != nil && fi.Mode().Perm()&0o001 == 0 {
			// The child chdirs into its work dir after dropping privileges,
			// so it must be able to traverse BaseDir. Traverse only: others
			// still cannot list it.
			if err := os.Chmod(base, fi.Mode().Perm()|0o001); err != nil {
				return nil, fmt.Errorf("sandbox: make base dir traversable for %q: %w", cfg.RunAs, err)
			}
		}
	}

	probe := cfg.netnsProbe
	if probe == nil {
		probe = probeNetNS
	}
	s.netMode = probe(s)
	if s.netMode == nsNone {
		s.log.LogAttrs(context.Background(), slog.LevelWarn,
			"sandbox: network namespaces unavailable; runs without network access will be refused")
	} else {
		s.log.LogAttrs(context.Background(), slog.LevelDebug, "sandbox: network isolation available",
			slog.String("mode", s.netMode.String()))
	}
	return s, nil
}

// NetworkIsolation reports whether network namespaces work on this host
// (probed once in New). When false, requests with Network == false fail with
// core.ErrIsolationUnavailable.
func (s *Subprocess) NetworkIsolation() bool { return s.netMode != nsNone }

// BaseDir returns the directory work directories are created under.
func (s *Subprocess) BaseDir() string { return s.baseDir }

// Run executes req.Argv. A program that ran (even if it failed, was killed by
// a signal or timed out) is a result; an error means it could not be run as
// requested: invalid request, isolation unavailable, program not found, or
// could not start. If ctx (rather than req.Timeout) ends the run, the result
// has TimedOut set and Run additionally returns an error wrapping ctx's cause.
func (s *Subprocess) Run(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return core.ExecResult{}, errors.New("sandbox: empty argv")
	}
	if req.Timeout < 0 {
		return core.ExecResult{}, errors.New("sandbox: negative timeout")
	}
	if req.OutputLimit < 0 {
		return core.ExecResult{}, errors.New("sandbox: negative output limit")
	}
	isolate := !req.Network
	if isolate && s.netMode == nsNone {
		// Fail closed: never run without the isolation the request needs.
		return core.ExecResult{}, fmt.Errorf("sandbox: network isolation (network namespaces) is not available on this host; refusing to run without it: %w", core.ErrIsolationUnavailable)
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			// The key is not secret; the value is never echoed.
			return core.ExecResult{}, fmt.Errorf("sandbox: invalid environment variable %q", k)
		}
	}
	if req.Dir != "" {
		if !filepath.IsAbs(req.Dir) {
			return core.ExecResult{}, fmt.Errorf("sandbox: work dir %q must be absolute", req.Dir)
		}
		fi, err := os.Stat(req.Dir)
		if err != nil {
			return core.ExecResult{}, fmt.Errorf("sandbox: work dir: %w", err)
		}
		if !fi.IsDir() {
			return core.ExecResult{}, fmt.Errorf("sandbox: work dir %q is not a directory", req.Dir)
		}
	}
	prog, err := resolveProgram(req.Argv[0], req.Dir)
	if err != nil {
		return core.ExecResult{}, err
	}

	timeout := req.Timeout
	if timeout == 0 {
		timeout = s.defaultTimeout
	}
	limit := req.OutputLimit
	if limit == 0 {
		limit = s.maxOutput
	}

	dir, fresh := req.Dir, false
	if dir == "" {
		if dir, err = s.newWorkDir(); err != nil {
			return core.ExecResult{}, err
		}
		fresh = true
	}

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	stdout := &capWriter{limit: limit}
	stderr := &capWriter{limit: limit}
	cmd := exec.CommandContext(runCtx, prog, req.Argv[1:]...)
	cmd.Args[0] = req.Argv[0]
	cmd.Env = buildEnv(req.Env, dir)
	cmd.Dir = dir
	cmd.Stdin = nil // /dev/null
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.SysProcAttr = s.sysProcAttr(isolate)
	cmd.WaitDelay = waitDelay

	// exited/killed coordinate the group kill on timeout with reaping: the
	// process group is only signalled while its leader is not yet reaped, so
	// its id cannot have been reused by an unrelated process.
	var (
		mu             sync.Mutex
		exited, killed bool
	)
	cmd.Cancel = func() error {
		mu.Lock()
		defer mu.Unlock()
		if exited {
			return os.ErrProcessDone
		}
		killed = true
		return killGroup(cmd.Process.Pid)
	}

	start := time.Now()
	if err := cmd.Start(); err != nil {
		if fresh {
			_ = os.RemoveAll(dir)
		}
		if ctx.Err() != nil {
			return core.ExecResult{}, fmt.Errorf("sandbox: start %q: %w", req.Argv[0], context.Cause(ctx))
		}
		return core.ExecResult{}, fmt.Errorf("sandbox: start %q: %w", req.Argv[0], err)
	}
	pid := cmd.Process.Pid

	// Wait for the program to exit without reaping it, then kill whatever it
	// left behind in its process group (background jobs holding stdout
	// open), then reap. If waitid fails we still reap below.
	_ = waitExitNoReap(pid)
	mu.Lock()
	exited = true
	_ = killGroup(pid)
	mu.Unlock()

	waitErr := cmd.Wait()
	dur := time.Since(start)
	if cmd.ProcessState == nil {
		return core.ExecResult{}, fmt.Errorf("sandbox: wait %q: %w", req.Argv[0], waitErr)
	}

	res := core.ExecResult{
		Stdout:    stdout.buf,
		Stderr:    stderr.buf,
		Truncated: stdout.truncated || stderr.truncated,
		TimedOut:  killed,
		Duration:  dur,
		Dir:       dir,
		Isolation: "none",
	}
	if isolate {
		res.Isolation = "netns"
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case killed:
		res.ExitCode = -1
	case ws.Signaled():
		res.ExitCode = 128 + int(ws.Signal())
	default:
		res.ExitCode = ws.ExitStatus()
	}

	s.log.LogAttrs(ctx, slog.LevelDebug, "sandbox exec",
		slog.String("program", req.Argv[0]),
		slog.Duration("duration", dur),
		slog.Int("exit_code", res.ExitCode),
		slog.Bool("timed_out", res.TimedOut),
		slog.Bool("truncated", res.Truncated),
		slog.Bool("output_pipes_forced_closed", errors.Is(waitErr, exec.ErrWaitDelay)),
		slog.String("isolation", res.Isolation),
	)

	if killed && ctx.Err() != nil {
		return res, fmt.Errorf("sandbox: %q stopped: %w", req.Argv[0], context.Cause(ctx))
	}
	return res, nil
}

// Cleanup removes a work directory returned in ExecResult.Dir. It refuses
// any path that is not strictly below BaseDir (after resolving symlinks in
// its parent), so it cannot be abused to delete elsewhere. Removing a
// directory that no longer exists is not an error.
func (s *Subprocess) Cleanup(dir string) error {
	if dir == "" || !filepath.IsAbs(dir) {
		return fmt.Errorf("sandbox: cleanup: refusing %q: not an absolute path", dir)
	}
	clean := filepath.Clean(dir)
	if !isBelow(s.baseDir, clean) {
		return fmt.Errorf("sandbox: cleanup: refusing %q: not under base dir %q", dir, s.baseDir)
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(clean))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("sandbox: cleanup: %w", err)
	}
	target := filepath.Join(parent, filepath.Base(clean))
	if !isBelow(s.baseDir, target) {
		return fmt.Errorf("sandbox: cleanup: refusing %q: resolves outside base dir %q", dir, s.baseDir)
	}
	if err := os.RemoveAll(target); err != nil {
		return fmt.Errorf("sandbox: cleanup: %w", err)
	}
	return nil
}

// isBelow reports whether p is strictly below base (both clean, absolute).
func isBelow(base, p string) bool {
	rel, err := filepath.Rel(base, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return false
	}
	return !filepath.IsAbs(rel)
}

func (s *Subprocess) newWorkDir() (string, error) {
	dir, err := os.MkdirTemp(s.baseDir, "exec-") // mode 0700
	if err != nil {
		return "", fmt.Errorf("sandbox: create work dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil { // independent of umask
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("sandbox: create work dir: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("sandbox: chown work dir to %q: %w", s.runAs, err)
		}
	}
	return dir, nil
}

// sysProcAttr is the process attributes for one run; the probe uses the same
// function so it tests exactly what Run will do.
func (s *Subprocess) sysProcAttr(isolate bool) *syscall.SysProcAttr {
	return s.sysProcAttrMode(isolate, s.netMode)
}

func (s *Subprocess) sysProcAttrMode(isolate bool, mode nsMode) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{
		Setpgid:   true,            // own process group, killed as a whole
		Pdeathsig: syscall.SIGKILL, // die with the gateway
	}
	if s.cred != nil {
		c := *s.cred
		c.Groups = []uint32{} // setgroups(0): drop root's supplementary groups
		attr.Credential = &c
	}
	if !isolate {
		return attr
	}
	switch mode {
	case nsNet:
		attr.Cloneflags |= syscall.CLONE_NEWNET
	case nsUserNet:
		uid, gid := os.Geteuid(), os.Getegid()
		if s.cred != nil {
			uid, gid = int(s.cred.Uid), int(s.cred.Gid)
		}
		attr.Cloneflags |= syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		// Dropping groups needs setgroups inside the namespace, which only a
		// privileged parent may allow; unprivileged callers have no groups
		// to drop.
		attr.GidMappingsEnableSetgroups = s.cred != nil
	}
	return attr
}

// probeNetNS finds the first isolation mode under which a trivial program
// runs here.
func probeNetNS(s *Subprocess) nsMode {
	modes := []nsMode{nsUserNet}
	if os.Geteuid() == 0 {
		modes = []nsMode{nsNet, nsUserNet}
	}
	for _, m := range modes {
		err := s.probeMode(m)
		if err == nil {
			return m
		}
		s.log.LogAttrs(context.Background(), slog.LevelDebug, "sandbox: network namespace probe failed",
			slog.String("mode", m.String()), slog.String("error", err.Error()))
	}
	return nsNone
}

// probeMode runs /bin/true (or /usr/bin/true) isolated with mode.
func (s *Subprocess) probeMode(m nsMode) error {
	var prog string
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		if isExecutableFile(p) == nil {
			prog = p
			break
		}
	}
	if prog == "" {
		return errors.New("no /bin/true or /usr/bin/true to probe with")
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog)
	cmd.Env = []string{"PATH=" + MinimalPath}
	cmd.Dir = "/"
	cmd.SysProcAttr = s.sysProcAttrMode(true, m)
	cmd.WaitDelay = waitDelay
	return cmd.Run()
}

// resolveProgram finds argv[0]: names without a slash are looked up in
// MinimalPath only; relative paths with a slash are relative to the work dir.
func resolveProgram(name, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			if dir == "" {
				// A fresh work dir is empty: nothing relative can exist.
				return "", fmt.Errorf("sandbox: program %q not found (relative to a fresh, empty work dir): %w", name, fs.ErrNotExist)
			}
			p = filepath.Join(dir, p)
		}
		if err := isExecutableFile(p); err != nil {
			return "", fmt.Errorf("sandbox: program %q: %w", name, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(MinimalPath) {
		p := filepath.Join(d, name)
		if isExecutableFile(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("sandbox: program %q not found in %s: %w", name, MinimalPath, exec.ErrNotFound)
}

func isExecutableFile(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("not found: %w", fs.ErrNotExist)
		}
		return err
	}
	if fi.IsDir() {
		return errors.New("is a directory")
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not executable: %w", fs.ErrPermission)
	}
	return nil
}

// buildEnv returns req env plus defaults, sorted; never the gateway's env.
func buildEnv(reqEnv map[string]string, dir string) []string {
	env := make(map[string]string, len(reqEnv)+3)
	env["PATH"] = MinimalPath
	env["HOME"] = dir
	env["LANG"] = "C.UTF-8"
	for k, v := range reqEnv {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func lookupCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		var uerr error
		if u, uerr = user.LookupId(name); uerr != nil {
			return nil, fmt.Errorf("sandbox: RunAs user %q: %w", name, err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("sandbox: RunAs user %q: bad uid %q", name, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("sandbox: RunAs user %q: bad gid %q", name, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// killGroup sends SIGKILL to the process group pgid.
func killGroup(pgid int) error {
	if pgid <= 0 {
		return errors.New("sandbox: bad process group")
	}
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// waitExitNoReap blocks until child pid has exited, leaving it a zombie
// (waitid with WNOWAIT) so its pid and process group id stay reserved.
func waitExitNoReap(pid int) error {
	const pPID = 1     // P_PID
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return errno
		}
	}
}

// capWriter keeps the first limit bytes written and discards (but accepts)
// the rest, so the program is never blocked on a full pipe.
type capWriter struct {
	limit     int
	buf       []byte
	truncated bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	n := len(p)
	if room := w.limit - len(w.buf); room < n {
		w.truncated = true
		p = p[:max(room, 0)]
	}
	w.buf = append(w.buf, p...)
	return n, nil
}
