package flow

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"go.yaml.in/yaml/v3"
)

// Options change what Load accepts.
type Options struct {
	// Model says a model is configured (agent.kind: llm); without one an
	// agent.run node is a load error, not a run-time surprise.
	Model bool
	// CostLimit bounds each expression's evaluation (0: DefaultCostLimit).
	CostLimit uint64
}

// MaxFileBytes bounds a flow file: a runbook is a page, not a data set.
const MaxFileBytes = 1 << 20

// Load reads and validates one flow file.
func Load(file string, opts Options) (*Flow, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("flow: %w", err)
	}
	return Parse(file, b, opts)
}

var (
	// Compiled on first use, not in every process that links the package
	// (a counted repetition compiles to a long program kept for the
	// process's life: internal/lazyre, which this pure package may not
	// import, says more).
	nameRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`) })
	// Ids are CEL identifiers so expressions can say nodes.<id>.
	identRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`) })
	// CEL's reserved words cannot follow a dot in an expression.
	reserved = map[string]bool{"as": true, "break": true, "const": true, "continue": true, "else": true,
		"for": true, "function": true, "if": true, "import": true, "in": true, "let": true, "loop": true,
		"package": true, "namespace": true, "return": true, "var": true, "void": true, "while": true,
		"true": true, "false": true, "null": true}
)

// loader collects every error instead of stopping at the first, so one
// `silas flow validate` shows the whole list.
type loader struct {
	file string
	opts Options
	errs Errors
	f    *Flow
	// raw config nodes, checked once the expression environment exists
	cfgs   []*yaml.Node
	whens  []*yaml.Node
	policy []*yaml.Node
	// up is upstream(), computed when the first expression is checked:
	// a flow without expressions (a long chain of waits) never pays for
	// its quadratic size.
	up []map[string]bool
}

// upOf is what is upstream of node v (see upstream).
func (l *loader) upOf(v int) map[string]bool {
	if l.up == nil {
		l.up = l.upstream()
	}
	return l.up[v]
}

func (l *loader) errf(n *yaml.Node, field, format string, a ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	l.errs = append(l.errs, &Error{File: l.file, Line: line, Field: field, Msg: fmt.Sprintf(format, a...)})
}

func (l *loader) errAt(line int, field, format string, a ...any) {
	l.errs = append(l.errs, &Error{File: l.file, Line: line, Field: field, Msg: fmt.Sprintf(format, a...)})
}

// Parse validates a flow file's bytes; file names it in errors.
func Parse(file string, data []byte, opts Options) (*Flow, error) {
	l := &loader{file: file, opts: opts}
	if len(data) > MaxFileBytes {
		l.errf(nil, "", "file is %d bytes, more than %d", len(data), MaxFileBytes)
		return nil, l.errs
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		l.errf(nil, "", "not YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil, l.errs
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		l.errf(&doc, "", "a flow file is a YAML mapping (name, version, inputs, nodes, edges)")
		return nil, l.errs
	}
	sum := sha256.Sum256(data)
	l.f = &Flow{File: file, Hash: hex.EncodeToString(sum[:]), FailFast: true, index: map[string]int{}}
	l.top(doc.Content[0])
	if len(l.errs) > 0 && l.f.Nodes == nil {
		return nil, l.errs
	}
	l.link()
	if len(l.errs) > 0 {
		return nil, l.errs
	}
	return l.f, nil
}

type kv struct {
	key  string
	k, v *yaml.Node
}

// items lists a mapping's keys, reporting duplicates (yaml.v3 keeps them).
func (l *loader) items(n *yaml.Node, field string) []kv {
	if n.Kind != yaml.MappingNode {
		l.errf(n, field, "must be a mapping")
		return nil
	}
	var out []kv
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if seen[k.Value] {
			l.errf(k, join(field, k.Value), "duplicate key")
			continue
		}
		seen[k.Value] = true
		out = append(out, kv{k.Value, k, n.Content[i+1]})
	}
	return out
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

func (l *loader) str(n *yaml.Node, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		l.errf(n, field, "must be a string")
		return "", false
	}
	return n.Value, true
}

func (l *loader) top(root *yaml.Node) {
	f := l.f
	var nodes, edges *yaml.Node
	have := map[string]bool{}
	for _, it := range l.items(root, "") {
		have[it.key] = true
		switch it.key {
		case "name":
			if s, ok := l.str(it.v, "name"); ok {
				if !nameRe().MatchString(s) {
					l.errf(it.v, "name", "%q: use lower-case letters, digits, '.', '_' and '-' (at most 64)", s)
				}
				f.Name = s
			}
		case "version":
			if s, ok := l.str(it.v, "version"); ok {
				f.Version = s
			}
		case "description":
			if s, ok := l.str(it.v, "description"); ok {
				f.Description = s
			}
		case "inputs":
			l.inputs(it.v)
		case "policy":
			for _, p := range l.items(it.v, "policy") {
				switch p.key {
				case "fail_fast":
					if b, ok := l.boolean(p.v, "policy.fail_fast"); ok {
						f.FailFast = b
					}
				default:
					l.errf(p.k, "policy."+p.key, "unknown key (flow policy has fail_fast)")
				}
			}
		case "nodes":
			nodes = it.v
		case "edges":
			edges = it.v
		default:
			l.errf(it.k, it.key, "unknown key (a flow has name, version, description, inputs, policy, nodes, edges)")
		}
	}
	if !have["name"] {
		l.errf(root, "name", "missing")
	}
	if !have["version"] {
		l.errf(root, "version", "missing")
	}
	if nodes == nil || nodes.Kind != yaml.SequenceNode || len(nodes.Content) == 0 {
		l.errf(root, "nodes", "missing or empty: a flow needs at least one node")
		return
	}
	l.nodes(nodes)
	if edges != nil {
		l.edges(edges)
	}
}

func (l *loader) boolean(n *yaml.Node, field string) (bool, bool) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		l.errf(n, field, "must be true or false")
		return false, false
	}
	return b, true
}

func (l *loader) inputs(n *yaml.Node) {
	for _, it := range l.items(n, "inputs") {
		field := "inputs." + it.key
		if !identRe().MatchString(it.key) || reserved[it.key] {
			l.errf(it.k, field, "an input name is a letter or '_' then letters, digits or '_' (not a CEL reserved word)")
			continue
		}
		in := Input{Name: it.key, Line: it.k.Line}
		var def *yaml.Node
		for _, p := range l.items(it.v, field) {
			switch p.key {
			case "type":
				if s, ok := l.str(p.v, field+".type"); ok {
					in.Type = Type(s)
					if !validType(in.Type) {
						l.errf(p.v, field+".type", "%q is not a type (string, int, number, bool, list, map)", s)
					}
				}
			case "description":
				if s, ok := l.str(p.v, field+".description"); ok {
					in.Description = s
				}
			case "default":
				def = p.v
			default:
				l.errf(p.k, field+"."+p.key, "unknown key (an input has type, default, description)")
			}
		}
		if in.Type == "" {
			l.errf(it.v, field+".type", "missing")
			continue
		}
		if def != nil && validType(in.Type) {
			var v any
			if err := def.Decode(&v); err != nil {
				l.errf(def, field+".default", "%v", err)
			} else if c, err := Coerce(in.Type, normalize(v)); err != nil {
				l.errf(def, field+".default", "%v", err)
			} else {
				in.Default, in.HasDefault = c, true
			}
		}
		l.f.Inputs = append(l.f.Inputs, in)
	}
}

func validType(t Type) bool {
	for _, x := range inputTypes {
		if t == x {
			return true
		}
	}
	return false
}

func (l *loader) nodes(seq *yaml.Node) {
	f := l.f
	for i, nn := range seq.Content {
		field := fmt.Sprintf("nodes[%d]", i)
		node := &Node{Line: nn.Line, Policy: Policy{Merge: MergeAll}}
		var cfg, pol *yaml.Node
		typeAt := nn
		for _, it := range l.items(nn, field) {
			switch it.key {
			case "id":
				if s, ok := l.str(it.v, field+".id"); ok {
					node.ID = s
				}
			case "type":
				if s, ok := l.str(it.v, field+".type"); ok {
					node.Type, typeAt = s, it.v
				}
			case "config":
				cfg = it.v
			case "policy":
				pol = it.v
			case "description", "name":
				// shown by `flow show`; free text
			default:
				l.errf(it.k, field+"."+it.key, "unknown key (a node has id, type, config, policy, description)")
			}
		}
		switch {
		case node.ID == "":
			l.errf(nn, field+".id", "missing")
			continue
		case !identRe().MatchString(node.ID) || reserved[node.ID]:
			l.errf(nn, field+".id", "%q: an id is a letter or '_' then letters, digits or '_' (expressions say nodes.<id>), not a CEL reserved word", node.ID)
			continue
		}
		if _, dup := f.index[node.ID]; dup {
			l.errf(nn, field+".id", "duplicate node id %q", node.ID)
			continue
		}
		field = "nodes." + node.ID
		spec, known := catalog[node.Type]
		switch {
		case node.Type == "":
			l.errf(nn, field+".type", "missing")
		case !known:
			l.errf(typeAt, field+".type", "unknown node type %q (docs/flows.md lists the catalog)", node.Type)
		case spec.needsModel && !l.opts.Model:
			l.errf(typeAt, field+".type", "%s needs a model, and none is configured (set agent.kind: llm and llm.*; docs/agent.md)", node.Type)
		}
		f.index[node.ID] = len(f.Nodes)
		f.Nodes = append(f.Nodes, node)
		l.cfgs = append(l.cfgs, cfg)
		l.policy = append(l.policy, pol)
	}
}

func (l *loader) edges(seq *yaml.Node) {
	if seq.Kind != yaml.SequenceNode {
		l.errf(seq, "edges", "must be a list of {from, to, when}")
		return
	}
	for i, en := range seq.Content {
		field := fmt.Sprintf("edges[%d]", i)
		e := &Edge{Line: en.Line}
		var when *yaml.Node
		for _, it := range l.items(en, field) {
			switch it.key {
			case "from", "to":
				s, ok := l.str(it.v, field+"."+it.key)
				if !ok {
					continue
				}
				if _, exists := l.f.index[s]; !exists {
					l.errf(it.v, field+"."+it.key, "no node %q (dangling edge)", s)
				}
				if it.key == "from" {
					e.From = s
				} else {
					e.To = s
				}
			case "when":
				when = it.v
			default:
				l.errf(it.k, field+"."+it.key, "unknown key (an edge has from, to, when)")
			}
		}
		if e.From == "" || e.To == "" {
			if !hasKeys(en, "from", "to") {
				l.errf(en, field, "an edge needs from and to")
			}
			continue
		}
		if _, ok := l.f.index[e.From]; !ok {
			continue
		}
		if _, ok := l.f.index[e.To]; !ok {
			continue
		}
		if e.From == e.To {
			l.errf(en, field, "edge from %q to itself (use control.loop)", e.From)
			continue
		}
		for _, o := range l.f.Edges {
			if o.From == e.From && o.To == e.To {
				l.errf(en, field, "a second edge from %q to %q", e.From, e.To)
			}
		}
		l.f.Edges = append(l.f.Edges, e)
		l.whens = append(l.whens, when)
	}
}

func hasKeys(n *yaml.Node, keys ...string) bool {
	if n.Kind != yaml.MappingNode {
		return false
	}
	found := 0
	for i := 0; i < len(n.Content); i += 2 {
		for _, k := range keys {
			if n.Content[i].Value == k {
				found++
			}
		}
	}
	return found == len(keys)
}

// link builds the graph, checks its shape, then compiles every expression
// against the flow's environment and checks what each one reads.
func (l *loader) link() {
	f := l.f
	f.in = make([][]int, len(f.Nodes))
	f.out = make([][]int, len(f.Nodes))
	for i, e := range f.Edges {
		f.out[f.index[e.From]] = append(f.out[f.index[e.From]], i)
		f.in[f.index[e.To]] = append(f.in[f.index[e.To]], i)
	}
	ids := make([]string, len(f.Nodes))
	for i, n := range f.Nodes {
		ids[i] = n.ID
	}
	env, err := newExprEnv(f.Inputs, ids, l.opts.CostLimit)
	if err != nil {
		l.errf(nil, "inputs", "%v", err)
		return
	}
	f.env = env
	for i, n := range f.Nodes {
		l.policyOf(n, l.policy[i])
	}
	l.shape()
	if len(l.errs) > 0 {
		return
	}
	for i, e := range f.Edges {
		field := fmt.Sprintf("edges[%d].when", i)
		w := l.whens[i]
		if w == nil {
			continue
		}
		src, ok := l.str(w, field)
		if !ok {
			continue
		}
		x, err := env.compile(src, cel.BoolType, false)
		if err != nil {
			l.errf(w, field, "%v", err)
			continue
		}
		scope := l.upOf(f.index[e.From])
		if from := f.index[e.From]; f.loops[from] != nil && slices.Contains(f.loops[from].exit, i) {
			scope = f.loopScope(e.From, scope)
		}
		l.reads(w, field, x, scope, e.From, true)
		e.When = x
	}
	for i, n := range f.Nodes {
		spec, ok := catalog[n.Type]
		if !ok {
			continue
		}
		c := &cfgCheck{l: l, node: n, field: "nodes." + n.ID + ".config", v: i}
		c.run(spec, l.cfgs[i])
	}
}

// reads checks that x reads only nodes that have finished whenever it is
// evaluated: the ones upstream of where it sits (and the edge's source).
func (l *loader) reads(n *yaml.Node, field string, x *Expr, up map[string]bool, self string, selfOK bool) {
	for _, id := range x.Nodes {
		if (id == self && selfOK) || up[id] {
			continue
		}
		if id == self {
			l.errf(n, field, "%q reads its own node's output, which does not exist yet", x.Src)
			continue
		}
		l.errf(n, field, "%q reads nodes.%s, which is not upstream of %s: it may not have run", x.Src, id, self)
	}
}

func (l *loader) policyOf(n *Node, pn *yaml.Node) {
	if pn == nil {
		if n.Type == "control.merge" {
			n.Policy.Merge = mergeMode(l.cfgs[l.f.index[n.ID]])
		}
		return
	}
	field := "nodes." + n.ID + ".policy"
	for _, it := range l.items(pn, field) {
		fk := field + "." + it.key
		switch it.key {
		case "timeout":
			n.Policy.Timeout = l.duration(it.v, fk)
		case "continue_on_error":
			n.Policy.ContinueOnError, _ = l.boolean(it.v, fk)
		case "merge":
			if s, ok := l.str(it.v, fk); ok {
				if s != string(MergeAll) && s != string(MergeAny) {
					l.errf(it.v, fk, "%q: use all or any", s)
				}
				n.Policy.Merge = Merge(s)
			}
		case "retry":
			for _, r := range l.items(it.v, fk) {
				rk := fk + "." + r.key
				switch r.key {
				case "max_attempts":
					var a int
					if r.v.Decode(&a) != nil || r.v.Tag != "!!int" || a < 1 || a > 100 {
						l.errf(r.v, rk, "must be an integer from 1 to 100")
					}
					n.Policy.Retry.MaxAttempts = a
				case "backoff":
					n.Policy.Retry.Backoff = l.duration(r.v, rk)
				case "max_backoff":
					n.Policy.Retry.MaxBackoff = l.duration(r.v, rk)
				default:
					l.errf(r.k, rk, "unknown key (retry has max_attempts, backoff, max_backoff)")
				}
			}
			if n.Policy.Retry.MaxBackoff > 0 && n.Policy.Retry.MaxBackoff < n.Policy.Retry.Backoff {
				l.errf(it.v, fk+".max_backoff", "is less than backoff")
			}
		default:
			l.errf(it.k, fk, "unknown key (a node policy has timeout, retry, continue_on_error, merge)")
		}
	}
	if catalog[n.Type].inline && (n.Policy.Timeout > 0 || n.Policy.Retry.MaxAttempts > 1) {
		l.errf(pn, field, "%s is decided by the engine at once: timeout and retry do not apply", n.Type)
	}
	if n.Type == "control.merge" {
		if m := mergeMode(l.cfgs[l.f.index[n.ID]]); m != MergeAll {
			n.Policy.Merge = m
		}
	}
}

func mergeMode(cfg *yaml.Node) Merge {
	if cfg == nil || cfg.Kind != yaml.MappingNode {
		return MergeAll
	}
	for i := 0; i+1 < len(cfg.Content); i += 2 {
		if cfg.Content[i].Value == "mode" && cfg.Content[i+1].Value == string(MergeAny) {
			return MergeAny
		}
	}
	return MergeAll
}

// maxDuration bounds timeouts, backoffs and waits: a week is long enough
// for any runbook step and keeps arithmetic far from overflow.
const maxDuration = 7 * 24 * time.Hour

func (l *loader) duration(n *yaml.Node, field string) time.Duration {
	s, ok := l.str(n, field)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > maxDuration {
		l.errf(n, field, "%q: want a positive duration up to 168h such as 30s, 5m, 1h", s)
		return 0
	}
	return d
}
