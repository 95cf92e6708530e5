// Package core is the deterministic heart of Silas: the types and ports every
// other room depends on (turns, channels, agents, sandboxes, storage, and the
// records the store keeps — records.go, task.go) and, in its sub-packages,
// the turn pipeline, trust, risk policy, approvals, execution, verification
// and the audit chain.
//
// core never imports a platform SDK or anything under adapters/. Adapters
// depend on core, never the other way round; the core reaches a platform only
// through the Channel interface it owns.
package core
