package core

import (
	"context"
	"io"
	"time"
)

// ExecRequest is one program to run in a sandbox.
type ExecRequest struct {
	// Argv is executed directly (execve), never through a shell.
	Argv []string
	// Env is the complete environment; nothing is inherited from the
	// gateway. The sandbox adds PATH and HOME when absent.
	Env map[string]string
	// Dir is the work directory; empty means a fresh per-execution
	// directory the sandbox creates.
	Dir string
	// Timeout kills the whole process group when exceeded.
	Timeout time.Duration
	// OutputLimit caps bytes kept from stdout and from stderr each; the rest
	// is discarded and Truncated is set.
	OutputLimit int
	// Network allows network access. When false the sandbox must isolate the
	// process from the network or fail with ErrIsolationUnavailable.
	Network bool
	// Stdin, when set, is the program's standard input (else /dev/null);
	// Stdout, when set, receives its standard output as it is written,
	// and nothing of it is kept in the result. For a long-lived program
	// spoken to over its pipes (a stdio MCP server), under the same
	// isolation as any run.
	Stdin  io.Reader
	Stdout io.Writer
}

// ExecResult is what happened. A program that ran and failed is a result,
// not an error; errors mean the program could not be run as requested.
type ExecResult struct {
	ExitCode  int
	Stdout    []byte
	Stderr    []byte
	Truncated bool
	TimedOut  bool
	Duration  time.Duration
	// Dir is the work directory used (kept for verification).
	Dir string
	// Isolation describes the isolation applied ("netns", "none").
	Isolation string
}

// Sandbox runs programs with isolation.
type Sandbox interface {
	Run(ctx context.Context, req ExecRequest) (ExecResult, error)
}
