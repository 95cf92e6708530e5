// Empty: lets zygote_linux.go declare the runtime's fork hooks without a body (go:linkname).
