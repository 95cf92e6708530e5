package policy

// Opaque reports whether a program's arguments do not tell what it runs: a
// shell, an interpreter, a wrapper that runs another command, or a program
// taking a script in an option. A standing consent (core/consent) never
// covers such a program: "allow `sh -c X` for an hour" would allow any X.
func Opaque(argv0 string) bool {
	name := base(argv0)
	if name == "" {
		return true
	}
	if shells[name] || isInterpreter(name) || privileged[name] {
		return true
	}
	if _, ok := wrappers[name]; ok {
		return true
	}
	_, ok := scriptOpts[name]
	return ok
}
