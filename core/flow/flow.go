package flow

import (
	"fmt"
	"strconv"
	"time"
)

// Type is an input's declared type.
type Type string

// The input types. Numbers are float64, ints int64; list and map hold
// JSON-shaped values.
const (
	TypeString Type = "string"
	TypeInt    Type = "int"
	TypeNumber Type = "number"
	TypeBool   Type = "bool"
	TypeList   Type = "list"
	TypeMap    Type = "map"
)

var inputTypes = []Type{TypeString, TypeInt, TypeNumber, TypeBool, TypeList, TypeMap}

// Merge says when a node with several incoming edges runs.
type Merge string

const (
	// MergeAll (the default) waits for every incoming edge to be decided
	// and runs only if every one fired; otherwise the node is skipped.
	MergeAll Merge = "all"
	// MergeAny runs once, as soon as the first incoming edge fires; it is
	// skipped when every incoming edge was skipped.
	MergeAny Merge = "any"
)

// Flow is one loaded, validated flow file. It is immutable after Load:
// the runtime pins it (by Hash) when a run starts.
type Flow struct {
	Name        string
	Version     string
	Description string
	// File is the path the flow was read from (for messages).
	File string
	// Hash is the SHA-256 of the file's bytes, hex: a run records it so an
	// edited file never changes a running run.
	Hash   string
	Inputs []Input
	Nodes  []*Node
	Edges  []*Edge
	// FailFast (policy.fail_fast, default true): the first unhandled
	// failure cancels every node that has not finished.
	FailFast bool

	index map[string]int // node id → position in Nodes
	in    [][]int        // node position → incoming edge positions
	out   [][]int        // node position → outgoing edge positions
	loops map[int]*loopShape
	env   *exprEnv
}

// Input is one declared run input.
type Input struct {
	Name        string
	Type        Type
	Description string
	// Default is used when the run does not give the input; without one
	// (HasDefault false) the input is required.
	Default    any
	HasDefault bool
	Line       int
}

// Node is one step of the flow.
type Node struct {
	ID   string
	Type string
	// Config is the node's configuration as written (JSON-shaped), checked
	// against the catalog at load.
	Config map[string]any
	Policy Policy
	Line   int

	// Exprs are the node's compiled expressions by config field path
	// ("condition", "cases[0].when", "command" for a ${{ }} template…).
	Exprs map[string]*Expr
	// Templates are string fields with ${{ }} placeholders, by field path.
	Templates map[string]*Template
}

// Policy is a node's execution policy.
type Policy struct {
	// Timeout bounds one attempt (0: none).
	Timeout time.Duration
	Retry   Retry
	// ContinueOnError turns an exhausted failure into the output
	// {failed: true, error: {code, message}, output?} and lets the edges
	// continue, instead of failing the run.
	ContinueOnError bool
	Merge           Merge
}

// Retry is how often a failed or timed-out attempt is tried again.
type Retry struct {
	// MaxAttempts counts the first attempt too (0 and 1: no retry).
	MaxAttempts int
	// Backoff is the wait before the second attempt; each later wait
	// doubles, up to MaxBackoff.
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// Delay is the wait after failed attempt n (1-based) before attempt n+1:
// Backoff·2^(n-1), capped at MaxBackoff. No jitter: the machine is
// deterministic, and one run's retries do not stampede anything.
func (r Retry) Delay(n int) time.Duration {
	d := r.Backoff
	for i := 1; i < n; i++ {
		if r.MaxBackoff > 0 && d >= r.MaxBackoff {
			break
		}
		if d > time.Duration(1<<62)/2 {
			break
		}
		d *= 2
	}
	if r.MaxBackoff > 0 && d > r.MaxBackoff {
		d = r.MaxBackoff
	}
	return d
}

// Edge connects two nodes; When (CEL, optional) decides whether it fires.
type Edge struct {
	From, To string
	When     *Expr
	Line     int
}

// Node returns the node with id, or nil.
func (f *Flow) Node(id string) *Node {
	i, ok := f.index[id]
	if !ok {
		return nil
	}
	return f.Nodes[i]
}

// Error is one load error; its text is "file:line: field: message".
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", loc, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Field, e.Msg)
}

// Errors is every problem Load found, in file order.
type Errors []*Error

func (es Errors) Error() string {
	s := ""
	for i, e := range es {
		if i > 0 {
			s += "\n"
		}
		s += e.Error()
	}
	return s
}
