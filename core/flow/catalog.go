package flow

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"cel.dev/cel-go/cel"
	"github.com/google/jsonschema-go/jsonschema"
	"go.yaml.in/yaml/v3"
)

type kind int

const (
	kExpr     kind = iota // CEL, any type
	kCond                 // CEL, bool
	kItemExpr             // CEL with item and index
	kItemCond             // CEL bool with item and index
	kString               // plain string
	kTemplate             // string with ${{ CEL }} placeholders
	kStrings              // list of strings
	kInt                  // integer within [min, max]
	kBool
	kDuration
	kEnum    // one of enum
	kAny     // any YAML value
	kMap     // a mapping of any values
	kExprMap // a mapping of name → CEL
	kCases   // control.switch cases: [{when, route}]
	kChecks  // action.shell expect: verification checks
)

type fieldSpec struct {
	kind     kind
	required bool
	enum     []string
	min, max int
}

type nodeSpec struct {
	// inline nodes are decided by the state machine itself (pure control);
	// the others are work the runtime performs.
	inline     bool
	needsModel bool
	summary    string
	fields     map[string]fieldSpec
	check      func(c *cfgCheck, cfg map[string]*yaml.Node)
}

func req(k kind) fieldSpec          { return fieldSpec{kind: k, required: true} }
func opt(k kind) fieldSpec          { return fieldSpec{kind: k} }
func enum(vals ...string) fieldSpec { return fieldSpec{kind: kEnum, enum: vals} }
func intIn(lo, hi int) fieldSpec    { return fieldSpec{kind: kInt, min: lo, max: hi} }
func reqIntIn(lo, hi int) fieldSpec { return fieldSpec{kind: kInt, min: lo, max: hi, required: true} }

// catalog is the node catalog v1 (docs/flows.md § Node catalog).
var catalog = map[string]nodeSpec{
	"control.if":     {inline: true, summary: "route on a condition; output {condition}", fields: map[string]fieldSpec{"condition": req(kCond)}},
	"control.switch": {inline: true, summary: "pick a route by the first matching case; output {route, value}", fields: map[string]fieldSpec{"value": opt(kExpr), "cases": req(kCases), "default": opt(kString)}},
	"control.merge":  {inline: true, summary: "join branches (mode all or any); output {merged: true}", fields: map[string]fieldSpec{"mode": enum("all", "any")}},
	"control.foreach": {summary: "run a subflow for each item of a list, at most max_items; output {items, count}", fields: map[string]fieldSpec{
		"items": req(kExpr), "flow": req(kString), "as": opt(kString), "max_items": intIn(1, 10000), "max_parallel": intIn(1, 64)}},
	"control.loop": {inline: true, summary: "repeat its body while a condition holds, at most max_iterations; output {iteration, exhausted}", fields: map[string]fieldSpec{
		"while": req(kCond), "max_iterations": reqIntIn(1, 1000)}},
	"control.wait":    {summary: "wait for a duration or until an event; output {waited}", fields: map[string]fieldSpec{"duration": opt(kDuration), "until": opt(kString)}, check: exactlyOne("duration", "until")},
	"control.gate":    {summary: "ask the run's conversation (a card with choices or free text); output {response: {content, choice}}", fields: map[string]fieldSpec{"prompt": req(kTemplate), "choices": opt(kStrings), "allow_text": opt(kBool)}, check: gateCheck},
	"control.subflow": {summary: "run another flow; output {outputs}", fields: map[string]fieldSpec{"flow": req(kString), "inputs": opt(kExprMap)}},
	"control.fail":    {inline: true, summary: "fail the node with a message", fields: map[string]fieldSpec{"message": req(kTemplate)}},
	"control.noop":    {inline: true, summary: "do nothing; output {value}", fields: map[string]fieldSpec{"value": opt(kAny)}},

	"data.map":            {summary: "map each item of a list with expr; output {list}", fields: map[string]fieldSpec{"list": req(kExpr), "expr": req(kItemExpr)}},
	"data.filter":         {summary: "keep the items for which when holds; output {list}", fields: map[string]fieldSpec{"list": req(kExpr), "when": req(kItemCond)}},
	"data.pick":           {summary: "keep some keys of an object; output {object}", fields: map[string]fieldSpec{"object": req(kExpr), "keys": req(kStrings)}},
	"data.set":            {summary: "set a dotted path in an object; output {object}", fields: map[string]fieldSpec{"object": req(kExpr), "path": req(kString), "value": req(kExpr)}},
	"data.template":       {summary: "render text with ${{ }} placeholders; output {text}", fields: map[string]fieldSpec{"template": req(kTemplate)}},
	"data.json.parse":     {summary: "parse JSON text; output {value}", fields: map[string]fieldSpec{"text": req(kExpr)}},
	"data.json.stringify": {summary: "write a value as JSON; output {text}", fields: map[string]fieldSpec{"value": req(kExpr)}},
	"data.validate":       {summary: "check a value against a JSON Schema; output {valid, errors}", fields: map[string]fieldSpec{"value": req(kExpr), "schema": req(kMap)}, check: validateCheck},

	"system.log":       {summary: "write a line to the run's log; output {ok}", fields: map[string]fieldSpec{"level": enum("debug", "info", "warn", "error"), "message": req(kTemplate)}},
	"system.state.get": {summary: "read a value the flow stored; output {value}", fields: map[string]fieldSpec{"key": req(kString)}},
	"system.state.set": {summary: "store a value scoped to the flow; output {ok}", fields: map[string]fieldSpec{"key": req(kString), "value": req(kExpr)}},

	"action.shell": {summary: "propose a command exactly as /run does (policy, card, token, sandbox, verification); output {exit_code, stdout, verified}", fields: map[string]fieldSpec{
		"command": req(kTemplate), "expect": opt(kChecks)}},
	"action.http": {summary: "propose an HTTP request (network on, through policy and the domain allowlist); output {status, body}", fields: map[string]fieldSpec{
		"method": enum("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"), "url": req(kTemplate), "headers": opt(kMap), "body": opt(kTemplate), "expect_status": intIn(100, 599)}, check: httpCheck},
	"action.mcp": {summary: "call a pinned tool of an MCP server (mcp.servers) through policy, card and token; output {exit_code, result, verified}", fields: map[string]fieldSpec{
		"server": req(kString), "tool": req(kString), "arguments": opt(kExprMap)}},
	"agent.run": {needsModel: true, summary: "the LLM agent's executor on a goal as a task, every tool call gated; output {result, task}", fields: map[string]fieldSpec{
		"goal": req(kTemplate), "tools": opt(kStrings), "max_steps": intIn(1, 200)}},
}

// Types lists the catalog's node types, sorted.
func Types() []string {
	var ts []string
	for t := range catalog {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts
}

// Summary is a node type's one-line description ("" for unknown types).
func Summary(typ string) string { return catalog[typ].summary }

// Inline says the state machine decides a node of this type itself (pure
// control nodes); other types are work the runtime performs.
func Inline(typ string) bool { return catalog[typ].inline }

func exactlyOne(a, b string) func(c *cfgCheck, cfg map[string]*yaml.Node) {
	return func(c *cfgCheck, cfg map[string]*yaml.Node) {
		if (cfg[a] == nil) == (cfg[b] == nil) {
			c.l.errf(c.at, c.field, "set exactly one of %s and %s", a, b)
		}
	}
}

func gateCheck(c *cfgCheck, cfg map[string]*yaml.Node) {
	text, _ := c.node.Config["allow_text"].(bool)
	if cfg["choices"] == nil && !text {
		c.l.errf(c.at, c.field, "a gate needs choices or allow_text: true (otherwise nobody can answer it)")
	}
}

func httpCheck(c *cfgCheck, cfg map[string]*yaml.Node) {
	raw, _ := c.node.Config["url"].(string)
	if t := c.node.Templates["url"]; t != nil && len(t.exprs) > 0 {
		// The rendered URL is checked when the node runs; here only a
		// literal start can be wrong.
		if lit := t.lits[0]; lit != "" && !strings.HasPrefix(lit, "http://") && !strings.HasPrefix(lit, "https://") {
			c.l.errf(cfg["url"], c.field+".url", "must start with http:// or https:// (or a placeholder)")
		}
		return
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		c.l.errf(cfg["url"], c.field+".url", "%q is not an http(s) URL", raw)
	}
	headers, _ := c.node.Config["headers"].(map[string]any)
	for h, hv := range headers {
		if _, ok := hv.(string); !ok {
			c.l.errf(cfg["headers"], c.field+".headers."+h, "must be a string")
		}
	}
}

// checkKeys are what an action.shell expect check may say: the fields of
// core/verify.Check and its Expect, flattened.
var checkKeys = map[string]kind{"name": kString, "run": kStrings, "timeout_seconds": kInt, "exit_code": kInt,
	"equals": kString, "contains": kString, "regex": kString, "output_lt": kAny, "output_gt": kAny,
	"file_exists": kString, "not_empty": kBool}

// cfgCheck validates one node's config against its spec.
type cfgCheck struct {
	l     *loader
	node  *Node
	field string
	at    *yaml.Node
	v     int // the node's index
}

func (c *cfgCheck) run(spec nodeSpec, cfg *yaml.Node) {
	n := c.node
	n.Config = map[string]any{}
	n.Exprs = map[string]*Expr{}
	n.Templates = map[string]*Template{}
	c.at = cfg
	if cfg == nil {
		c.at = &yaml.Node{Line: n.Line}
	}
	seen := map[string]*yaml.Node{}
	if cfg != nil {
		for _, it := range c.l.items(cfg, c.field) {
			fs, ok := spec.fields[it.key]
			if !ok {
				c.l.errf(it.k, c.field+"."+it.key, "unknown key for %s (it takes %s)", n.Type, keyList(spec.fields))
				continue
			}
			seen[it.key] = it.v
			c.value(it.key, fs, it.v)
		}
	}
	for k, fs := range spec.fields {
		if fs.required && seen[k] == nil {
			c.l.errf(c.at, c.field+"."+k, "missing (%s needs it)", n.Type)
		}
	}
	if spec.check != nil {
		spec.check(c, seen)
	}
}

func keyList(fields map[string]fieldSpec) string {
	var ks []string
	for k := range fields {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	if len(ks) == 0 {
		return "nothing"
	}
	return strings.Join(ks, ", ")
}

func (c *cfgCheck) value(key string, fs fieldSpec, v *yaml.Node) {
	field := c.field + "." + key
	var raw any
	if err := v.Decode(&raw); err != nil {
		c.l.errf(v, field, "%v", err)
		return
	}
	raw = normalize(raw)
	c.node.Config[key] = raw
	switch fs.kind {
	case kExpr, kCond, kItemExpr, kItemCond:
		c.expr(key, field, v, fs.kind)
	case kString:
		if s, ok := c.l.str(v, field); ok && strings.TrimSpace(s) == "" {
			c.l.errf(v, field, "must not be empty")
		}
	case kTemplate:
		if s, ok := c.l.str(v, field); ok {
			c.template(key, field, v, s)
		}
	case kStrings:
		c.strings(field, v)
	case kInt:
		i, ok := raw.(int64)
		if !ok || v.Tag != "!!int" {
			c.l.errf(v, field, "must be an integer")
		} else if i < int64(fs.min) || i > int64(fs.max) {
			c.l.errf(v, field, "%d is outside %d…%d", i, fs.min, fs.max)
		}
	case kBool:
		c.l.boolean(v, field)
	case kDuration:
		c.l.duration(v, field)
	case kEnum:
		if s, ok := c.l.str(v, field); ok && !slices.Contains(fs.enum, s) {
			c.l.errf(v, field, "%q: use one of %s", s, strings.Join(fs.enum, ", "))
		}
	case kMap:
		if v.Kind != yaml.MappingNode {
			c.l.errf(v, field, "must be a mapping")
		}
	case kExprMap:
		for _, it := range c.l.items(v, field) {
			c.expr(key+"."+it.key, field+"."+it.key, it.v, kExpr)
		}
	case kCases:
		c.cases(key, field, v)
	case kChecks:
		c.checks(field, v)
	case kAny:
	}
}

func (c *cfgCheck) strings(field string, v *yaml.Node) {
	if v.Kind != yaml.SequenceNode {
		c.l.errf(v, field, "must be a list of strings")
		return
	}
	for i, e := range v.Content {
		c.l.str(e, fmt.Sprintf("%s[%d]", field, i))
	}
}

func (c *cfgCheck) expr(key, field string, v *yaml.Node, k kind) {
	src, ok := c.l.str(v, field)
	if !ok {
		return
	}
	var want *cel.Type
	if k == kCond || k == kItemCond {
		want = cel.BoolType
	}
	x, err := c.l.f.env.compile(src, want, k == kItemExpr || k == kItemCond)
	if err != nil {
		c.l.errf(v, field, "%v", err)
		return
	}
	c.reads(v, field, x, key)
	c.node.Exprs[key] = x
}

// reads applies the upstream rule; a loop's while may also read its body,
// which has run by the time while is evaluated (do-while).
func (c *cfgCheck) reads(v *yaml.Node, field string, x *Expr, key string) {
	up := c.l.upOf(c.v)
	if c.node.Type == "control.loop" && key == "while" {
		up = c.l.f.loopScope(c.node.ID, up)
	}
	c.l.reads(v, field, x, up, c.node.ID, false)
}

func (c *cfgCheck) template(key, field string, v *yaml.Node, s string) {
	t, err := parseTemplate(s, func(src string) (*Expr, error) {
		x, err := c.l.f.env.compile(src, nil, false)
		if err != nil {
			return nil, err
		}
		c.reads(v, field, x, key)
		return x, nil
	})
	if err != nil {
		c.l.errf(v, field, "%v", err)
		return
	}
	c.node.Templates[key] = t
}

func (c *cfgCheck) cases(key, field string, v *yaml.Node) {
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
		c.l.errf(v, field, "must be a non-empty list of {when, route}")
		return
	}
	for i, cn := range v.Content {
		cf := fmt.Sprintf("%s[%d]", field, i)
		var route bool
		for _, it := range c.l.items(cn, cf) {
			switch it.key {
			case "when":
				c.expr(fmt.Sprintf("%s[%d].when", key, i), cf+".when", it.v, kCond)
			case "route":
				if s, ok := c.l.str(it.v, cf+".route"); ok && s != "" {
					route = true
				}
			default:
				c.l.errf(it.k, cf+"."+it.key, "unknown key (a case has when and route)")
			}
		}
		if !route || c.node.Exprs[fmt.Sprintf("%s[%d].when", key, i)] == nil && !hasKeys(cn, "when") {
			c.l.errf(cn, cf, "a case needs when and route")
		}
	}
}

func (c *cfgCheck) checks(field string, v *yaml.Node) {
	if v.Kind != yaml.SequenceNode {
		c.l.errf(v, field, "must be a list of checks ({exit_code: 0}, {contains: \"ok\"}, …)")
		return
	}
	for i, cn := range v.Content {
		cf := fmt.Sprintf("%s[%d]", field, i)
		for _, it := range c.l.items(cn, cf) {
			k, ok := checkKeys[it.key]
			if !ok {
				c.l.errf(it.k, cf+"."+it.key, "unknown key (a check has name, run, timeout_seconds, exit_code, equals, contains, regex, output_lt, output_gt, file_exists, not_empty)")
				continue
			}
			switch k {
			case kString:
				c.l.str(it.v, cf+"."+it.key)
			case kStrings:
				c.strings(cf+"."+it.key, it.v)
			case kInt:
				if it.v.Tag != "!!int" {
					c.l.errf(it.v, cf+"."+it.key, "must be an integer")
				}
			case kBool:
				c.l.boolean(it.v, cf+"."+it.key)
			case kAny:
				if it.v.Tag != "!!int" && it.v.Tag != "!!float" {
					c.l.errf(it.v, cf+"."+it.key, "must be a number")
				}
			}
		}
	}
}

// CompileSchema compiles a data.validate schema (a JSON Schema, draft
// 2020-12 or draft-07, given as the YAML mapping of the node's config).
// Only the schema's own definitions resolve: a $ref to anything outside
// it is an error, never a fetch.
func CompileSchema(v any) (*jsonschema.Resolved, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return s.Resolve(nil)
}

func validateCheck(c *cfgCheck, cfg map[string]*yaml.Node) {
	if cfg["schema"] == nil || cfg["schema"].Kind != yaml.MappingNode {
		return
	}
	if _, err := CompileSchema(c.node.Config["schema"]); err != nil {
		c.l.errf(cfg["schema"], c.field+".schema", "not a JSON Schema: %v", err)
	}
}
