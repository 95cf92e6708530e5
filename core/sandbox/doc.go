// Package sandbox holds the sandbox backend that runs approved actions.
//
// # Subprocess backend
//
// [Subprocess] (Linux) runs each program in a sandbox that is a boundary:
// the gateway re-executes its own binary as the sandbox's init (argv[0]
// "silas-sandbox-init", package sandboxinit) in new mount, PID, IPC, UTS,
// cgroup and network namespaces (plus a user namespace when the gateway is
// not root); pasta connects a network-on run's namespace to the outside,
// TCP and UDP only to the allowed ports (netns_linux.go,
// netfilter_linux.go), and network-on runs are refused without it. The init builds a
// new root (system dirs read-only, hidden paths covered, the work dir
// writable at /work, private /tmp, minimal /dev, own /proc), pivots into
// it, sets rlimits, empties every capability set and switches to the
// program's unprivileged uid, sets no_new_privs, applies Landlock and a
// seccomp filter, and starts the program as its only child. When the
// program ends the init exits and the kernel kills whatever else the run
// started.
//
// A root gateway forks its network-off runs' inits from a zygote
// (sandboxinit/zygote_linux.go, zygote_linux.go) instead of re-executing
// its binary for each: the same steps in the same order, on a root the
// zygote built once.
//
// New probes the whole chain once; when any required isolation is missing
// every Run fails with an error wrapping core.ErrIsolationUnavailable that
// names what is missing (fail closed). docs/sandbox.md lists what is
// isolated, how, and what is not; core/sandbox/escape_test.go is the escape
// suite.
//
// This package must never run a program without that isolation (nor a
// network-on program in the host's network namespace), never pass
// the gateway's environment, and never log arguments, environment values or
// output.
package sandbox
