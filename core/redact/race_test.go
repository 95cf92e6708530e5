//go:build race

package redact

// The race detector slows regexp matching about tenfold.
const timeBudgetFactor = 10
