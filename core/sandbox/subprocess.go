//go:build linux

package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/sandbox/sandboxinit"
)

// waitDelay bounds how long Run waits for stdout/stderr to close after the
// init exited (the kernel kills the rest of the PID namespace then, so this
// is only a safety net).
const waitDelay = 2 * time.Second

// rootMountPoint is the empty directory in BaseDir each run mounts its
// new root on (in its own mount namespace).
const rootMountPoint = ".root"

// stageGrace bounds how long an init that stages the work dir itself may
// take, once told to stop, to kill its run and copy the work dir back.
const stageGrace = 10 * time.Second

// probeTimeout bounds the isolation probe in New.
const probeTimeout = 10 * time.Second

// Subprocess is the subprocess sandbox backend. It is safe for concurrent
// use. See the package documentation for what it isolates.
type Subprocess struct {
	baseDir        string // absolute, symlinks resolved
	defaultTimeout time.Duration
	maxOutput      int
	uid, gid       uint32 // the program's uid/gid (host view)
	root           bool   // the gateway runs as root
	hidden         []string
	limits         limits
	ports          []uint16
	cgroups        *cgroups // nil: rlimits only
	landlock       int      // Landlock ABI, 0 when unavailable
	pasta          string   // network-on runs' network stack (netns_linux.go)
	netErr         error    // why network-on runs are refused; nil when pasta is there
	dns            netDNS   // where network-on runs' DNS queries go (sandbox.network_dns; netns_linux.go)
	unavailable    error    // why isolated runs are refused; nil when the probe passed
	log            *slog.Logger

	pools     map[bool]chan *warmInit // by ExecRequest.Network
	poolMu    sync.Mutex              // guards closed, refilling; held while starting refills
	refilling map[bool]int            // refills under way, by network mode
	poolWG    sync.WaitGroup          // refills in progress
	closed    bool

	// workTmpfs: the gateway stages each run's work dir in a tmpfs of
	// limits.work bytes it hands to the init (root, a kernel with
	// fsmount); otherwise the init stages it itself (workdir_linux.go).
	workTmpfs   bool
	keepWorkFor time.Duration // < 0: remove at release
	maxKept     int64
	workMu      sync.Mutex // serialises Release and pruning; guards kept, keptBytes
	kept        []keptWork // released work dirs kept, oldest first (nil: not read from the base dir yet)
	keptBytes   int64
	marked      map[string]bool  // kept dirs with an earlier version's marker file (exec-*.kept), from the start's scan
	now         func() time.Time // the clock releases are timed by (tests move it)

	// useZygote: network-off runs are forked by a zygote (zygote_linux.go)
	// instead of re-executing the gateway's binary (root, workTmpfs).
	// Atomic: New clears it when the zygote's probe fails, while the
	// probe's pool refill already reads it in spawn.
	useZygote   atomic.Bool
	zygMu       sync.Mutex // guards zyg, zygStarting
	zyg         *zygote
	zygStarting bool
	zygoteRuns  atomic.Int64 // runs a zygote's init took (tests)
}

type limits struct {
	procs     int
	memory    int64
	fileSize  int64
	openFiles int
	tmpSize   int64
	work      int64
}

var _ core.Sandbox = (*Subprocess)(nil)

// New validates cfg, prepares BaseDir, resolves the user programs run as,
// prepares cgroups and probes once whether every isolation the sandbox
// needs works here (see [Subprocess.Available]). Missing isolation is not an
// error here: Run refuses every request then, naming what is missing.
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
	if cfg.MaxProcs < 0 || cfg.MaxMemory < 0 || cfg.MaxFileSize < 0 || cfg.MaxOpenFiles < 0 || cfg.TmpSize < 0 || cfg.MaxWork < 0 || cfg.MaxKeptWork < 0 {
		return nil, errors.New("sandbox: limits must not be negative")
	}
	s := &Subprocess{
		defaultTimeout: cmp.Or(cfg.DefaultTimeout, DefaultTimeout),
		maxOutput:      cmp.Or(cfg.MaxOutput, DefaultMaxOutput),
		log:            cfg.Logger,
		root:           os.Geteuid() == 0,
		ports:          cfg.NetworkPorts,
		limits: limits{
			procs:     cmp.Or(cfg.MaxProcs, DefaultMaxProcs),
			memory:    cmp.Or(cfg.MaxMemory, DefaultMaxMemory),
			fileSize:  cmp.Or(cfg.MaxFileSize, DefaultMaxFileSize),
			openFiles: cmp.Or(cfg.MaxOpenFiles, DefaultMaxOpenFiles),
			tmpSize:   cmp.Or(cfg.TmpSize, DefaultTmpSize),
			work:      cmp.Or(cfg.MaxWork, DefaultMaxWork),
		},
		keepWorkFor: cmp.Or(cfg.KeepWorkFor, DefaultKeepWorkFor),
		maxKept:     cmp.Or(cfg.MaxKeptWork, DefaultMaxKeptWork),
		now:         time.Now,
	}
	if len(s.ports) == 0 {
		s.ports = DefaultNetworkPorts
	}
	s.pools = map[bool]chan *warmInit{false: make(chan *warmInit, poolSize), true: make(chan *warmInit, poolSize)}
	s.refilling = map[bool]int{}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	for _, h := range cfg.HiddenPaths {
		if h == "" {
			continue
		}
		a, err := filepath.Abs(h)
		if err != nil {
			return nil, fmt.Errorf("sandbox: hidden path %q: %w", h, err)
		}
		if r, err := filepath.EvalSymlinks(a); err == nil {
			a = r
		}
		if a == "/" {
			return nil, errors.New("sandbox: hidden path \"/\" would hide everything")
		}
		s.hidden = append(s.hidden, a)
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
	if err := os.Mkdir(filepath.Join(base, rootMountPoint), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("sandbox: create root mount point: %w", err)
	}

	if s.root {
		name := cmp.Or(cfg.RunAs, DefaultRunAs)
		cred, err := lookupCredential(name)
		if err != nil && cfg.RunAs == "" {
			// No "nobody" on this system: the conventional overflow ids.
			cred, err = &syscall.Credential{Uid: 65534, Gid: 65534}, nil
		}
		if err != nil {
			return nil, err
		}
		if cred.Uid == 0 {
			return nil, fmt.Errorf("sandbox: run_as %q is root; programs must run as an unprivileged user", name)
		}
		s.uid, s.gid = cred.Uid, cred.Gid
	} else {
		s.uid, s.gid = uint32(os.Geteuid()), uint32(os.Getegid())
		if cfg.RunAs != "" {
			cred, err := lookupCredential(cfg.RunAs)
			if err != nil {
				return nil, err
			}
			if cred.Uid != s.uid {
				return nil, fmt.Errorf("sandbox: run_as %q requires the gateway to run as root (it runs as uid %d)", cfg.RunAs, s.uid)
			}
		}
	}

	if s.root && !cfg.noCgroups {
		if s.cgroups, err = detectCgroups(); err != nil {
			s.log.LogAttrs(context.Background(), slog.LevelWarn, "sandbox: cgroups unavailable; runs are bounded by rlimits only",
				slog.String("error", err.Error()))
		}
	}
	s.landlock = landlockABI()
	s.pasta, s.netErr = findPasta(cfg.pasta)
	if err := s.configureDNS(cfg.NetworkDNS); err != nil {
		return nil, err
	}
	s.workTmpfs = s.root && s.stagesWork()
	// Work dirs a previous process released (or left behind) are pruned
	// now, then whenever a run is released.
	s.pruneWork(s.now(), true)
	if s.workTmpfs && !cfg.noZygote && cfg.forceUnavailable == "" {
		// Network-off runs are forked by a zygote (zygote_linux.go); the
		// probe below runs through it. Without one every run re-executes
		// the init, as isolated.
		if s.zyg, err = s.startZygote(); err != nil {
			s.log.LogAttrs(context.Background(), slog.LevelWarn, "sandbox: no zygote; every run re-executes the init", slog.String("error", err.Error()))
		} else {
			s.useZygote.Store(true)
			if err := s.probe(); err != nil {
				s.log.LogAttrs(context.Background(), slog.LevelWarn, "sandbox: the zygote's probe failed; every run re-executes the init", slog.String("error", err.Error()))
				s.useZygote.Store(false)
				s.zygMu.Lock() // the probe's pool refill may be asking currentZygote
				if s.zyg != nil {
					s.zyg.stop()
					s.zyg = nil
				}
				s.zygMu.Unlock()
			}
		}
	}
	probe := s.probe
	if cfg.forceUnavailable != "" {
		probe = func() error {
			return fmt.Errorf("sandbox: %s: %w", cfg.forceUnavailable, core.ErrIsolationUnavailable)
		}
	}
	if err := probe(); err != nil {
		s.Close() // no warm inits for a sandbox that refuses every run
		s.unavailable = err
		s.log.LogAttrs(context.Background(), slog.LevelWarn, "sandbox: isolation unavailable; every execution will be refused",
			slog.String("error", err.Error()))
	}
	return s, nil
}

// probe runs `true` fully isolated once.
func (s *Subprocess) probe() error {
	prog := ""
	for _, p := range []string{"/usr/bin/true", "/bin/true"} {
		if isExecutableFile(p) == nil {
			prog = p
			break
		}
	}
	if prog == "" {
		return errors.New("sandbox: no /usr/bin/true to probe the isolation with")
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	res, err := s.run(ctx, core.ExecRequest{Argv: []string{prog}, Timeout: probeTimeout}, prog, false)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("sandbox: probe: `true` exited %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	_ = s.Cleanup(res.Dir) // a leftover empty work dir is harmless
	return nil
}

// Available reports nil when isolated runs work here, or the reason they
// are all refused (wrapping core.ErrIsolationUnavailable).
func (s *Subprocess) Available() error { return s.unavailable }

// BaseDir returns the directory work directories are created under.
func (s *Subprocess) BaseDir() string { return s.baseDir }

// Isolation lists the isolation every run gets, for doctor and logs.
func (s *Subprocess) Isolation() []string {
	if s.unavailable != nil {
		return nil
	}
	iso := []string{
		fmt.Sprintf("runs as uid %d, gid %d, no supplementary groups, no capabilities, no_new_privs", s.uid, s.gid),
		"mount namespace (read-only /usr /etc /bin /lib…, private /tmp and /dev, work dir writable; data dir invisible)",
		"PID namespace (own /proc; everything is killed when the program ends)",
		s.networkIsolation(),
		"IPC, UTS and cgroup namespaces",
		"seccomp filter (mount, setns, unshare, ptrace, bpf, kexec, keyctl, modules… denied)",
	}
	if s.landlock > 0 {
		iso = append(iso, fmt.Sprintf("Landlock ABI %d (writes only in the work dir and /tmp; signals and abstract sockets scoped)", s.landlock))
	} else {
		iso = append(iso, "Landlock: not available on this kernel (mount namespace still hides the host)")
	}
	if s.workTmpfs {
		iso = append(iso, fmt.Sprintf("work dir: a tmpfs of %s per run (sandbox.max_work_bytes), no host path in its mountinfo", humanBytes(s.limits.work)))
	} else {
		iso = append(iso, fmt.Sprintf("work dir: a tmpfs of %s per run, staged by the sandbox's init (sandbox.max_work_bytes), no host path in its mountinfo", humanBytes(s.limits.work)))
	}
	lim := fmt.Sprintf("rlimits: %d processes, %s data per process, %s per file, %d open files, CPU time = timeout",
		s.limits.procs, humanBytes(s.limits.memory), humanBytes(s.limits.fileSize), s.limits.openFiles)
	iso = append(iso, lim)
	if s.cgroups != nil {
		v := "v1"
		if s.cgroups.v2 {
			v = "v2"
		}
		iso = append(iso, fmt.Sprintf("cgroups %s: pids.max %d, memory %s per run", v, s.limits.procs, humanBytes(s.limits.memory)))
	} else {
		iso = append(iso, "cgroups: not available (rlimits only)")
	}
	return iso
}

func portList(ps []uint16) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(p)))
	}
	return b.String()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	default:
		return fmt.Sprintf("%d B", n)
	}
}

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
	if s.unavailable != nil {
		// Fail closed: never run without the isolation.
		return core.ExecResult{}, s.unavailable
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			// The key is not secret; the value is never echoed.
			return core.ExecResult{}, fmt.Errorf("sandbox: invalid environment variable %q", k)
		}
	}
	absent := false
	if req.Dir != "" {
		if !filepath.IsAbs(req.Dir) {
			return core.ExecResult{}, fmt.Errorf("sandbox: work dir %q must be absolute", req.Dir)
		}
		fi, err := os.Stat(req.Dir)
		switch {
		case errors.Is(err, fs.ErrNotExist) && s.isWorkDir(req.Dir):
			// A work dir a staged run reserved and never needed (it
			// wrote nothing): empty, made if this run writes to it.
			absent = true
		case err != nil:
			return core.ExecResult{}, fmt.Errorf("sandbox: work dir: %w", err)
		case !fi.IsDir():
			return core.ExecResult{}, fmt.Errorf("sandbox: work dir %q is not a directory", req.Dir)
		}
	}
	prog, err := resolveProgram(req.Argv[0], req.Dir)
	if err != nil {
		return core.ExecResult{}, err
	}
	if !s.visible(prog, req.Dir) {
		return core.ExecResult{}, fmt.Errorf("sandbox: program %q is outside the sandbox's filesystem (it shows only %s and the work dir): %w",
			req.Argv[0], strings.Join(systemDirs, " "), fs.ErrNotExist)
	}
	return s.run(ctx, req, prog, absent)
}

// isWorkDir reports whether dir names a work dir of this sandbox (directly
// below the base dir, exec-*), whether or not it exists.
func (s *Subprocess) isWorkDir(dir string) bool {
	clean, err := s.workDirPath(dir)
	return err == nil && clean == dir
}

// visible reports whether prog can be seen inside the sandbox: below a
// system dir or the work dir, and not below a hidden path.
func (s *Subprocess) visible(prog, dir string) bool {
	if dir != "" && isBelow(dir, prog) {
		// The work dir is visible whatever it lies in (the data dir).
		return true
	}
	real, err := filepath.EvalSymlinks(prog)
	if err != nil {
		return false
	}
	for _, h := range s.hidden {
		if real == h || isBelow(h, real) {
			return false
		}
	}
	for _, d := range systemDirs {
		if isBelow(d, real) {
			return true
		}
	}
	return false
}

// run starts the sandbox's init (the gateway binary re-executed in new
// user, mount, PID, IPC, UTS, cgroup and — without network — network
// namespaces), lets it build the sandbox and start prog, and collects the
// result. absent: req.Dir is a work dir not made yet (empty).
func (s *Subprocess) run(ctx context.Context, req core.ExecRequest, prog string, absent bool) (core.ExecResult, error) {
	if err := ctx.Err(); err != nil {
		return core.ExecResult{}, fmt.Errorf("sandbox: start %q: %w", req.Argv[0], context.Cause(ctx))
	}
	timeout := cmp.Or(req.Timeout, s.defaultTimeout)
	limit := cmp.Or(req.OutputLimit, s.maxOutput)

	// A fresh dir is only named here: a staged run makes it when its
	// copy back has something to write, an unstaged one before the run
	// (below, once the init says which it is).
	dir, fresh := req.Dir, false
	var err error
	if dir == "" {
		dir, fresh, absent = s.reserveWorkDir(), true, true
	}
	fail := func(err error) (core.ExecResult, error) {
		if fresh && !absent { // made by this run (a reserved name may be another's)
			_ = removeWork(dir)
		}
		return core.ExecResult{}, err
	}

	inside := prog
	if rel, err := filepath.Rel(dir, prog); err == nil && isBelow(dir, prog) {
		inside = filepath.Join(SandboxWorkDir, rel)
	}
	var w *warmInit
	if req.Stdin != nil || req.Stdout != nil {
		// A run spoken to over its pipes gets an init of its own, started
		// with them (a pooled one was started with /dev/null and a capture).
		w, err = s.spawnIO(req.Network, req.Stdin, req.Stdout)
	} else {
		w, err = s.take(req.Network)
		defer s.refill(req.Network)
		if err == nil && w.zygote != nil && !s.zygoteFits(w, dir) {
			// The zygote's init cannot take this run: a re-executed one does.
			w.discard()
			w, err = s.spawnIO(req.Network, nil, nil)
		}
	}
	if err != nil {
		return fail(err)
	}
	defer w.release()
	if w.zygote != nil {
		s.zygoteRuns.Add(1)
	}

	// The program works on a bounded copy of its work dir
	// (workdir_linux.go): the stage the warm init came with, sent to it
	// with the run. Without one (an ordinary user) the init stages the
	// work dir itself.
	stg := w.stage
	w.stage = nil
	if absent && stg == nil {
		// The init stages the dir itself, from the host path: it must
		// exist.
		if dir, err = s.createWorkDir(dir, fresh); err != nil {
			w.discard()
			return fail(err)
		}
		absent = false
	}
	stageInInit := stg == nil && isBelow(s.baseDir, dir)
	mountFD := -1
	if stg != nil {
		defer stg.remove()
		if !isBelow(s.baseDir, dir) {
			stg = nil // a caller's own dir is bound as it is
		} else if !absent {
			if err := stg.fill(dir, s.limits.work, int(s.uid), int(s.gid)); err != nil {
				w.discard()
				return fail(err)
			}
		}
	}
	if stg != nil {
		mountFD = stg.fd
	}
	rs := runSpec{
		Program: inside, Argv: req.Argv, Env: buildEnv(req.Env, SandboxWorkDir), HostDir: dir,
		CPU: uint64(timeout/time.Second) + 1, WorkMount: mountFD >= 0, StageWork: stageInInit,
	}
	var runMsg []byte
	if w.zygote != nil {
		// The zygote's init reads its run in raw system calls: a flat
		// message, not JSON (sandboxinit.ZygoteRun).
		runMsg, err = sandboxinit.ZygoteRun(rs)
	} else {
		runMsg, err = json.Marshal(rs)
	}
	if err != nil {
		w.discard()
		return fail(fmt.Errorf("sandbox: spec: %w", err))
	}
	w.stdout.setLimit(limit)
	w.stderr.setLimit(limit)

	// The run's clock starts when the warm init gets its run.
	start := time.Now()
	var killed, ctxKilled atomic.Bool
	// Killing the init ends the PID namespace: the kernel kills every
	// process of the run, whatever session or group it moved to. An init
	// that stages the work dir itself is asked first (SIGTERM: it kills
	// the run and copies the work dir back), and killed after stageGrace.
	stop := func() {
		if !stageInInit {
			w.kill()
			return
		}
		w.signal(syscall.SIGTERM)
		time.AfterFunc(stageGrace, w.kill)
	}
	timer := time.AfterFunc(timeout, func() {
		killed.Store(true)
		stop()
	})
	stopWatch := context.AfterFunc(ctx, func() {
		ctxKilled.Store(true)
		killed.Store(true)
		stop()
	})
	werr := sendRun(w.runW, runMsg, mountFD)
	w.runW.Close()
	if werr != nil {
		// The init is gone: its status says why.
		w.kill()
	}

	// One wait: the init's exit. Its status lines (ready, the program's
	// exit, the stage's) are all in the pipe by then, and only the init
	// held its write end (the zygote closes its copy before it replies;
	// the program never gets it): read after the exit, they are read in
	// one go, not each line as it came — a wake-up of this process per
	// line (the program's exit line comes while the init still tears its
	// run down) on top of the exit's. Small lines: the init never blocks
	// on a pipe nobody reads while it runs.
	waitErr := w.wait()
	var statusBytes []byte
	if w.waited { // (else this run fails below, status or not)
		statusBytes, _ = io.ReadAll(w.statusR)
	}
	timer.Stop()
	stopWatch()
	dur := time.Since(start)
	if !w.waited {
		return fail(fmt.Errorf("sandbox: wait %q: %w", req.Argv[0], waitErr))
	}
	st := parseStatus(statusBytes)
	if w.zygote != nil {
		st.setupErr, st.execErr = errnoText(st.setupErr), errnoText(st.execErr)
	}
	switch {
	case st.setupErr != "":
		return fail(fmt.Errorf("sandbox: isolation setup failed: %s: %w", st.setupErr, core.ErrIsolationUnavailable))
	case st.execErr != "":
		return fail(fmt.Errorf("sandbox: %s", st.execErr))
	case !st.ready && !killed.Load():
		return fail(fmt.Errorf("sandbox: the sandbox's init died before it was ready (exit %d): %w", exitCode(w.ws), core.ErrIsolationUnavailable))
	}

	res := core.ExecResult{
		Stdout:    w.stdout.bytes(),
		Stderr:    w.stderr.bytes(),
		Truncated: w.stdout.wasTruncated() || w.stderr.wasTruncated(),
		TimedOut:  killed.Load(),
		Duration:  dur,
		Dir:       dir,
		Isolation: s.isolationTag(req.Network),
	}
	switch {
	case res.TimedOut:
		res.ExitCode = -1
	case st.exited:
		res.ExitCode = exitCode(st.ws)
	default:
		// The init ended without reporting: it was killed (the memory
		// cgroup's OOM killer, or the program signalled it).
		res.ExitCode = exitCode(w.ws)
		if res.ExitCode == 0 {
			res.ExitCode = 128 + int(syscall.SIGKILL)
		}
	}

	full, copyErr := st.workFull, st.workCopyErr
	// The init has exited: its PID namespace, every process of the run,
	// is gone, and nothing writes the stage any more. An absent dir (a
	// fresh one, only reserved) is empty, so when the run left its stage
	// empty too there is nothing to copy back, no dir to make, and an
	// empty tmpfs is not full: the mkdir, the statfs and both trees'
	// reads are skipped (a run that writes nothing in its work dir,
	// `echo x`, is the common one). Otherwise the dir is made now, with
	// an exclusive mkdir in the base dir (createWorkDir), and filled from
	// the stage; a run that failed or timed out keeps what it wrote too.
	if stg != nil && !(absent && stg.empty()) {
		full = workDirFull(stg.path)
		if absent {
			if made, err := s.createWorkDir(dir, fresh); err != nil {
				copyErr = err.Error()
				if fresh {
					res.Dir = "" // no dir holds this run's files (and its name may be another's)
				}
			} else {
				dir, res.Dir = made, made
				if err := sandboxinit.CopyTree(stg.path, dir, s.limits.work, int(s.uid), int(s.gid)); err != nil {
					copyErr = err.Error()
				}
			}
		} else if err := stg.copyBack(dir, s.limits.work, int(s.uid), int(s.gid)); err != nil {
			copyErr = err.Error()
		}
	}
	// Said in the result, where the person reading it looks: the
	// program's own message may be anything, or nothing.
	if full {
		res.Stderr = append(res.Stderr, fmt.Sprintf("\nsilas: the work dir is full: it reached sandbox.max_work_bytes (%s); writes past it failed with ENOSPC (no space left on device)\n",
			humanBytes(s.limits.work))...)
	}
	if copyErr != "" {
		res.Stderr = append(res.Stderr, fmt.Sprintf("\nsilas: the work dir could not be kept whole: %s\n", copyErr)...)
	}

	s.log.LogAttrs(ctx, slog.LevelDebug, "sandbox exec",
		slog.String("program", req.Argv[0]),
		slog.Duration("duration", dur),
		slog.Int("exit_code", res.ExitCode),
		slog.Bool("timed_out", res.TimedOut),
		slog.Bool("truncated", res.Truncated),
		slog.Bool("warm", w.warm),
		slog.Bool("zygote", w.zygote != nil),
		slog.Bool("output_pipes_forced_closed", errors.Is(waitErr, exec.ErrWaitDelay)),
		slog.String("isolation", res.Isolation),
	)

	if ctxKilled.Load() && ctx.Err() != nil {
		return res, fmt.Errorf("sandbox: %q stopped: %w", req.Argv[0], context.Cause(ctx))
	}
	return res, nil
}

// warmInit is a sandbox init started ahead of a run: its namespaces,
// filesystem and cgroups are ready, and it waits for the run on runW. Taking
// one off the pool removes process start-up and sandbox construction from
// the time between a tap and the program's start.
type warmInit struct {
	cmd            *exec.Cmd // a re-executed init; nil for the zygote's
	statusR        *os.File
	runW           *os.File
	stdout, stderr *capWriter
	cg             *runCgroup
	stage          *stage     // the run's work dir stage (root), nil when the init stages it
	net            *netAttach // pasta, for a network-on init
	warm           bool       // came from the pool

	// An init forked by the zygote (zygote_linux.go): our child, not
	// started through os/exec.
	zygote *zygote
	pid    int
	pidfd  *os.File      // the init's pidfd (blocking; polled through poll)
	poll   *initPoll     // its stdout, stderr and pidfd, waited for in one (waitPolled)
	proc   *os.Process   // instead, on kernels without pidfd_open (before 5.3)
	pipes  []*os.File    // then our ends of its stdout and stderr
	copied chan struct{} // closed when both are copied to the capture

	waited bool               // the init was waited for: ws is its status
	ws     syscall.WaitStatus // (either kind of init)
}

// kill ends the init, and with it the whole run.
func (w *warmInit) kill() { w.signal(syscall.SIGKILL) }

func (w *warmInit) signal(sig os.Signal) {
	if w.cmd != nil {
		_ = w.cmd.Process.Signal(sig)
		return
	}
	if w.proc != nil {
		_ = w.proc.Signal(sig)
		return
	}
	// Through the pidfd: once the init is reaped it refers to no
	// process, whichever took its pid since.
	if rc, err := w.pidfd.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_ = unix.PidfdSendSignal(int(fd), sig.(syscall.Signal), nil, 0)
		})
	}
}

// wait waits for the init to exit and its output to be copied (up to
// waitDelay after it exited: exec.ErrWaitDelay then).
func (w *warmInit) wait() error {
	if w.cmd != nil {
		err := w.cmd.Wait()
		if ps := w.cmd.ProcessState; ps != nil {
			w.waited = true
			w.ws, _ = ps.Sys().(syscall.WaitStatus)
		}
		return err
	}
	if w.poll != nil {
		return w.waitPolled()
	}
	err := w.waitZygoteInit()
	select {
	case <-w.copied:
	case <-time.After(waitDelay):
		closeAll(w.pipes...)
		<-w.copied
		if err == nil {
			err = exec.ErrWaitDelay
		}
	}
	closeAll(w.pipes...)
	w.pipes = nil
	return err
}

// release frees what the init held once it has been waited for.
func (w *warmInit) release() {
	w.statusR.Close()
	if w.runW != nil {
		w.runW.Close()
	}
	if w.cg != nil {
		w.cg.put()
	}
	if w.poll != nil {
		w.poll.close()
	}
	if w.pidfd != nil {
		w.pidfd.Close()
	}
	w.net.stop()
}

// discard kills an unused init and waits for it.
func (w *warmInit) discard() {
	w.kill()
	_ = w.wait()
	w.release()
	if w.stage != nil {
		w.stage.remove()
		w.stage = nil
	}
}

// poolSize is how many warm inits are kept per network mode: enough for a
// run in progress and the next tap; bursts beyond it start cold.
const poolSize = 2

// take returns a warm init for the network mode, or starts one when the
// pool is empty. The caller refills the pool when its run is over, so the
// next init's start-up does not compete with this run for the CPU.
func (s *Subprocess) take(network bool) (*warmInit, error) {
	select {
	case w := <-s.pools[network]:
		w.warm = true
		return w, nil
	default:
	}
	return s.spawn(network)
}

// refill starts one init for the pool in the background (unless closed).
func (s *Subprocess) refill(network bool) {
	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	if s.closed || s.unavailable != nil || (network && s.netErr != nil) {
		return
	}
	// Only as many as the pool lacks: runs ending together (a burst) each
	// asked for one, and the extra inits were started and discarded — a
	// whole init's CPU each.
	if len(s.pools[network])+s.refilling[network] >= poolSize {
		return
	}
	s.refilling[network]++
	s.poolWG.Add(1)
	go func() {
		defer s.poolWG.Done()
		w, err := s.spawn(network)
		s.poolMu.Lock()
		s.refilling[network]--
		closed := s.closed
		s.poolMu.Unlock()
		if err != nil {
			s.log.LogAttrs(context.Background(), slog.LevelWarn, "sandbox: could not start a warm init", slog.String("error", err.Error()))
			return
		}
		if !closed {
			select {
			case s.pools[network] <- w:
				return
			default:
			}
		}
		w.discard()
	}()
}

// Close stops the warm inits. Runs in progress are not affected; runs
// started after Close start their init cold.
func (s *Subprocess) Close() error {
	s.poolMu.Lock()
	s.closed = true
	s.poolMu.Unlock()
	s.poolWG.Wait()
	s.zygMu.Lock()
	if s.zyg != nil {
		s.zyg.stop()
		s.zyg = nil
	}
	s.zygMu.Unlock()
	for _, pool := range s.pools {
		for {
			select {
			case w := <-pool:
				w.discard()
				continue
			default:
			}
			break
		}
	}
	if s.cgroups != nil {
		s.cgroups.drain()
	}
	return nil
}

// spawn starts an init that builds the sandbox and waits for its run: a
// network-off one forked by the zygote when there is one, else the
// gateway's binary re-executed.
func (s *Subprocess) spawn(network bool) (*warmInit, error) {
	if !network && s.useZygote.Load() {
		if z := s.currentZygote(); z != nil {
			w, err := s.spawnZygote(z)
			if err == nil {
				return w, nil
			}
			s.log.LogAttrs(context.Background(), slog.LevelWarn, "sandbox: the zygote could not fork an init; re-executing it",
				slog.String("error", err.Error()))
			s.currentZygote() // a new one, if this one is gone
		}
	}
	return s.spawnIO(network, nil, nil)
}

// spawnIO is spawn with the program's standard input and output given
// (nil: /dev/null and the capture).
func (s *Subprocess) spawnIO(network bool, stdin io.Reader, stdout io.Writer) (*warmInit, error) {
	if network && s.netErr != nil {
		return nil, s.netErr // fail closed: never the host's network
	}
	prep := initSpec{
		Network: network, Hide: s.hidden,
		NProc: uint64(s.limits.procs), Data: uint64(s.limits.memory), FSize: uint64(s.limits.fileSize),
		NoFile: uint64(s.limits.openFiles), TmpSize: s.limits.tmpSize, WorkSize: s.limits.work,
		SetUID: s.root, UID: s.uid, GID: s.gid, Root: filepath.Join(s.baseDir, rootMountPoint),
	}
	if network {
		prep.Ports = s.ports
		prep.Landlock = true // the port allowlist is the network boundary
	}
	prepJSON, err := json.Marshal(prep)
	if err != nil {
		return nil, fmt.Errorf("sandbox: spec: %w", err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	// The run's spec goes on a socket: the work dir's mount descriptor
	// can travel with it.
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		statusR.Close()
		statusW.Close()
		return nil, fmt.Errorf("sandbox: socketpair: %w", err)
	}
	runW, runR := os.NewFile(uintptr(sp[0]), "run"), os.NewFile(uintptr(sp[1]), "run-init")
	// The init's spec goes on a pipe, written whole before it starts
	// (never on its command line, which the program can read).
	specR, specW, err := os.Pipe()
	if err != nil {
		statusR.Close()
		statusW.Close()
		runR.Close()
		runW.Close()
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	if len(prepJSON) > 60<<10 {
		err = fmt.Errorf("%d bytes, more than a pipe holds (too many hidden paths?)", len(prepJSON))
	} else {
		_, err = specW.Write(prepJSON) // the pipe's buffer holds it: the init reads it once started
	}
	specW.Close()
	w := &warmInit{statusR: statusR, runW: runW, stdout: &capWriter{}, stderr: &capWriter{}}
	closeChildEnds := func() {
		statusW.Close()
		runR.Close()
		specR.Close()
	}
	if err != nil {
		closeChildEnds()
		w.release()
		return nil, fmt.Errorf("sandbox: write the init's spec: %w", err)
	}
	if s.cgroups != nil {
		if w.cg, err = s.cgroups.create(s.limits.procs, s.limits.memory); err != nil {
			closeChildEnds()
			w.release()
			return nil, err
		}
	}
	cmd := exec.Command("/proc/self/exe", initSpecArg)
	cmd.Args[0] = initArg0
	cmd.Env = initEnv // nothing of the gateway's environment, not even for the init
	cmd.Dir = "/"
	cmd.Stdin = stdin // nil: /dev/null
	cmd.Stdout = w.stdout
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.Stderr = w.stderr
	cmd.ExtraFiles = []*os.File{statusW, runR, specR} // fds 3 (fdStatus), 4 (fdRun), 5 (fdSpec)
	cmd.SysProcAttr = s.sysProcAttr(network)
	cmd.WaitDelay = waitDelay
	w.cmd = cmd
	if err := cmd.Start(); err != nil {
		closeChildEnds()
		w.release()
		return nil, fmt.Errorf("sandbox: start the sandbox's init (namespaces): %w: %w", err, core.ErrIsolationUnavailable)
	}
	closeChildEnds()
	if w.cg != nil {
		if err := w.cg.add(cmd.Process.Pid); err != nil {
			w.discard()
			return nil, err
		}
	}
	if network {
		if w.net, err = s.attachNet(cmd.Process.Pid); err != nil {
			return nil, w.discardAfter(err)
		}
	}
	if s.workTmpfs {
		// Made ahead with the init (after the network, whose failure
		// discards the init without a stage): not on the way from a tap to the
		// program's start.
		if w.stage, err = s.newStage(); err != nil {
			w.discard()
			return nil, err
		}
	}
	return w, nil
}

func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// isolationTag is the short description stored with each execution.
func (s *Subprocess) isolationTag(network bool) string {
	parts := []string{"mountns", "pidns"}
	if !s.root {
		parts = append([]string{"userns"}, parts...)
	}
	if network {
		parts = append(parts, s.networkTag())
	} else {
		parts = append(parts, "netns")
	}
	parts = append(parts, "seccomp")
	if s.landlock > 0 {
		parts = append(parts, "landlock")
	}
	if s.cgroups != nil {
		parts = append(parts, "cgroup")
	}
	return strings.Join(parts, ",")
}

type initStatus struct {
	ready             bool
	setupErr, execErr string
	exited            bool
	ws                syscall.WaitStatus
	workFull          bool   // the init's stage was full
	workCopyErr       string // the init's stage could not be copied back
}

func parseStatus(b []byte) initStatus {
	var st initStatus
	for _, line := range strings.Split(string(b), "\n") {
		switch line {
		case string(statusReady):
			st.ready = true
			continue
		case string(statusWorkFull):
			st.workFull = true
			continue
		}
		if len(line) < 2 {
			continue
		}
		payload := line[2:]
		switch line[0] {
		case statusSetupErr:
			st.setupErr = payload
		case statusExecErr:
			st.execErr = payload
		case statusWorkCopy:
			st.workCopyErr = payload
		case statusExit:
			if n, err := strconv.ParseUint(payload, 10, 32); err == nil {
				st.exited, st.ws = true, syscall.WaitStatus(n)
			}
		}
	}
	return st
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
	if err := removeWork(target); err != nil {
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

// sysProcAttr starts the init in its own mount, PID, IPC, UTS, cgroup and
// network namespaces. A root gateway starts it as root:
// it builds the sandbox, then switches to the program's uid before starting
// it. Otherwise the init gets its own user namespace (its uid mapped to
// itself) with just the capabilities needed to build the sandbox —
// CAP_SYS_ADMIN for mounts, CAP_SETPCAP to empty the bounding set — valid in
// that namespace only (and CAP_NET_ADMIN with network, for its netfilter
// rules).
func (s *Subprocess) sysProcAttr(network bool) *syscall.SysProcAttr {
	// Network-on runs too: pasta connects their namespace (netns_linux.go).
	flags := uintptr(syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | unix.CLONE_NEWCGROUP | syscall.CLONE_NEWNET)
	attr := &syscall.SysProcAttr{
		Cloneflags: flags,
		Pdeathsig:  syscall.SIGKILL, // the whole run dies with the gateway
	}
	if s.root {
		return attr
	}
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: int(s.uid), HostID: int(s.uid), Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: int(s.gid), HostID: int(s.gid), Size: 1}}
	attr.Credential = &syscall.Credential{Uid: s.uid, Gid: s.gid, NoSetGroups: true}
	attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP}
	if network {
		attr.AmbientCaps = append(attr.AmbientCaps, unix.CAP_NET_ADMIN) // its netfilter rules
	}
	return attr
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
	// Each miss is only a failed stat: no error is built for a
	// directory that does not hold the program (fmt.Errorf and errors.Is
	// were half of this lookup's CPU per run).
	for _, d := range minimalPathDirs {
		p := d + "/" + name
		if fi, err := os.Stat(p); err == nil && executable(fi) {
			return filepath.Clean(p), nil
		}
	}
	return "", fmt.Errorf("sandbox: program %q not found in %s: %w", name, MinimalPath, exec.ErrNotFound)
}

// minimalPathDirs is MinimalPath's directories.
var minimalPathDirs = filepath.SplitList(MinimalPath)

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
	if !executable(fi) {
		return fmt.Errorf("not executable: %w", fs.ErrPermission)
	}
	return nil
}

// executable is what a program lookup accepts: not a directory, with an
// execute bit.
func executable(fi fs.FileInfo) bool { return !fi.IsDir() && fi.Mode().Perm()&0o111 != 0 }

// ProgramEnv is the environment a program gets whose action declares no
// variables, with HOME at home (cmd/silas-load's reference runs its echo
// with it, so that the two stay alike).
func ProgramEnv(home string) []string { return buildEnv(nil, home) }

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

// capWriter keeps the first limit bytes written and discards (but accepts)
// the rest, so the program is never blocked on a full pipe. The limit is set
// when a warm init gets its run, before any output can arrive.
type capWriter struct {
	mu        sync.Mutex
	limit     int
	buf       []byte
	truncated bool
}

func (w *capWriter) setLimit(n int) {
	w.mu.Lock()
	w.limit = n
	w.mu.Unlock()
}

func (w *capWriter) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf
}

func (w *capWriter) wasTruncated() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.truncated
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	if room := w.limit - len(w.buf); room < n {
		w.truncated = true
		p = p[:max(room, 0)]
	}
	w.buf = append(w.buf, p...)
	return n, nil
}

// initEnv is the init's whole environment (nothing of the gateway's; the
// program gets only its own, see buildEnv). One P: the init runs one
// goroutine at a time, and a Go process starts and exits cheaper with one
// (fewer threads, per-P caches and GC workers to set up). No traceback:
// the init shares the run's stderr, which reaches the chat and the model,
// so should its runtime die (a fork bomb that fills the process table
// leaves it no thread to start) only the fatal line goes there, not the
// init's goroutine stacks, registers and source paths.
var initEnv = []string{"GOMAXPROCS=1", "GOTRACEBACK=none"}
