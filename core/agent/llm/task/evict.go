package task

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Eviction rules (seed 000 §2.8): output longer than EvictAbove characters
// is stored and the model gets a pointer and the first SummaryChars
// characters; it may ask for the whole output back only when it is at most
// RehydrateMax characters. Sizes count characters of the original output.
const (
	EvictAbove   = 10_000
	SummaryChars = 500
	RehydrateMax = 50_000
)

// Result is a tool result as the model sees it.
type Result struct {
	Status string `json:"status"` // "ok", "failed", "blocked", "declined"
	// Output is the output itself, or for an evicted one a line naming the
	// pointer.
	Output             string `json:"output"`
	Evicted            bool   `json:"evicted"`
	Pointer            string `json:"pointer,omitempty"`
	SizeChars          int    `json:"size_chars"`
	RehydrationAllowed bool   `json:"rehydration_allowed"`
	Summary            string `json:"summary,omitempty"`
}

// Saver stores an evicted output and returns its pointer (the stored
// output's reference).
type Saver func(output string) (pointer string, err error)

// Interpret is the interpreter node: it decides eviction from the original
// output's size and returns what the model is shown.
func Interpret(status, output string, save Saver) (Result, error) {
	n := utf8.RuneCountInString(output)
	if n <= EvictAbove {
		return Result{Status: status, Output: output, SizeChars: n, RehydrationAllowed: true}, nil
	}
	ptr, err := save(output)
	if err != nil {
		return Result{}, fmt.Errorf("task: store evicted output: %w", err)
	}
	if ptr == "" {
		return Result{}, errors.New("task: store evicted output: empty pointer")
	}
	return Result{
		Status:             status,
		Output:             "[EVICTED] Content at " + ptr,
		Evicted:            true,
		Pointer:            ptr,
		SizeChars:          n,
		RehydrationAllowed: n <= RehydrateMax,
		Summary:            prefix(output, SummaryChars),
	}, nil
}

// ErrTooLargeToRehydrate is returned for outputs over RehydrateMax.
var ErrTooLargeToRehydrate = fmt.Errorf("task: output is larger than %d characters and cannot be rehydrated; ask for a narrower command instead", RehydrateMax)

// Rehydrate returns an evicted output for the model when its size allows.
// load reads the stored output by pointer; the size is checked again on
// what was loaded, not only on what the result says.
func Rehydrate(r Result, load func(pointer string) (string, error)) (string, error) {
	if !r.Evicted {
		return r.Output, nil
	}
	if !r.RehydrationAllowed || r.SizeChars > RehydrateMax {
		return "", ErrTooLargeToRehydrate
	}
	s, err := load(r.Pointer)
	if err != nil {
		return "", fmt.Errorf("task: rehydrate %s: %w", r.Pointer, err)
	}
	if utf8.RuneCountInString(s) > RehydrateMax {
		return "", ErrTooLargeToRehydrate
	}
	return s, nil
}

func prefix(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// RehydrateCapped is what the model gets when it asks for an evicted output
// back (read_output): the output itself, or its first RehydrateMax
// characters and a line saying how much was left out — the model's context
// is never given more than that.
func RehydrateCapped(output string) (text string, capped bool) {
	n := utf8.RuneCountInString(output)
	if n <= RehydrateMax {
		return output, false
	}
	return prefix(output, RehydrateMax) + fmt.Sprintf("\n[CUT] The output has %d characters; only the first %d are given back. Run a narrower command (grep, head, tail) for the rest.", n, RehydrateMax), true
}
