package flow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Template is a string with ${{ CEL }} placeholders (GitHub Actions'
// spelling, so nobody mistakes it for shell ${VAR}). Rendering inserts
// each value verbatim — strings as they are, anything else as JSON; the
// approval card shows the rendered result, which is what gets approved.
type Template struct {
	Src   string
	lits  []string // len(exprs)+1 literal parts around the placeholders
	exprs []*Expr
}

func parseTemplate(s string, compile func(string) (*Expr, error)) (*Template, error) {
	t := &Template{Src: s}
	rest := s
	for {
		i := strings.Index(rest, "${{")
		if i < 0 {
			t.lits = append(t.lits, rest)
			return t, nil
		}
		j := strings.Index(rest[i+3:], "}}")
		if j < 0 {
			return nil, errors.New("a ${{ placeholder is not closed with }}")
		}
		x, err := compile(strings.TrimSpace(rest[i+3 : i+3+j]))
		if err != nil {
			return nil, err
		}
		t.lits = append(t.lits, rest[:i])
		t.exprs = append(t.exprs, x)
		rest = rest[i+3+j+2:]
	}
}

// Render evaluates the placeholders in scope.
func (t *Template) Render(s Scope) (string, error) {
	var b strings.Builder
	for i, lit := range t.lits {
		b.WriteString(lit)
		if i == len(t.exprs) {
			break
		}
		v, err := t.exprs[i].Eval(s)
		if err != nil {
			return "", err
		}
		switch x := v.(type) {
		case string:
			b.WriteString(x)
		default:
			j, err := json.Marshal(x)
			if err != nil {
				return "", fmt.Errorf("flow: template %q: %w", t.Src, err)
			}
			b.Write(j)
		}
	}
	return b.String(), nil
}
