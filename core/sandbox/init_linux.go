//go:build linux

package sandbox

import (
	"syscall"

	"github.com/silas-gateway/silas/core/sandbox/sandboxinit"
)

// The sandbox's init lives in core/sandbox/sandboxinit, whose own package
// init takes over a network-off run before the gateway's other packages
// are initialised. A network-on run needs this package's nftables code:
// sandboxinit leaves it to this init, which runs once those are.
func init() {
	if code := sandboxinit.Main(setupNetwork); code >= 0 {
		// syscall.Exit, not os.Exit: the race detector's exit hook sleeps
		// a second in race-enabled test binaries, on every run.
		syscall.Exit(code)
	}
}

// The gateway's side of the init's protocol (subprocess.go).
type (
	initSpec = sandboxinit.Spec
	runSpec  = sandboxinit.RunSpec
)

const (
	initArg0    = sandboxinit.Arg0
	initSpecArg = sandboxinit.SpecArg
)

const (
	statusReady    = sandboxinit.StatusReady
	statusSetupErr = sandboxinit.StatusSetupErr
	statusExecErr  = sandboxinit.StatusExecErr
	statusExit     = sandboxinit.StatusExit
	statusWorkFull = sandboxinit.StatusWorkFull
	statusWorkCopy = sandboxinit.StatusWorkCopy
)

var (
	systemDirs  = sandboxinit.SystemDirs
	remount     = sandboxinit.Remount
	landlockABI = sandboxinit.LandlockABI
	copyTree    = sandboxinit.CopyTree
	workDirFull = sandboxinit.WorkDirFull
	errnoText   = sandboxinit.ErrnoText
)
