package flow

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
	"google.golang.org/protobuf/types/known/structpb"
)

// DefaultCostLimit bounds one expression's evaluation (CEL's cost units,
// roughly one per operation and per element visited): enough for any
// routing decision, far too little for a runaway comprehension.
const DefaultCostLimit = 100_000

// Expr is one compiled CEL expression: an edge's `when`, a control node's
// condition, or a `${{ … }}` placeholder in a string field.
type Expr struct {
	// Src is the expression as written.
	Src string
	// Nodes are the node ids the expression reads (nodes.<id>), for the
	// loader's "only upstream nodes" check.
	Nodes []string
	prg   cel.Program
}

// exprEnv is the CEL environment of one flow: inputs.<name> typed from the
// flow's declared inputs, nodes.<id> dynamic (a node's output is JSON).
type exprEnv struct {
	base     *cel.Env
	withItem *cel.Env // adds item and index (data.filter, data.map)
	cost     uint64
}

func celType(t Type) *cel.Type {
	switch t {
	case TypeString:
		return cel.StringType
	case TypeInt:
		return cel.IntType
	case TypeNumber:
		return cel.DoubleType
	case TypeBool:
		return cel.BoolType
	case TypeList:
		return cel.ListType(cel.DynType)
	case TypeMap:
		return cel.MapType(cel.StringType, cel.DynType)
	}
	return cel.DynType
}

func newExprEnv(inputs []Input, nodeIDs []string, cost uint64) (*exprEnv, error) {
	opts := []cel.EnvOption{cel.OptionalTypes(), ext.Strings(), cel.CrossTypeNumericComparisons(true)}
	for _, in := range inputs {
		opts = append(opts, cel.Variable("inputs."+in.Name, celType(in.Type)))
	}
	for _, id := range nodeIDs {
		opts = append(opts, cel.Variable("nodes."+id, cel.DynType))
	}
	base, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, fmt.Errorf("flow: expression environment: %w", err)
	}
	withItem, err := base.Extend(cel.Variable("item", cel.DynType), cel.Variable("index", cel.IntType))
	if err != nil {
		return nil, fmt.Errorf("flow: expression environment: %w", err)
	}
	if cost == 0 {
		cost = DefaultCostLimit
	}
	return &exprEnv{base: base, withItem: withItem, cost: cost}, nil
}

// compile parses and type-checks src. want is the result type the place
// requires (bool for a condition), nil for any.
func (e *exprEnv) compile(src string, want *cel.Type, item bool) (*Expr, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("empty expression")
	}
	env := e.base
	if item {
		env = e.withItem
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("bad expression %q: %s", src, oneLine(iss.Err().Error()))
	}
	if want != nil {
		got := ast.OutputType()
		if !got.IsExactType(want) && !got.IsExactType(cel.DynType) {
			return nil, fmt.Errorf("expression %q is %s, want %s", src, got, want)
		}
	}
	prg, err := env.Program(ast, cel.CostLimit(e.cost))
	if err != nil {
		return nil, fmt.Errorf("bad expression %q: %w", src, err)
	}
	x := &Expr{Src: src, prg: prg}
	seen := map[string]bool{}
	for _, r := range ast.NativeRep().ReferenceMap() {
		if id, ok := strings.CutPrefix(r.Name, "nodes."); ok && !seen[id] {
			seen[id] = true
			x.Nodes = append(x.Nodes, id)
		}
	}
	return x, nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// Scope is what an expression can read: the run's inputs and the outputs
// of finished nodes. Values are JSON-shaped (maps, lists, strings, numbers
// as int64 when integral, bools, nil).
type Scope struct {
	Inputs map[string]any
	Nodes  map[string]any
	Item   any
	Index  int
}

func (s Scope) activation() map[string]any {
	vars := make(map[string]any, len(s.Inputs)+len(s.Nodes)+2)
	for k, v := range s.Inputs {
		vars["inputs."+k] = v
	}
	for k, v := range s.Nodes {
		vars["nodes."+k] = v
	}
	vars["item"] = s.Item
	vars["index"] = int64(s.Index)
	return vars
}

// Eval evaluates x in scope. Every failure — a missing node output, a type
// mismatch at run time, the cost limit, even a panic inside the evaluator —
// comes back as an error value.
func (x *Expr) Eval(s Scope) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("flow: expression %q: evaluation panicked: %v", x.Src, r)
		}
	}()
	out, _, err := x.prg.Eval(s.activation())
	if err != nil {
		return nil, fmt.Errorf("flow: expression %q: %s", x.Src, oneLine(err.Error()))
	}
	return native(out)
}

// EvalBool evaluates a condition; a non-bool result is an error.
func (x *Expr) EvalBool(s Scope) (bool, error) {
	v, err := x.Eval(s)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("flow: expression %q: got %T, want bool", x.Src, v)
	}
	return b, nil
}

// native turns a CEL value into plain JSON-shaped Go values through JSON,
// which is the form outputs are stored in anyway.
func native(v ref.Val) (any, error) {
	j, err := v.ConvertToNative(jsonValueType)
	if err != nil {
		return nil, fmt.Errorf("flow: expression result %v is not JSON: %w", v.Type(), err)
	}
	pb, ok := j.(*structpb.Value)
	if !ok {
		return nil, fmt.Errorf("flow: expression result %v is not JSON", v.Type())
	}
	return normalize(pb.AsInterface()), nil
}

var jsonValueType = reflect.TypeOf(&structpb.Value{})

// normalize makes integral float64s int64, so a count read back from JSON
// compares and prints as the integer it was.
func normalize(v any) any {
	switch t := v.(type) {
	case int:
		return int64(t)
	case float64:
		if t == math.Trunc(t) && math.Abs(t) < 1<<53 {
			return int64(t)
		}
		return t
	case map[string]any:
		for k, e := range t {
			t[k] = normalize(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = normalize(e)
		}
		return t
	}
	return v
}

// decodeJSON reads stored JSON into the values expressions see.
func decodeJSON(b []byte) (any, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("flow: stored value: %w", err)
	}
	return normalize(v), nil
}
