// Package lazyre is a regular expression compiled the first time it is
// used: for the package-level patterns of parts that may never run in a
// given process — a disabled platform's adapter validates its tokens and
// ids with them.
//
// Why: regexp.MustCompile at package level runs in every process that
// links the package, and a counted repetition such as [A-Za-z0-9_-]{1,64}
// compiles to a program that many instructions long, kept alive for the
// process's life: Discord's and Slack's patterns alone held ≈ 0.5 MB of
// heap in a gateway serving only Telegram, three times that in heap goal
// (GOGC=200; BENCHMARKS.md "Issue 26 — RSS (this session)").
//
// It must never accept a pattern regexp.MustCompile would refuse or match
// differently: it compiles the same pattern with regexp.MustCompile, once,
// and panics at first use where MustCompile would have panicked at start.
package lazyre

import (
	"regexp"
	"sync"
)

// Regexp is a pattern compiled on first use; safe for concurrent use.
type Regexp struct {
	pattern string
	once    sync.Once
	re      *regexp.Regexp
}

// New returns pattern, compiled when first used.
func New(pattern string) *Regexp { return &Regexp{pattern: pattern} }

// Regexp returns the compiled pattern.
func (r *Regexp) Regexp() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.pattern) })
	return r.re
}

// String returns the source text of the pattern.
func (r *Regexp) String() string { return r.pattern }

// MatchString is regexp.Regexp.MatchString.
func (r *Regexp) MatchString(s string) bool { return r.Regexp().MatchString(s) }

// FindStringSubmatch is regexp.Regexp.FindStringSubmatch.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.Regexp().FindStringSubmatch(s) }

// FindAllStringSubmatch is regexp.Regexp.FindAllStringSubmatch.
func (r *Regexp) FindAllStringSubmatch(s string, n int) [][]string {
	return r.Regexp().FindAllStringSubmatch(s, n)
}

// ReplaceAllStringFunc is regexp.Regexp.ReplaceAllStringFunc.
func (r *Regexp) ReplaceAllStringFunc(src string, repl func(string) string) string {
	return r.Regexp().ReplaceAllStringFunc(src, repl)
}
