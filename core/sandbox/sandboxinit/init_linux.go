//go:build linux

package sandboxinit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Arg0 is argv[0] of the sandbox's init process: the gateway binary
// re-executed inside the new namespaces. It prepares the filesystem, drops
// every privilege and starts the approved program as its only child.
const Arg0 = "silas-sandbox-init"

// SpecArg is the init's only argument: its spec comes on fdSpec, never
// on the command line (which every process of the sandbox can read in
// /proc/1/cmdline).
const SpecArg = "--spec-fd=5"

// File descriptors handed to the init process (os/exec ExtraFiles start at 3).
const (
	fdStatus = 3 // write end: the init reports readiness, setup errors and the program's exit here
	fdRun    = 4 // a unix socket: the run's part of the spec (JSON), written once the init is in its cgroups, with the work dir's mount (SCM_RIGHTS) when it comes as one
	fdSpec   = 5 // read end of a pipe: the Spec (JSON), written before the init starts
)

// Status lines the init writes to fdStatus. One line each; the parent parses
// them (statusPrefix + payload).
const (
	StatusReady    = 'R' // the sandbox is built; waiting for the run
	StatusSetupErr = 'E' // isolation could not be set up: nothing ran
	StatusExecErr  = 'X' // the program could not be started: nothing ran
	StatusExit     = 'W' // the program ended: raw wait status
	StatusWorkFull = 'F' // the work dir's tmpfs was full when the program ended
	StatusWorkCopy = 'C' // the work dir could not be copied back whole: why
)

// oldRoot is where the host's root stays, inside the new root, between the
// init's two phases (it is detached before the program starts).
const oldRoot = "/.oldroot"

// Spec is everything the init needs. The part that is the same for
// every run of a Subprocess comes as JSON on fdSpec: the init builds the
// sandbox ahead of time (a warm init). The run's part (program, argv, env,
// work dir, CPU limit) comes as JSON on fdRun. Neither is on the command
// line: the paths it names (the data dir, the hidden paths) are the
// host's. It holds no secret the gateway does not already give the
// program (its environment).
type Spec struct {
	Program string   `json:"-"` // from RunSpec
	Argv    []string `json:"-"`
	Env     []string `json:"-"`
	HostDir string   `json:"-"`
	CPU     uint64   `json:"-"`
	// WorkMount is the work dir as a detached mount (fsmount), -1 when
	// it is bound from HostDir.
	WorkMount int `json:"-"`
	// StageWork: the init itself runs the program on a tmpfs of WorkSize
	// bytes holding a copy of HostDir, and copies it back (through
	// hostWork, an O_PATH descriptor of HostDir) once every process of
	// the run is gone — where the gateway cannot mount one (an ordinary
	// user).
	StageWork bool  `json:"-"`
	WorkSize  int64 `json:"work_size"`
	hostWork  int
	Root      string   `json:"root"` // empty dir the new root is mounted on
	Network   bool     `json:"network"`
	Ports     []uint16 `json:"ports,omitempty"`
	Hide      []string `json:"hide,omitempty"`
	NProc     uint64   `json:"nproc"`
	Data      uint64   `json:"data"`
	FSize     uint64   `json:"fsize"`
	NoFile    uint64   `json:"nofile"`
	TmpSize   int64    `json:"tmp_size"`
	Landlock  bool     `json:"landlock"` // required: fail if the kernel lacks it
	// Zygote: this process builds the sandbox's filesystem once and then
	// forks each run's init from it (zygote_linux.go), instead of being
	// one run's init.
	Zygote bool `json:"zygote,omitempty"`
	// SetUID: the init runs as root (a root gateway) and switches its
	// thread to UID/GID before starting the program. Otherwise it already
	// runs as the program's uid, in its own user namespace.
	SetUID bool   `json:"setuid"`
	UID    uint32 `json:"uid"`
	GID    uint32 `json:"gid"`
}

// RunSpec is the run's part of the spec, written to fdRun.
type RunSpec struct {
	Program string   `json:"program"` // absolute path, as seen inside the sandbox
	Argv    []string `json:"argv"`
	Env     []string `json:"env"`
	HostDir string   `json:"host_dir"` // work dir on the host, mounted at WorkDir
	CPU     uint64   `json:"cpu"`      // seconds (RLIMIT_CPU)
	// WorkMount: the work dir comes as a mount descriptor with the spec
	// (SCM_RIGHTS) instead of being bound from HostDir.
	WorkMount bool `json:"work_mount,omitempty"`
	// StageWork: see Spec.StageWork.
	StageWork bool `json:"stage_work,omitempty"`
}

// SystemDirs are shown read-only inside the sandbox (when they exist). Nothing
// else of the host's filesystem is visible: not the data dir, not /home,
// /root, /var, /run, /srv, /mnt or the host's /tmp.
var SystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// devFiles are bind-mounted from the host into the sandbox's /dev.
var devFiles = []string{"null", "zero", "full", "random", "urandom"}

// pending is the spec of a network-on run, read by init and left for
// [Main], which the sandbox package's init calls with its network setup.
var pending []byte

// init takes over the process when it was started as the sandbox's init.
// It runs before almost every other package's init (this package imports
// only packages the runtime initialises early, and Go initialises ready
// packages in import-path order), so a network-off run — the common one —
// pays for none of the gateway's package inits (protobuf registrations,
// regexps): half the init's start-up. A network-on run needs the
// nftables code, which only core/sandbox links: its spec is kept for
// core/sandbox's init, which calls Main.
func init() {
	if !IsInit() {
		return
	}
	// The main goroutine runs package init on the main thread; locked,
	// every per-thread attribute set below (credentials, capabilities,
	// no_new_privs, Landlock, seccomp) is the one the program inherits.
	runtime.LockOSThread()
	status := os.NewFile(fdStatus, "status")
	specPipe := os.NewFile(fdSpec, "spec")
	specJSON, err := io.ReadAll(specPipe)
	specPipe.Close()
	if err != nil {
		// syscall.Exit, not os.Exit: the race detector's exit hook sleeps
		// a second in race-enabled test binaries, on every run.
		syscall.Exit(fail(status, StatusSetupErr, fmt.Errorf("init: read spec: %w", err)))
	}
	var net struct {
		Network bool `json:"network"`
		Zygote  bool `json:"zygote"`
	}
	if err := json.Unmarshal(specJSON, &net); err == nil && net.Network {
		pending = specJSON
		return
	} else if err == nil && net.Zygote {
		syscall.Exit(zygoteMain(status, specJSON))
	}
	syscall.Exit(sandboxInit(status, specJSON, nil))
}

// IsInit reports whether this process was started as the sandbox's init.
func IsInit() bool {
	return len(os.Args) == 2 && os.Args[0] == Arg0 && os.Args[1] == SpecArg
}

// Main runs a network-on init whose spec init kept: setupNetwork
// installs the run's network filter and resolver. It returns the exit
// code, or -1 when this process is not such an init.
func Main(setupNetwork func(spec *Spec) error) int {
	if !IsInit() || pending == nil {
		return -1
	}
	runtime.LockOSThread()
	return sandboxInit(os.NewFile(fdStatus, "status"), pending, setupNetwork)
}

func fail(status io.Writer, kind byte, err error) int {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	fmt.Fprintf(status, "%c %s\n", kind, msg)
	return 125
}

// sandboxInit runs as PID 1 of the sandbox's PID namespace. Its exit ends
// the namespace: the kernel kills every process the program left behind.
func sandboxInit(status *os.File, specJSON []byte, setupNetwork func(*Spec) error) int {
	fail := func(kind byte, err error) int { return fail(status, kind, err) }
	// The program must not inherit the status pipe.
	unix.CloseOnExec(fdStatus)
	var spec Spec
	if err := json.Unmarshal(specJSON, &spec); err != nil {
		return fail(StatusSetupErr, fmt.Errorf("init: bad spec: %w", err))
	}
	// Not dumpable: the program (same uid) cannot read /proc/1/mem or
	// environ of this still-privileged process.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(StatusSetupErr, fmt.Errorf("init: PR_SET_DUMPABLE: %w", err))
	}
	// Phase 1, ahead of the run: the whole filesystem but the work dir.
	hidden, err := setupFS(&spec)
	if err != nil {
		return fail(StatusSetupErr, err)
	}
	if spec.Network {
		// core/sandbox's netfilter_linux.go; nil only if this binary
		// does not link core/sandbox: no network-on run without its filter.
		if setupNetwork == nil {
			return fail(StatusSetupErr, errors.New("init: network-on run, but no network filter in this binary"))
		}
		if err := setupNetwork(&spec); err != nil {
			return fail(StatusSetupErr, err)
		}
	}
	if err := unix.Sethostname([]byte("silas-sandbox")); err != nil {
		return fail(StatusSetupErr, fmt.Errorf("init: sethostname (UTS namespace): %w", err))
	}
	fmt.Fprintf(status, "%c\n", StatusReady)

	// Phase 2: the run. The parent writes it once we are in our cgroups:
	// nothing may fork before that.
	// Descriptors the gateway inherited from whoever started it (a shell, a
	// service manager, go test) and did not mark close-on-exec reach us
	// through os/exec: none may reach the program.
	if err := closeOnExecFrom(fdRun + 1); err != nil {
		return fail(StatusSetupErr, err)
	}
	runJSON, mountFD, err := readRun(fdRun)
	unix.Close(fdRun) // the program inherits no descriptor but stdin/out/err
	if err != nil {
		return fail(StatusSetupErr, err)
	}
	var rs RunSpec
	if err := json.Unmarshal(runJSON, &rs); err != nil {
		return fail(StatusSetupErr, fmt.Errorf("init: bad run spec: %w", err))
	}
	if rs.WorkMount != (mountFD >= 0) {
		return fail(StatusSetupErr, errors.New("init: the work dir's mount did not come with the run"))
	}
	spec.Program, spec.Argv, spec.Env, spec.HostDir, spec.CPU, spec.WorkMount = rs.Program, rs.Argv, rs.Env, rs.HostDir, rs.CPU, mountFD
	spec.StageWork = rs.StageWork && mountFD < 0
	if spec.StageWork {
		// The parent stops a staged run with SIGTERM: every process of it
		// is killed, and its work is still copied back.
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() {
			<-term
			_ = unix.Kill(-1, unix.SIGKILL)
		}()
	}
	if err := finishFS(&spec, hidden); err != nil {
		return fail(StatusSetupErr, err)
	}
	if err := setLimits(&spec); err != nil {
		return fail(StatusSetupErr, err)
	}
	if err := dropPrivileges(&spec); err != nil {
		return fail(StatusSetupErr, err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail(StatusSetupErr, fmt.Errorf("init: no_new_privs: %w", err))
	}
	if err := restrictLandlock(&spec); err != nil {
		return fail(StatusSetupErr, err)
	}
	if err := installSeccomp(); err != nil {
		return fail(StatusSetupErr, err)
	}

	attr := &syscall.ProcAttr{
		Dir:   WorkDir,
		Env:   spec.Env,
		Files: []uintptr{0, 1, 2}, // stdin is /dev/null (os/exec), stdout/stderr the parent's pipes
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	// ForkExec runs on this locked thread, so the child inherits exactly
	// this thread's credentials, empty capabilities, no_new_privs, Landlock
	// domain and seccomp filter.
	pid, err := syscall.ForkExec(spec.Program, spec.Argv, attr)
	if err != nil {
		return fail(StatusExecErr, fmt.Errorf("start %q: %w", spec.Argv[0], err))
	}
	// Reap everything (orphans are re-parented to us) until the program
	// itself ends; then report and exit, which kills the rest.
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fail(StatusExecErr, fmt.Errorf("wait: %w", err))
		}
		if wpid == pid {
			w := bufio.NewWriter(status)
			if spec.StageWork {
				stageBack(&spec, w)
			}
			fmt.Fprintf(w, "%c %d\n", StatusExit, uint32(ws))
			w.Flush()
			return 0
		}
	}
}

// stageIn mounts the run's tmpfs at WorkDir and copies the host's
// work dir into it, keeping a descriptor of that dir for stageBack.
func stageIn(spec *Spec) error {
	host := oldRoot + spec.HostDir
	fd, err := unix.Open(host, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("init: work dir: %w", err)
	}
	spec.hostWork = fd
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700,uid=%d,gid=%d", spec.WorkSize, max(1024, spec.WorkSize/4096), spec.UID, spec.GID)
	if err := unix.Mount("silas-work", WorkDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("init: mount the work dir's tmpfs (sandbox.max_work_bytes): %w", err)
	}
	if err := CopyTree(host, WorkDir, spec.WorkSize, int(spec.UID), int(spec.GID)); err != nil {
		return fmt.Errorf("init: the work dir does not fit sandbox.max_work_bytes: %w", err)
	}
	return nil
}

// stageBack, once the program has ended, kills what is left of the run,
// reaps it and copies the work dir back to the host's, reporting on w
// whether it was full and whether the copy failed. The copy runs on
// another thread than this one, which carries the program's restrictions
// (Landlock, seccomp, no capabilities): the Go runtime starts threads for
// a locked thread from a clean template thread.
func stageBack(spec *Spec, w io.Writer) {
	if WorkDirFull(WorkDir) {
		fmt.Fprintf(w, "%c\n", StatusWorkFull)
	}
	done := make(chan error)
	go func() {
		_ = unix.Kill(-1, unix.SIGKILL)
		for {
			_, err := unix.Wait4(-1, nil, 0, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				break // ECHILD: every process of the run is gone
			}
		}
		done <- CopyBack(WorkDir, "/proc/self/fd/"+strconv.Itoa(spec.hostWork), spec.WorkSize, int(spec.UID), int(spec.GID))
	}()
	if err := <-done; err != nil {
		fmt.Fprintf(w, "%c %s\n", StatusWorkCopy, strings.ReplaceAll(err.Error(), "\n", " "))
	}
}

// readRun reads the run's spec from the socket fd until the parent closes
// it, and the work dir's mount descriptor that may come with its first
// bytes (-1 when none did).
func readRun(fd int) ([]byte, int, error) {
	buf := make([]byte, 0, 4096)
	oob := make([]byte, unix.CmsgSpace(4*4))
	mountFD := -1
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, oobn, _, _, err := unix.Recvmsg(fd, buf[len(buf):cap(buf)], oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, -1, fmt.Errorf("init: read run: %w", err)
		}
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return nil, -1, fmt.Errorf("init: read run: %w", err)
			}
			for _, m := range msgs {
				fds, err := unix.ParseUnixRights(&m)
				if err != nil {
					continue
				}
				for _, f := range fds {
					if mountFD >= 0 {
						unix.Close(f)
						return nil, -1, errors.New("init: read run: more than one descriptor")
					}
					mountFD = f
				}
			}
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	if len(buf) == 0 {
		return nil, -1, errors.New("init: no run (parent went away)")
	}
	return buf, mountFD, nil
}

// closeOnExecFrom marks every descriptor from fd up close-on-exec
// (close_range, or /proc/self/fd where the kernel lacks it).
func closeOnExecFrom(fd int) error {
	if err := unix.CloseRange(uint(fd), ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("init: list descriptors: %w", err)
	}
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n >= fd {
			unix.CloseOnExec(n)
		}
	}
	return nil
}

// setupFS builds the sandbox's root in a tmpfs and pivots into it: system
// dirs read-only, hidden paths covered, a private /tmp, a minimal /dev and a
// /proc of the sandbox's own PID namespace. The host's root stays at
// oldRoot until finishFS has mounted the work dir. It returns which hidden
// paths it covered.
func setupFS(spec *Spec) (map[string]bool, error) {
	// Nothing we mount may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("init: make mounts private (mount namespace): %w", err)
	}
	// The new root is a tmpfs in our private mount namespace, mounted on
	// an empty directory of the base dir (every run uses the same one, each
	// in its own namespace), so nothing the work dir's path needs is shadowed.
	root := spec.Root
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return nil, fmt.Errorf("init: mount root tmpfs: %w", err)
	}
	for _, d := range SystemDirs {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		dst := root + d
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(d)
			if err != nil {
				return nil, fmt.Errorf("init: %s: %w", d, err)
			}
			if err := os.Symlink(target, dst); err != nil {
				return nil, fmt.Errorf("init: %s: %w", d, err)
			}
			continue
		}
		if !fi.IsDir() {
			continue
		}
		if err := bindReadOnly(d, dst); err != nil {
			return nil, err
		}
	}
	hidden := map[string]bool{}
	if err := hideAll(root, spec.Hide, hidden); err != nil {
		return nil, err
	}
	// /tmp. A zygote leaves it, /dev/shm and /proc to each run's init:
	// they are the run's own.
	if err := os.MkdirAll(root+"/tmp", 0o755); err != nil {
		return nil, fmt.Errorf("init: /tmp: %w", err)
	}
	if spec.Zygote {
		// mount points only
	} else if err := unix.Mount("tmpfs", root+"/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size="+strconv.FormatInt(spec.TmpSize, 10)); err != nil {
		return nil, fmt.Errorf("init: mount /tmp: %w", err)
	}
	for _, d := range []string{WorkDir, oldRoot} {
		if err := os.Mkdir(root+d, 0o755); err != nil {
			return nil, fmt.Errorf("init: mount point %s: %w", d, err)
		}
	}
	if err := setupDev(root, !spec.Zygote); err != nil {
		return nil, err
	}
	// /proc of our PID namespace: only the sandbox's own processes.
	if err := os.Mkdir(root+"/proc", 0o555); err != nil {
		return nil, fmt.Errorf("init: /proc: %w", err)
	}
	if spec.Zygote {
		// mount point only: the zygote's PID namespace is the host's.
	} else if err := unix.Mount("proc", root+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, fmt.Errorf("init: mount /proc (PID namespace): %w", err)
	}
	if err := unix.Chdir(root); err != nil {
		return nil, fmt.Errorf("init: chdir new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."+oldRoot); err != nil {
		return nil, fmt.Errorf("init: pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return nil, fmt.Errorf("init: chdir /: %w", err)
	}
	return hidden, nil
}

// finishFS completes the sandbox for one run: covers hidden paths that
// appeared since setupFS, binds the work dir at WorkDir (writable; the
// program learns nothing of the host's layout, the data dir's path
// included), detaches the host's root and makes the new root read-only.
func finishFS(spec *Spec, hidden map[string]bool) error {
	if err := hideAll("", spec.Hide, hidden); err != nil {
		return err
	}
	if spec.HostDir == "" || !path.IsAbs(spec.HostDir) {
		return fmt.Errorf("init: bad work dir %q", spec.HostDir)
	}
	if spec.StageWork {
		if err := stageIn(spec); err != nil {
			return err
		}
	} else if spec.WorkMount >= 0 {
		// The work dir's own filesystem, cloned by the gateway: it was
		// mounted after this init's namespace was made, and its mountinfo
		// line names no host path.
		err := unix.MoveMount(spec.WorkMount, "", unix.AT_FDCWD, WorkDir, unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(spec.WorkMount)
		if err != nil {
			return fmt.Errorf("init: attach work dir: %w", err)
		}
		// A clone of a shared mount stays its peer: nothing mounted on
		// either side may appear on the other.
		if err := unix.Mount("", WorkDir, "", unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("init: work dir private: %w", err)
		}
	} else if err := unix.Mount(oldRoot+spec.HostDir, WorkDir, "", unix.MS_BIND, ""); err != nil {
		// The init can walk the host path (it is root, or the gateway's own uid).
		return fmt.Errorf("init: bind work dir: %w", err)
	}
	if err := Remount(WorkDir, unix.MS_NOSUID|unix.MS_NODEV); err != nil {
		return err
	}
	// Detaching the old root leaves nothing of the host's tree reachable.
	if err := unix.Unmount(oldRoot, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("init: detach old root: %w", err)
	}
	if err := unix.Rmdir(oldRoot); err != nil {
		return fmt.Errorf("init: remove old root mount point: %w", err)
	}
	// The root itself read-only: no new files next to the mounts.
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("init: remount root read-only: %w", err)
	}
	return nil
}

// bindReadOnly bind-mounts src at dst (created) read-only, nosuid, nodev.
func bindReadOnly(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("init: mount point %s: %w", dst, err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("init: bind %s: %w", src, err)
	}
	return Remount(dst, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV)
}

// Remount applies flags to the bind mount at dst, keeping the flags the
// kernel locked on it (a user namespace may not clear them).
func Remount(dst string, flags uintptr) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dst, &st); err != nil {
		return fmt.Errorf("init: statfs %s: %w", dst, err)
	}
	keep := map[int64]uintptr{
		unix.ST_RDONLY: unix.MS_RDONLY, unix.ST_NOSUID: unix.MS_NOSUID, unix.ST_NODEV: unix.MS_NODEV,
		unix.ST_NOEXEC: unix.MS_NOEXEC, unix.ST_NOATIME: unix.MS_NOATIME, unix.ST_NODIRATIME: unix.MS_NODIRATIME,
		unix.ST_RELATIME: unix.MS_RELATIME,
	}
	for st_, ms := range keep {
		if st.Flags&st_ != 0 {
			flags |= ms
		}
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|flags, ""); err != nil {
		return fmt.Errorf("init: remount %s: %w", dst, err)
	}
	return nil
}

// hideAll covers the paths of hs a system dir makes visible inside the new
// root and records each one covered in done (paths not yet there are left
// for a later call). root is the new root's path before pivot_root, ""
// after.
//
// A mount over a hidden path would name it in /proc/self/mountinfo (issue
// 22 point 8), so the hidden path is never a mount point: its parent's
// contents are rebuilt on a read-only tmpfs instead — every other entry
// bound from the host as it was, the hidden one an empty placeholder (a
// directory of mode 0000, an empty read-only file) — and mountinfo shows
// the parent, which the program can list anyway, and its other entries.
// The rebuilt parent lists the entries it had when the sandbox was built
// (its subdirectories and files are the host's, live): a hidden path made
// later in it is not there at all.
// Only a hidden path directly under / (a system dir itself, whose name
// says nothing of the host) is covered by a mount of its own.
func hideAll(root string, hs []string, done map[string]bool) error {
	byParent := map[string]map[string]bool{}
	for _, h := range hs {
		if done[h] {
			continue
		}
		if _, err := os.Lstat(root + h); err != nil {
			continue // not visible (yet)
		}
		p := path.Dir(h)
		if p == "/" {
			ok, err := hide(root, h)
			if err != nil {
				return err
			}
			done[h] = ok
			continue
		}
		byParent[p] = map[string]bool{}
	}
	// A parent rebuilt leaves out every hidden name it has, covered before
	// or not.
	for _, h := range hs {
		if names := byParent[path.Dir(h)]; names != nil {
			names[path.Base(h)] = true
		}
	}
	parents := slices.Collect(maps.Keys(byParent))
	// Outer parents first: an inner one is rebuilt on top of the bind its
	// outer one made of it.
	slices.SortFunc(parents, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	for _, p := range parents {
		if inside(p, done) {
			// Below a path already hidden: nothing of it is reachable.
			for name := range byParent[p] {
				done[path.Join(p, name)] = true
			}
			continue
		}
		if err := rebuildWithout(root, p, byParent[p]); err != nil {
			return err
		}
		for name := range byParent[p] {
			done[path.Join(p, name)] = true
		}
	}
	return nil
}

// inside reports whether p is a hidden path of done or below one.
func inside(p string, done map[string]bool) bool {
	for h, ok := range done {
		if ok && (p == h || strings.HasPrefix(p, h+"/")) {
			return true
		}
	}
	return false
}

// hideStage is where rebuildWithout builds a directory before moving it in
// place: in the new root's own tmpfs, empty again once the build is moved.
const hideStage = "/.silas-hide"

// rebuildWithout covers directory p of the new root (root is its path
// before pivot_root, "" after) with a read-only tmpfs holding p's entries
// as the sandbox sees them — directories and files bound from its
// read-only view of them (a bind keeps the source mount's read-only,
// nosuid and nodev flags: no remount each), symbolic links copied — but
// for the names in hidden, which are empty placeholders of the same kind.
// It is built on a stage and moved over p in one step. Entries that are
// neither (sockets, FIFOs, devices) are left out: the system dirs are for
// programs and their data.
func rebuildWithout(root, p string, hidden map[string]bool) error {
	src, stage := root+p, root+hideStage
	fail := func(err error) error { return fmt.Errorf("init: hide under %s: %w", p, err) }
	fi, err := os.Stat(src)
	if err != nil {
		return fail(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return fail(err)
	}
	if err := os.Mkdir(stage, 0o700); err != nil {
		return fail(err)
	}
	opts := fmt.Sprintf("mode=%04o,size=64k", fi.Mode().Perm())
	if err := unix.Mount("tmpfs", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fail(err)
	}
	for _, e := range entries {
		name := e.Name()
		s, d := src+"/"+name, stage+"/"+name
		switch t := e.Type(); {
		case hidden[name] && t.IsDir():
			err = os.Mkdir(d, 0)
		case hidden[name]:
			err = emptyFile(d, 0o444)
		case t&os.ModeSymlink != 0:
			var target string
			if target, err = os.Readlink(s); err == nil {
				err = os.Symlink(target, d)
			}
		case t.IsDir():
			if err = os.Mkdir(d, 0o755); err == nil {
				err = unix.Mount(s, d, "", unix.MS_BIND|unix.MS_REC, "")
			}
		case t.IsRegular():
			if err = emptyFile(d, 0o444); err == nil {
				err = unix.Mount(s, d, "", unix.MS_BIND, "")
			}
		}
		if err != nil {
			return fail(fmt.Errorf("%s: %w", name, err))
		}
	}
	if err := unix.Mount("", stage, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fail(fmt.Errorf("read-only: %w", err))
	}
	if err := unix.Mount(stage, src, "", unix.MS_MOVE, ""); err != nil {
		return fail(fmt.Errorf("move in place: %w", err))
	}
	if err := unix.Rmdir(stage); err != nil {
		return fail(err)
	}
	return nil
}

func emptyFile(path string, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	return f.Close()
}

// hide covers h inside the new root (root is its path before pivot_root,
// "" after) when a system dir makes it visible: an empty read-only tmpfs
// over a directory, /dev/null over a file. It reports whether h was there.
// hideAll uses it only for a path directly under /.
func hide(root, h string) (bool, error) {
	dst := root + h
	fi, err := os.Lstat(dst)
	if err != nil {
		return false, nil // not visible (yet)
	}
	if fi.IsDir() {
		if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0000,size=4k"); err != nil {
			return false, fmt.Errorf("init: hide %s: %w", h, err)
		}
		return true, nil
	}
	if err := unix.Mount("/dev/null", dst, "", unix.MS_BIND, ""); err != nil {
		return false, fmt.Errorf("init: hide %s: %w", h, err)
	}
	// A bind mount keeps its source's flags: every mount is nosuid.
	if err := Remount(dst, unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
		return false, fmt.Errorf("init: hide %s: %w", h, err)
	}
	return true, nil
}

func setupDev(root string, shm bool) error {
	dev := root + "/dev"
	if err := os.Mkdir(dev, 0o755); err != nil {
		return fmt.Errorf("init: /dev: %w", err)
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("init: mount /dev: %w", err)
	}
	for _, f := range devFiles {
		dst := path.Join(dev, f)
		if err := os.WriteFile(dst, nil, 0o666); err != nil {
			return fmt.Errorf("init: /dev/%s: %w", f, err)
		}
		if err := unix.Mount("/dev/"+f, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("init: bind /dev/%s: %w", f, err)
		}
		// A bind mount keeps its source's flags (the host's devtmpfs may
		// lack nosuid): every mount of the sandbox is nosuid.
		if err := Remount(dst, unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, path.Join(dev, name)); err != nil {
			return fmt.Errorf("init: /dev/%s: %w", name, err)
		}
	}
	if err := os.Mkdir(dev+"/shm", 0o1777); err != nil {
		return fmt.Errorf("init: /dev/shm: %w", err)
	}
	if !shm {
		return nil // a zygote's runs mount their own
	}
	if err := unix.Mount("tmpfs", dev+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=16m"); err != nil {
		return fmt.Errorf("init: mount /dev/shm: %w", err)
	}
	return nil
}

// setLimits sets the per-process resource limits the program inherits.
// syscall.Setrlimit (not x/sys/unix) so the Go runtime does not restore its
// own RLIMIT_NOFILE for the child.
func setLimits(spec *Spec) error {
	set := func(name string, res int, soft, hard uint64) error {
		if err := syscall.Setrlimit(res, &syscall.Rlimit{Cur: soft, Max: hard}); err != nil {
			return fmt.Errorf("init: setrlimit %s: %w", name, err)
		}
		return nil
	}
	// Not root, the init shares the program's uid (and its count): leave
	// room for the init's own threads.
	nproc := spec.NProc
	if !spec.SetUID {
		nproc += 16
	}
	if err := set("NPROC", unix.RLIMIT_NPROC, nproc, nproc); err != nil {
		return err
	}
	if err := set("DATA", unix.RLIMIT_DATA, spec.Data, spec.Data); err != nil {
		return err
	}
	if err := set("FSIZE", unix.RLIMIT_FSIZE, spec.FSize, spec.FSize); err != nil {
		return err
	}
	if err := set("NOFILE", unix.RLIMIT_NOFILE, spec.NoFile, spec.NoFile); err != nil {
		return err
	}
	if err := set("CPU", unix.RLIMIT_CPU, spec.CPU, spec.CPU+1); err != nil {
		return err
	}
	if err := set("CORE", unix.RLIMIT_CORE, 0, 0); err != nil {
		return err
	}
	// Below the gateway: a busy program slows itself, not the chat.
	if err := unix.Setpriority(unix.PRIO_PROCESS, 0, 10); err != nil {
		return fmt.Errorf("init: setpriority: %w", err)
	}
	return nil
}

// dropPrivileges switches this thread to the program's uid/gid with no
// supplementary groups (root gateway) and empties its capability sets
// (effective, permitted, inheritable, ambient and bounding). The thread then
// runs as a non-root uid, so execve grants nothing back. Raw syscalls: Go's
// setuid changes every thread, and only this one must change.
func dropPrivileges(spec *Spec) error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("init: clear ambient capabilities: %w", err)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("init: drop capability %d from the bounding set: %w", c, err)
		}
	}
	if spec.SetUID {
		if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); errno != 0 {
			return fmt.Errorf("init: setgroups: %w", errno)
		}
		if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(spec.GID), uintptr(spec.GID), uintptr(spec.GID)); errno != 0 {
			return fmt.Errorf("init: setresgid %d: %w", spec.GID, errno)
		}
		if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(spec.UID), uintptr(spec.UID), uintptr(spec.UID)); errno != 0 {
			return fmt.Errorf("init: setresuid %d: %w", spec.UID, errno)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("init: capset: %w", err)
	}
	r, e, sv := unix.Getresuid() // this thread's ids (raw syscall)
	if r == 0 || e == 0 || sv == 0 {
		return errors.New("init: refusing to run the program as uid 0")
	}
	return nil
}
