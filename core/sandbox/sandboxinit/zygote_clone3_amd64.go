//go:build linux && !silas_fuzz && !race

package sandboxinit

// clone3Init is clone3(2) for a forked init (assembly): the parent
// returns the child's pid, the child starts in childStart(a) on
// args.stack and never returns.
//
//go:noescape
func clone3Init(args *cloneArgs, size uintptr, a *forkArgs) (r1, err uintptr)
