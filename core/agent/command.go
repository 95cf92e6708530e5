// Package agent holds the deterministic command agent, Silas's default
// agent: `/run <command>` proposes exactly that command as a shell-tool
// action with an exit-code check; anything else gets a short hint. It never
// sees secrets or approval state and cannot approve or verify anything.
package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/verify"
)

// Command is the deterministic command agent.
type Command struct{}

var _ core.InlineAgent = Command{}

// Inline reports that Respond is pure and fast (see core.InlineAgent).
func (Command) Inline() bool { return true }

// Respond implements core.Agent.
func (Command) Respond(_ context.Context, in core.AgentInput) (core.Proposal, error) {
	text := strings.TrimSpace(in.Text)
	cmd, rest, _ := strings.Cut(text, " ")
	if cmd != "/run" {
		return core.Proposal{Reply: "I run commands you approve. Try `/run uname -a`, or /help."}, nil
	}
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return core.Proposal{Reply: "Usage: /run <command> — for example `/run uname -a`."}, nil
	}
	argv, err := Split(rest)
	if err != nil {
		return core.Proposal{Reply: fmt.Sprintf("I could not read that command: %v.", err)}, nil
	}
	// Leading "--secret NAME" options declare secrets the command receives
	// as environment variables ($NAME upper-cased). Only names travel here.
	var names []string
	for len(argv) >= 2 && argv[0] == "--secret" {
		names = append(names, argv[1])
		argv = argv[2:]
	}
	if len(argv) == 0 {
		return core.Proposal{Reply: "Usage: /run [--secret <name>] <command>."}, nil
	}
	a := core.Action{Tool: "shell", Argv: argv, Secrets: names, Verify: []verify.Check{verify.ExitCodeZero()}}
	return core.Proposal{Actions: []core.ProposedAction{{
		Action:    a,
		Intent:    "Run " + a.CommandLine(),
		Rationale: "You asked me to run this command. It runs without a shell, in a sandbox without network, and counts as done only if it exits with code 0.",
	}}}, nil
}

// Split breaks a command line into argv the way a POSIX shell tokenises
// words — single quotes, double quotes and backslash escapes — but with no
// expansion of any kind: no variables, globs, pipes, redirections or command
// substitution. Such characters are passed through literally as arguments.
func Split(s string) ([]string, error) {
	var (
		args    []string
		cur     strings.Builder
		inWord  bool
		quote   rune // 0, '\'' or '"'
		escaped bool
	)
	for _, r := range s {
		switch {
		case escaped:
			if quote == '"' && r != '"' && r != '\\' && r != '$' && r != '`' && r != '\n' {
				cur.WriteRune('\\')
			}
			if r != '\n' {
				cur.WriteRune(r)
			}
			escaped = false
			inWord = true
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch r {
			case '"':
				quote = 0
			case '\\':
				escaped = true
			default:
				cur.WriteRune(r)
			}
		case r == '\\':
			escaped = true
		case r == '\'' || r == '"':
			quote = r
			inWord = true
		case r == ' ' || r == '\t' || r == '\n' || r == '\r':
			if inWord {
				args = append(args, cur.String())
				cur.Reset()
				inWord = false
			}
		case r == 0:
			return nil, errors.New("NUL character in command")
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if escaped {
		return nil, errors.New("trailing backslash")
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if inWord {
		args = append(args, cur.String())
	}
	if len(args) == 0 {
		return nil, errors.New("empty command")
	}
	return args, nil
}
