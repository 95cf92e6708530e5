package sandbox

import (
	"log/slog"
	"time"

	"github.com/silas-gateway/silas/core/sandbox/sandboxinit"
)

// Defaults applied by [New] when the corresponding Config field is zero.
const (
	DefaultTimeout   = 60 * time.Second
	DefaultMaxOutput = 1 << 20 // bytes, per stream

	// DefaultMaxProcs bounds the tasks (processes and threads) one run may
	// have at once: a fork bomb stalls at this many and ends with the run.
	DefaultMaxProcs = 256
	// DefaultMaxMemory bounds one run's memory: the memory cgroup's limit
	// for the whole run when cgroups are available, and every process's
	// data segment (RLIMIT_DATA) in any case.
	DefaultMaxMemory = 1 << 30
	// DefaultMaxFileSize bounds any file a run writes (RLIMIT_FSIZE).
	DefaultMaxFileSize = 1 << 30
	// DefaultMaxOpenFiles bounds each process's open files (RLIMIT_NOFILE).
	DefaultMaxOpenFiles = 1024
	// DefaultTmpSize is the size of the private /tmp each run gets.
	DefaultTmpSize = 256 << 20
	// DefaultMaxWork bounds what one run can write to its work dir (each
	// run works in a filesystem of this size; writes past it fail with
	// ENOSPC).
	DefaultMaxWork = 256 << 20
	// DefaultKeepWorkFor is how long a work dir is kept once its run is
	// verified (for an operator to inspect), within DefaultMaxKeptWork.
	DefaultKeepWorkFor = 24 * time.Hour
	// DefaultMaxKeptWork bounds the kept work dirs together; past it the
	// oldest are removed first.
	DefaultMaxKeptWork = 512 << 20
	// DefaultRunAs is the user programs run as when the gateway runs as
	// root and Config.RunAs is empty. When the system has no such user,
	// uid/gid 65534 is used.
	DefaultRunAs = "nobody"
)

// DefaultNetworkPorts are the TCP and UDP ports a run with network access
// may reach when Config.NetworkPorts is empty: DNS, HTTP, HTTPS (and QUIC).
var DefaultNetworkPorts = []uint16{53, 80, 443}

// SandboxWorkDir is where a run's work directory appears inside the sandbox:
// its cwd and HOME. Programs never learn the host path.
const SandboxWorkDir = sandboxinit.WorkDir

// MinimalPath is the PATH programs see (unless the request sets its own) and
// the only place argv[0] is looked up when it contains no slash.
const MinimalPath = "/usr/local/bin:/usr/bin:/bin"

// Config configures the subprocess backend.
type Config struct {
	// BaseDir is where per-execution work directories are created (each
	// 0700). Required. It is created (0700) when missing.
	BaseDir string
	// DefaultTimeout is used when ExecRequest.Timeout is zero (default 60s).
	DefaultTimeout time.Duration
	// MaxOutput is used when ExecRequest.OutputLimit is zero (default 1 MiB
	// per stream).
	MaxOutput int
	// RunAs is the unix user (name or numeric uid) programs run as when the
	// gateway runs as root; empty means DefaultRunAs. It must not be root.
	// A gateway that is not root runs programs as its own uid (inside their
	// own user namespace) and RunAs must be empty or that same user.
	RunAs string
	// HiddenPaths are files and directories that must not be visible in the
	// sandbox even when they lie inside a system directory it shows (/etc,
	// /usr, /opt…): the data dir, key files, the secrets key, PostgreSQL's
	// data and socket dirs, token files. Paths outside those system
	// directories are invisible anyway.
	HiddenPaths []string
	// MaxProcs, MaxMemory, MaxFileSize, MaxOpenFiles and TmpSize bound each
	// run (zero means the Default* value).
	MaxProcs     int
	MaxMemory    int64
	MaxFileSize  int64
	MaxOpenFiles int
	TmpSize      int64
	// MaxWork bounds each run's work dir in bytes (zero: DefaultMaxWork):
	// the program works on a copy in a tmpfs of this size (and
	// max(1024, MaxWork/4096) files), copied back when the run is over.
	MaxWork int64
	// KeepWorkFor is how long a released work dir (see
	// [Subprocess.Release]) is kept: zero means DefaultKeepWorkFor,
	// negative removes it at release.
	KeepWorkFor time.Duration
	// MaxKeptWork bounds the released work dirs kept together (zero:
	// DefaultMaxKeptWork); the oldest are removed first.
	MaxKeptWork int64
	// NetworkPorts are the TCP and UDP ports a run with
	// ExecRequest.Network may reach (nftables in its network namespace,
	// Landlock for TCP); empty means DefaultNetworkPorts.
	NetworkPorts []uint16
	// NetworkDNS is the resolver (an IPv4 address) a network-on run's DNS
	// queries go to: pasta forwards what the run sends to the one resolver
	// its /etc/resolv.conf names there. Empty means the first nameserver of
	// the host's /etc/resolv.conf, as pasta picks it.
	NetworkDNS string
	// Logger receives debug records (program name, duration, exit code);
	// never arguments, environment values or output. Nil discards.
	Logger *slog.Logger

	// noZygote makes every run re-execute the init (tests of that path
	// as root).
	noZygote bool
	// noCgroups disables cgroups (tests of the rlimit-only path).
	noCgroups bool
	// pasta is the network stack's path ("" searches PATH and the usual
	// dirs; tests of the fail-closed path name a missing file).
	pasta string
	// forceUnavailable makes the probe fail with this reason (tests of the
	// fail-closed path).
	forceUnavailable string
}
