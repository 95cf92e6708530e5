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
	// Details are printed one a line under the finding, indented (the
	// newest dead letters under their count).
	Details []string
}

// List gathers a block's findings in order.
type List []Finding

// Add appends a finding whose message is format with a.
func (l *List) Add(s Severity, check, format string, a ...any) {
	*l = append(*l, Finding{Severity: s, Check: check, Message: fmt.Sprintf(format, a...)})
}

// Skipped is the single finding of a block that did not run, with why.
func Skipped(why string) []Finding { return []Finding{{Severity: Info, Message: why}} }

var marks = map[Severity]string{OK: "✓", Info: "·", Warn: "!", Error: "✗"}

// checkWidth is the column a finding's check is padded to. A check as long
// as the column or longer is followed by two spaces, so it never reads as
// the start of the message ("dead letters  none").
const checkWidth = 12

// Print writes the findings one a line under a block title and returns
// how many are errors (doctor's exit status counts them).
func Print(w io.Writer, fs []Finding) int {
	problems := 0
	for _, f := range fs {
		switch {
		case f.Check == "":
			fmt.Fprintf(w, "  %s %s\n", marks[f.Severity], f.Message)
		case len([]rune(f.Check)) >= checkWidth:
			fmt.Fprintf(w, "  %s %s  %s\n", marks[f.Severity], f.Check, f.Message)
		default:
			fmt.Fprintf(w, "  %s %-*s %s\n", marks[f.Severity], checkWidth, f.Check, f.Message)
		}
		for _, d := range f.Details {
			fmt.Fprintf(w, "      %s\n", d)
		}
		if f.Severity == Error {
			problems++
		}
	}
	return problems
}

// Block prints a block's title, runs its check and prints the findings
// (Print); it returns how many are errors. The title comes first, so the
// operator sees what a slow check (one over the network) is waiting for.
func Block(w io.Writer, title string, check func() []Finding) int {
	fmt.Fprintln(w, title)
	return Print(w, check())
}
