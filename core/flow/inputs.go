package flow

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Coerce checks that v (JSON-shaped) has type t, converting only where no
// information is lost (an integral number to int, an int to number).
func Coerce(t Type, v any) (any, error) {
	switch t {
	case TypeString:
		if s, ok := v.(string); ok {
			return s, nil
		}
	case TypeInt:
		switch x := v.(type) {
		case int64:
			return x, nil
		case int:
			return int64(x), nil
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
				return int64(x), nil
			}
		}
	case TypeNumber:
		switch x := v.(type) {
		case float64:
			return x, nil
		case int64:
			return float64(x), nil
		case int:
			return float64(x), nil
		}
	case TypeBool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case TypeList:
		if l, ok := v.([]any); ok {
			return l, nil
		}
	case TypeMap:
		if m, ok := v.(map[string]any); ok {
			return m, nil
		}
	}
	return nil, fmt.Errorf("%s is not a %s", describe(v), t)
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64, int, float64:
		return fmt.Sprintf("the number %v", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

// ParseArg reads one command-line value (`key=value`) as type t: strings
// as written, other types as JSON (so 3, true, [1,2], {"a":1}).
func ParseArg(t Type, s string) (any, error) {
	if t == TypeString {
		return s, nil
	}
	var v any
	d := json.NewDecoder(strings.NewReader(s))
	if err := d.Decode(&v); err != nil || d.More() {
		return nil, fmt.Errorf("%q is not a %s", s, t)
	}
	return Coerce(t, normalize(v))
}

// BindInputs checks a run's given inputs against the flow's declaration
// and fills defaults: unknown names, wrong types and missing required
// inputs are errors naming the input.
func (f *Flow) BindInputs(given map[string]any) (map[string]any, error) {
	out := map[string]any{}
	decl := map[string]Input{}
	for _, in := range f.Inputs {
		decl[in.Name] = in
	}
	for _, k := range slices.Sorted(maps.Keys(given)) {
		in, ok := decl[k]
		if !ok {
			return nil, fmt.Errorf("flow %s: no input %q", f.Name, k)
		}
		v, err := Coerce(in.Type, normalize(given[k]))
		if err != nil {
			return nil, fmt.Errorf("flow %s: input %s: %w", f.Name, k, err)
		}
		out[k] = v
	}
	for _, in := range f.Inputs {
		if _, ok := out[in.Name]; ok {
			continue
		}
		if !in.HasDefault {
			return nil, fmt.Errorf("flow %s: input %s is required (%s)", f.Name, in.Name, in.Type)
		}
		out[in.Name] = in.Default
	}
	return out, nil
}

// ParseArgs turns `key=value` words into typed inputs.
func (f *Flow) ParseArgs(args []string) (map[string]any, error) {
	given := map[string]any{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("flow %s: %q is not key=value", f.Name, a)
		}
		var in *Input
		for i := range f.Inputs {
			if f.Inputs[i].Name == k {
				in = &f.Inputs[i]
			}
		}
		if in == nil {
			return nil, fmt.Errorf("flow %s: no input %q", f.Name, k)
		}
		x, err := ParseArg(in.Type, v)
		if err != nil {
			return nil, fmt.Errorf("flow %s: input %s: %w", f.Name, k, err)
		}
		given[k] = x
	}
	return f.BindInputs(given)
}
