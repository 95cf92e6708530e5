//go:build linux

package sandboxinit

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// x32Bit marks x32 ABI syscall numbers, denied wholesale.
	x32Bit = 0x40000000
)

var archDeniedSyscalls = []uintptr{unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_USELIB}
