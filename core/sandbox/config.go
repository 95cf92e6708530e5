package sandbox

import (
	"log/slog"
	"time"
)

// Defaults applied by [New] when the corresponding Config field is zero.
const (
	DefaultTimeout   = 60 * time.Second
	DefaultMaxOutput = 1 << 20 // bytes, per stream
)

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
	// RunAs is an optional unix user (name or numeric uid) to run programs
	// as; it requires the gateway to run as root. Empty means the gateway's
	// own user. Fresh work directories are chowned to this user and BaseDir
	// is made traversable (but not listable) by others.
	RunAs string
	// Logger receives debug records (program name, duration, exit code);
	// never arguments, environment values or output. Nil discards.
	Logger *slog.Logger

	// netnsProbe replaces the network-namespace probe (tests use it to force
	// "unavailable"). Nil means the real probe.
	netnsProbe func(*Subprocess) nsMode
}

// nsMode is how network isolation is achieved on this host.
type nsMode int

const (
	nsNone    nsMode = iota // network namespaces unavailable
	nsNet                   // CLONE_NEWNET (gateway has CAP_SYS_ADMIN)
	nsUserNet               // CLONE_NEWUSER|CLONE_NEWNET with identity uid/gid maps
)

func (m nsMode) String() string {
	switch m {
	case nsNet:
		return "netns"
	case nsUserNet:
		return "userns+netns"
	default:
		return "none"
	}
}
