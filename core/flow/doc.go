// Package flow is the runbook layer's pure foundation: the flow file format
// and its loader (every error names the file, line and field), the CEL
// expressions of edge `when` and control nodes, and the state machine that
// turns a pinned flow plus events (attempt started, node finished or failed,
// timer fired, cancel) into the next transitions.
//
// The package must stay pure: it never reads the clock (time arrives inside
// events), never starts goroutines, never touches the database, a channel or
// the sandbox, and never runs a node's work. The durable runtime stores each
// transition (a JSON-serialisable, versioned Run plus its Commands) before
// acting on it and runs the commands as River jobs; every side effect of a
// flow still goes through the core's proposal, approval, sandbox and
// verification. docs/flows.md documents the format and the semantics.
package flow
