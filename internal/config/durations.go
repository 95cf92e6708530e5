package config

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

var durationType = reflect.TypeOf(time.Duration(0))

// A position of a scalar in the file (1-based, as yaml.Node reports).
type position struct{ line, column int }

// prepareDurations lets the adapters' sections keep plain time.Duration
// fields (their Go API) while the file keeps the rules of config.Duration:
// a duration that does not parse is refused with the same message naming
// its line, and a bare 0 (which YAML reads as an integer, and yaml.v3
// will not put into a time.Duration) still means zero. It returns raw
// with such zeros quoted; lines do not move, so later errors still name
// the right line. A file that does not parse is returned as is: the real
// decode reports it.
func prepareDurations(raw []byte, t reflect.Type) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil || len(root.Content) == 0 {
		return raw, nil
	}
	var quote []position
	if err := walkDurations(root.Content[0], t, &quote); err != nil {
		return nil, err
	}
	if len(quote) == 0 {
		return raw, nil
	}
	lines := bytes.SplitAfter(raw, []byte("\n"))
	// Right to left within a line, so earlier columns stay valid.
	slices.SortFunc(quote, func(a, b position) int {
		if a.line != b.line {
			return a.line - b.line
		}
		return b.column - a.column
	})
	for _, p := range quote {
		l := lines[p.line-1]
		i := p.column - 1
		j := i
		for j < len(l) && !strings.ContainsRune(" \t\r\n,}]#", rune(l[j])) {
			j++
		}
		lines[p.line-1] = slices.Concat(l[:i], []byte(`"`), l[i:j], []byte(`"`), l[j:])
	}
	return bytes.Join(lines, nil), nil
}

// walkDurations follows n along t (struct fields by their yaml tag,
// slices, maps) and checks every scalar that lands in a time.Duration.
func walkDurations(n *yaml.Node, t reflect.Type, quote *[]position) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
			return nil
		}
		if _, err := time.ParseDuration(n.Value); err != nil {
			return fmt.Errorf("line %d: %q is not a duration like 30s or 5m", n.Line, n.Value)
		}
		if n.Tag != "!!str" && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
			*quote = append(*quote, position{n.Line, n.Column})
		}
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if f, ok := fieldByTag(t, n.Content[i].Value); ok {
				if err := walkDurations(n.Content[i+1], f.Type, quote); err != nil {
					return err
				}
			}
		}
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && n.Kind == yaml.SequenceNode:
		for _, c := range n.Content {
			if err := walkDurations(c, t.Elem(), quote); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			if err := walkDurations(n.Content[i], t.Elem(), quote); err != nil {
				return err
			}
		}
	}
	return nil
}

// fieldByTag finds the field a YAML key decodes into.
func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
