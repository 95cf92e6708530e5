package sandbox

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core"
)

// A run spoken to over its pipes (a stdio MCP server) reads the given
// standard input and writes to the given standard output, isolated like
// any run.
func TestRunWithPipes(t *testing.T) {
	s := newSandbox(t, Config{})
	var out bytes.Buffer
	res, err := s.Run(context.Background(), core.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("hello over the pipe\n"), Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || out.String() != "hello over the pipe\n" || len(res.Stdout) != 0 {
		t.Fatalf("exit %d, piped %q, captured %q", res.ExitCode, out.String(), res.Stdout)
	}
}
