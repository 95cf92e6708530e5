// Package sandbox holds the sandbox backends that run approved actions.
//
// # Subprocess backend
//
// [Subprocess] runs a program as a child process of the gateway (Linux only).
// It is a containment measure for programs Silas already decided to run, not
// a jail for hostile code. What it guarantees:
//
//   - No shell: argv is executed directly (execve); metacharacters are passed
//     through literally. argv[0] is resolved against the fixed PATH
//     /usr/local/bin:/usr/bin:/bin, never against the gateway's PATH.
//   - Minimal environment: exactly ExecRequest.Env plus PATH, HOME (the work
//     directory) and LANG=C.UTF-8 when the request does not set them. Nothing
//     is inherited from the gateway (tokens, credentials, proxies ...).
//     Stdin is /dev/null and no file descriptors other than stdout and
//     stderr are inherited.
//   - Work directory: a fresh directory (mode 0700) under Config.BaseDir per
//     execution, used as cwd and HOME, kept afterwards for verification and
//     removed with [Subprocess.Cleanup].
//   - Network: a request with Network == false runs in a new, empty network
//     namespace (only a loopback interface, which is down): no route to the
//     host, the LAN, the internet or the gateway's own 127.0.0.1 services.
//     If network namespaces cannot be created on this host, such requests
//     fail with core.ErrIsolationUnavailable; the program never runs with
//     network it was not granted (fail closed).
//   - Time: the program runs in its own process group; when the timeout
//     expires or the context is done the whole group is killed with SIGKILL.
//     When the program exits, whatever it left running in its process group
//     is killed too. The direct child gets SIGKILL if the gateway dies
//     (parent-death signal).
//   - Output: at most OutputLimit bytes of stdout and of stderr each are kept;
//     the rest is drained and discarded so the program never blocks.
//   - Optional privilege drop: with Config.RunAs (gateway running as root)
//     the program runs as that user, with its primary group and no
//     supplementary groups.
//
// What it does NOT provide:
//
//   - No filesystem isolation. The program sees the host filesystem with the
//     permissions of the user it runs as (root unless RunAs is set). The work
//     directory is only its cwd and HOME, not a chroot; it can read (and, if
//     permitted, write) anything that user can. Use RunAs to limit this.
//   - No PID, IPC, mount or user isolation (beyond the user namespace used
//     as a vehicle for the network namespace when the gateway is not root):
//     the program can see other processes and signal those of its own user.
//   - No resource limits (CPU, memory, disk, number of processes) other than
//     the wall-clock timeout and the output cap; no seccomp syscall filter.
//   - Escape from cleanup: a process that leaves the process group (setsid,
//     setpgid) survives the group kill; Run stops waiting for its output
//     after a short grace period but does not kill it. Only the direct child
//     has the parent-death signal.
//   - Executions that share a RunAs user are not isolated from each other:
//     a program could reach another execution's work directory if it learns
//     its (random) name.
//
// Stronger isolation (mount/PID namespaces, cgroups, seccomp, or a VM) belongs
// in another backend behind the same core.Sandbox interface.
package sandbox
