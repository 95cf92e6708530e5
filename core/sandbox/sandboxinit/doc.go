// Package sandboxinit is the sandbox's init: the gateway binary
// re-executed (argv[0] "silas-sandbox-init") inside a run's new
// namespaces, where it builds the root, drops every privilege, applies
// Landlock and seccomp and starts the approved program (see
// core/sandbox's package doc for the whole boundary).
//
// It is a package of its own so that its init runs first: Go initialises
// packages in dependency order, then by import path, so the re-executed
// init would otherwise wait for every package the gateway links. This
// package must therefore never import anything heavier than the standard
// library's low-level packages and golang.org/x/sys/unix (not even
// path/filepath; check with `go list -deps`), and must never
// start a program before every isolation step has succeeded.
package sandboxinit

// WorkDir is where a run's work directory appears inside the sandbox:
// its cwd and HOME. Programs never learn the host path.
const WorkDir = "/work"
