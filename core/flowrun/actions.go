package flowrun

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/verify"
)

// ActionKind is how the runtime runs one type of action node: Propose
// turns the node's config (rendered in the run's scope) into the action
// its attempt proposes — an ordinary proposal through the core, judged by
// policy, approved by a tap or the policy, run in the sandbox and
// verified outside it — and Output shapes the executor's record
// ({exit_code, stdout, stderr, verified}) into the node's output. The
// runtime has action.shell and action.http; another room adds its own
// (action.mcp, core/mcptools) through Config.ActionKinds, together with the
// type's entry in core/flow's catalog.
type ActionKind struct {
	Propose func(n *flow.Node, sc flow.Scope) (core.ProposedAction, error)
	// Output, when set, rewrites the output of a settled attempt (nil:
	// the record as it is).
	Output func(out map[string]any) map[string]any
}

// actionKinds are the runtime's own action kinds, then cfg's.
func actionKinds(cfg Config) map[string]ActionKind {
	kinds := map[string]ActionKind{
		"action.shell": {Propose: shellAction},
		"action.http": {Propose: func(n *flow.Node, sc flow.Scope) (core.ProposedAction, error) {
			return httpAction(n, sc, cfg.HTTPAllowDomains)
		}, Output: httpOutput},
	}
	for t, k := range cfg.ActionKinds {
		kinds[t] = k
	}
	return kinds
}

// httpStatusSep ends the body in an action.http's stdout: curl writes
// the status code after it (--write-out), so the body and the status are
// one record the verification reads.
const httpStatusSep = "\n"

// httpAction is what an action.http node proposes: curl in the sandbox
// with the network on — only to a host of flows.http_allow_domains, with
// no redirects followed (a redirect could leave the allowlist) — verified
// by its exit code and the status (expect_status, else any 2xx). The card
// shows the whole request (method, URL, headers, body): what is approved
// is what is sent.
func httpAction(n *flow.Node, sc flow.Scope, allow []string) (core.ProposedAction, error) {
	raw, err := n.Templates["url"].Render(sc)
	if err != nil {
		return core.ProposedAction{}, err
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return core.ProposedAction{}, fmt.Errorf("url %q is not an http(s) URL", raw)
	}
	if u.User != nil {
		return core.ProposedAction{}, fmt.Errorf("url %q carries credentials; a flow file is not the place for them", u.Redacted())
	}
	if len(allow) == 0 {
		return core.ProposedAction{}, errors.New("no host may be called: flows.http_allow_domains is empty")
	}
	if !hostAllowed(u.Hostname(), allow) {
		return core.ProposedAction{}, fmt.Errorf("host %q is not in flows.http_allow_domains (%s)", u.Hostname(), strings.Join(allow, ", "))
	}
	method, _ := n.Config["method"].(string)
	if method == "" {
		method = "GET"
	}
	argv := []string{"curl", "--silent", "--show-error", "--max-time", "30", "--proto", "=http,https", "--max-redirs", "0",
		"--write-out", httpStatusSep + "%{http_code}"}
	if method == "HEAD" {
		argv = append(argv, "--head")
	} else {
		argv = append(argv, "--request", method)
	}
	headers, _ := n.Config["headers"].(map[string]any)
	names := make([]string, 0, len(headers))
	for h := range headers {
		names = append(names, h)
	}
	slices.Sort(names)
	for _, h := range names {
		v := fmt.Sprint(headers[h])
		if strings.ContainsAny(h, "\r\n:") || strings.ContainsAny(v, "\r\n") || h == "" {
			return core.ProposedAction{}, fmt.Errorf("header %q is not a single header line", h)
		}
		argv = append(argv, "--header", h+": "+v)
	}
	if t := n.Templates["body"]; t != nil {
		body, err := t.Render(sc)
		if err != nil {
			return core.ProposedAction{}, err
		}
		argv = append(argv, "--data-raw", body)
	}
	argv = append(argv, "--", u.String())
	status := `[23][0-9][0-9]`
	if s, ok := n.Config["expect_status"].(int64); ok {
		status = strconv.FormatInt(s, 10)
	}
	re := `(?:^|\n)` + status + `\s*$`
	checks := []verify.Check{verify.ExitCodeZero(), {Name: "http status", Expect: verify.Expect{Regex: &re}}}
	a := core.Action{Tool: "shell", Argv: argv, Network: true, Verify: checks}
	return core.ProposedAction{Action: a, Intent: render.Clip("Flow step "+n.ID+": HTTP "+method+" "+u.String(), 180),
		Rationale: "A step of a flow you started: one HTTP request from the sandbox, network on, to an allowed host. It counts as done only if the status is " +
			map[bool]string{true: "the expected one", false: "2xx or 3xx"}[status != `[23][0-9][0-9]`] + "."}, nil
}

// httpOutput splits curl's record into the node's {status, body}.
func httpOutput(out map[string]any) map[string]any {
	s, _ := out["stdout"].(string)
	body, code := "", strings.TrimSpace(s)
	if i := strings.LastIndex(s, httpStatusSep); i >= 0 {
		body, code = s[:i], strings.TrimSpace(s[i+len(httpStatusSep):])
	}
	status, err := strconv.Atoi(code)
	if err != nil {
		status = 0
	}
	out["status"], out["body"] = status, body
	delete(out, "stdout")
	return out
}

// hostAllowed: host is one of allow or a subdomain of one.
func hostAllowed(host string, allow []string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, d := range allow {
		d = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(d), "."))
		if d != "" && (host == d || strings.HasSuffix(host, "."+d)) {
			return true
		}
	}
	return false
}
