// Package gcdefault sets the Go garbage collector's target for Silas's
// processes when the operator has not: GOGC=200 instead of Go's 100.
//
// Why: a text turn allocates ≈ 20 kB (most of it pgx's encoding of a
// group commit's multi-row statements and the audit rows), so with Go's
// default the gateway collected every ≈ 240 turns under load and the
// collector took a large share of the gateway's CPU per turn
// (BENCHMARKS.md "Issue 26 — turns": `silas-load` reports allocation per
// turn and turns per collection). 200 halves the collections for a heap
// that may grow to three times the live data instead of twice (the live
// heap of a gateway is a few MB).
//
// It must never override the environment: GOGC (and GOMEMLIMIT, which it
// does not touch) set by the operator win, and so does GOGC=off.
package gcdefault

import (
	"os"
	"runtime/debug"
)

// Percent is the GOGC value Apply sets.
const Percent = 200

// Apply sets GOGC to Percent unless the environment sets GOGC. It reports
// whether it did.
func Apply() bool {
	if _, set := os.LookupEnv("GOGC"); set {
		return false
	}
	debug.SetGCPercent(Percent)
	return true
}
