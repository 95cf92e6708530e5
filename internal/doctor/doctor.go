// Package doctor is the one shape of a `silas doctor` finding, shared by
// every check (database, sandbox, model, each platform adapter), and the
// one way they are printed. It checks nothing itself and must never hold a
// secret: a finding's message is printed as is.
package doctor

import (
	"fmt"
	"io"
)

// Severity of a finding, ordered from fine to broken.
type Severity int

// Severities, from fine to broken.
const (
	OK Severity = iota
	Info
	Warn
	Error
)

// String is the severity's word ("ok", "info", "warn", "error").
func (s Severity) String() string {
	switch s {
	case OK:
		return "ok"
	case Info:
		return "info"
	case Warn:
		return "warn"
	case Error:
		return "error"
	}
	return fmt.Sprintf("severity(%d)", int(s))
}

// Finding is one result of a check, in plain words for the operator.
type Finding struct {
	Severity Severity
	// Check names what was checked ("config", "token", "webhook", …); ""
	// prints the message alone (a whole block skipped, for example).
	Check   string
	Message string
}

// Skipped is the single finding of a block that did not run, with why.
func Skipped(why string) []Finding { return []Finding{{Severity: Info, Message: why}} }

var marks = map[Severity]string{OK: "✓", Info: "·", Warn: "!", Error: "✗"}

// Print writes the findings one a line under a block title and returns
// how many are errors (doctor's exit status counts them).
func Print(w io.Writer, fs []Finding) int {
	problems := 0
	for _, f := range fs {
		if f.Check == "" {
			fmt.Fprintf(w, "  %s %s\n", marks[f.Severity], f.Message)
		} else {
			fmt.Fprintf(w, "  %s %-12s %s\n", marks[f.Severity], f.Check, f.Message)
		}
		if f.Severity == Error {
			problems++
		}
	}
	return problems
}
