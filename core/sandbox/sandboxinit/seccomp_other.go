//go:build linux && !amd64 && !arm64

package sandboxinit

// No filter table for this architecture: installSeccomp fails and the
// sandbox refuses to run (fail closed).
const (
	auditArch = 0
	x32Bit    = 0
)

var archDeniedSyscalls = []uintptr{}
