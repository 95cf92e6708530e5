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
	case "send-udp":
		// One datagram, then wait for the echo: "ok" only when something
		// outside the run answered.
		c, err := net.Dial("udp", arg(2))
		if err != nil {
			report(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("silas-escape")); err != nil {
			report(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = c.Read(make([]byte, 64))
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
	case "memory-split":
		memorySplit(arg(2), arg(3))
	case "tasks":
		tasks()
	default:
		fmt.Printf("unknown attempt %q\n", os.Args[1])
		os.Exit(2)
	}
}

// memorySplit forks n children that each map and touch mib MiB (each
// below the data limit, together above the run's memory cgroup) and
// reports whether all of them got their memory: "memory-split: ok", or the
// signal that killed one (exit 137 for the OOM killer's SIGKILL).
func memorySplit(ns, mibs string) {
	n, _ := strconv.Atoi(ns)
	mib, _ := strconv.Atoi(mibs)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		fmt.Printf("memory-split: pipe: %v\n", err)
		os.Exit(1)
	}
	size := uintptr(mib) << 20
	for i := 0; i < n; i++ {
		pid, _, e := unix.RawSyscall(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0)
		if e != 0 {
			fmt.Printf("memory-split: fork: %v\n", e)
			os.Exit(1)
		}
		if pid == 0 {
			// The child of a raw fork has one thread and no Go runtime
			// to speak of: raw system calls only.
			addr, _, e := unix.RawSyscall6(unix.SYS_MMAP, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uintptr(0), 0)
			if e != 0 {
				unix.RawSyscall(unix.SYS_EXIT_GROUP, 3, 0, 0)
			}
			for off := uintptr(0); off < size; off += 4096 {
				*(*byte)(unsafe.Pointer(addr + off)) = 1
			}
			one := [1]byte{1}
			unix.RawSyscall(unix.SYS_WRITE, uintptr(p[1]), uintptr(unsafe.Pointer(&one[0])), 1)
			for {
				unix.RawSyscall6(unix.SYS_PPOLL, 0, 0, 0, 0, 0, 0)
			}
		}
	}
	unix.Close(p[1])
	ready := 0
	buf := make([]byte, 64)
	for ready < n {
		var ws unix.WaitStatus
		if wpid, _ := unix.Wait4(-1, &ws, unix.WNOHANG, nil); wpid > 0 {
			if ws.Signaled() {
				fmt.Printf("memory-split: a child was killed by signal %d after %d of %d had %d MiB\n", ws.Signal(), ready, n, mib)
				os.Exit(128 + int(ws.Signal()))
			}
			fmt.Printf("memory-split: a child exited %d (its mmap failed: the data limit)\n", ws.ExitStatus())
			os.Exit(1)
		}
		fds := []unix.PollFd{{Fd: int32(p[0]), Events: unix.POLLIN}}
		if k, _ := unix.Poll(fds, 50); k > 0 {
			m, _ := unix.Read(p[0], buf)
			ready += max(m, 0)
		}
	}
	fmt.Printf("memory-split: ok, %d processes with %d MiB each\n", n, mib)
	unix.Kill(-1, unix.SIGKILL) // the children; the program ends the run anyway
}

// tasks forks sleeping children until fork fails, then reports how many
// tasks the run held at that moment: its own and the init's (the PID
// namespace's /proc shows both). Every count is taken before the forks,
// so nothing but the forks changes while they run.
func tasks() {
	own, init := countTasks("/proc/self/task"), countTasks("/proc/1/task")
	forked := 0
	var ferr unix.Errno
	for forked < 1<<16 {
		pid, _, e := unix.RawSyscall(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0)
		if e != 0 {
			ferr = e
			break
		}
		if pid == 0 {
			for {
				unix.RawSyscall6(unix.SYS_PPOLL, 0, 0, 0, 0, 0, 0)
			}
		}
		forked++
	}
	fmt.Printf("tasks: fork failed (%v) after %d children; the run held %d tasks (the probe's %d, the init's %d)\n",
		ferr, forked, forked+own+init, own, init)
	unix.Kill(-1, unix.SIGKILL)
}

func countTasks(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		fmt.Printf("tasks: %v\n", err)
		os.Exit(1)
	}
	return len(ents)
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
