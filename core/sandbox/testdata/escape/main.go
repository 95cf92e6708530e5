// Command escape is the sandbox escape suite's probe: built statically by
// the test, copied into a work dir and run inside the sandbox, it attempts
// one escape (argv[1]) with direct system calls and prints
// "<attempt>: <errno text>" or "<attempt>: ok" so the test can assert the
// specific failure.
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Println("usage: escape <attempt> [args]")
		os.Exit(2)
	}
	arg := func(i int) string {
		if len(os.Args) > i {
			return os.Args[i]
		}
		return ""
	}
	report := func(err error) {
		if err != nil {
			fmt.Printf("%s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		fmt.Printf("%s: ok\n", os.Args[1])
	}
	switch os.Args[1] {
	case "read":
		_, err := os.ReadFile(arg(2))
		report(err)
	case "write":
		report(os.WriteFile(arg(2), []byte("x"), 0o644))
	case "connect-unix":
		c, err := net.DialTimeout("unix", arg(2), 2*time.Second)
		if err == nil {
			c.Close()
		}
		report(err)
	case "connect-tcp":
		c, err := net.DialTimeout("tcp", arg(2), 2*time.Second)
		if err == nil {
			c.Close()
		}
		report(err)
	case "kill":
		pid, _ := strconv.Atoi(arg(2))
		report(unix.Kill(pid, syscall.SIGKILL))
	case "ptrace":
		pid, _ := strconv.Atoi(arg(2))
		report(unix.PtraceAttach(pid))
	case "mount":
		report(unix.Mount("tmpfs", "/tmp", "tmpfs", 0, ""))
	case "umount":
		report(unix.Unmount("/proc", unix.MNT_DETACH))
	case "unshare-user":
		report(unix.Unshare(unix.CLONE_NEWUSER))
	case "unshare-net":
		report(unix.Unshare(unix.CLONE_NEWNET))
	case "setns":
		fd, err := unix.Open(arg(2), unix.O_RDONLY, 0)
		if err != nil {
			report(err)
		}
		report(unix.Setns(fd, 0))
	case "clone-newuser":
		_, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}})
		report(err)
	case "bpf":
		_, _, e := unix.Syscall(unix.SYS_BPF, 0, 0, 0)
		report(errnoErr(e))
	case "keyctl":
		_, _, e := unix.Syscall(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&[]byte("user\x00")[0])), uintptr(unsafe.Pointer(&[]byte("k\x00")[0])), 0)
		report(errnoErr(e))
	case "perf":
		_, _, e := unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0, 0)
		report(errnoErr(e))
	case "kexec":
		_, _, e := unix.Syscall6(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0, 0, 0)
		report(errnoErr(e))
	case "init-module":
		_, _, e := unix.Syscall(unix.SYS_INIT_MODULE, 0, 0, 0)
		report(errnoErr(e))
	case "reboot":
		report(unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF))
	case "chroot":
		report(unix.Chroot("/tmp"))
	case "setuid-root":
		report(unix.Setuid(0))
	case "memory":
		// Map and touch 8 GiB, 64 MiB at a time, outside the Go heap (so
		// the limit shows as mmap's errno, not as a runtime crash).
		const chunk = 64 << 20
		for i := 0; i < 128; i++ {
			b, err := unix.Mmap(-1, 0, chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				fmt.Printf("memory: after %d MiB: %v\n", i*64, err)
				os.Exit(1)
			}
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
		}
		report(nil)
	default:
		fmt.Printf("unknown attempt %q\n", os.Args[1])
		os.Exit(2)
	}
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
