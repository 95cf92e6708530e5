package main

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/internal/storetest"
)

// silasCLI runs the binary with serve's environment.
func (s *server) silasCLI(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(silasBin, args...)
	cmd.Env = s.env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("silas %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func mcpText(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

type mcpCall struct {
	res *sdk.CallToolResult
	err error
}

// callAsync calls tool in the background, with a progress token when
// one is given.
func callAsync(cs *sdk.ClientSession, tool string, args map[string]any, progress ...string) chan mcpCall {
	ch := make(chan mcpCall, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		p := &sdk.CallToolParams{Name: tool, Arguments: args}
		if len(progress) > 0 {
			p.SetProgressToken(progress[0])
		}
		res, err := cs.CallTool(ctx, p)
		ch <- mcpCall{res, err}
	}()
	return ch
}

func awaitCall(t *testing.T, ch chan mcpCall) *sdk.CallToolResult {
	t.Helper()
	select {
	case c := <-ch:
		if c.err != nil {
			t.Fatalf("call: %v", c.err)
		}
		return c.res
	case <-time.After(2 * time.Minute):
		t.Fatal("the MCP call did not return")
	}
	return nil
}

// An agent (the SDK's client) calls run_command on serve's /mcp with a
// token from `silas mcp token add`: the web chat shows the card, the tap
// runs it, the agent gets the verified output; a decline is an error it
// can show; `silas mcp serve` bridges stdio to the same gate; a revoked
// token is refused.
func TestMCPEndToEnd(t *testing.T) {
	t.Parallel() // a server of its own on a database of its own
	dsn := storetest.NewDatabase(t)
	s := startServer(t, dsn, t.TempDir())
	// The owner has not written yet: the card goes to the web chat's own
	// conversation (its identity is the configured owner).
	c := s.connect(t)

	token := s.silasCLI(t, "mcp", "token", "add", "e2e")
	if !strings.HasPrefix(token, "silas_mcp_") {
		t.Fatalf("token add printed %q", token)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM mcp_tokens WHERE hash = sha256(convert_to($1, 'UTF8'))`, token); n != 1 {
		t.Fatalf("the token is not stored as its hash")
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM audit_log WHERE kind = 'mcp.token_added' AND data::text NOT LIKE '%silas_mcp_%'`); n != 1 {
		t.Fatalf("mcp.token_added entries without the token = %d, want 1", n)
	}

	client := sdk.NewClient(&sdk.Implementation{Name: "e2e-agent", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: s.base + "/mcp",
		HTTPClient: &http.Client{Transport: bearerRT{token}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()

	ch := callAsync(cs, "run_command", map[string]any{"argv": []string{"uname", "-a"}, "why": "check the kernel"})
	cd := c.cardFor("uname -a", cards.StatusPending)
	c.tap(string(cd.ID), "approve")
	c.cardStatus(cd.ID, cards.StatusDone)
	res := awaitCall(t, ch)
	if res.IsError || !strings.Contains(mcpText(res), "verified") || !strings.Contains(mcpText(res), "Linux") {
		t.Fatalf("run_command = %v %q", res.IsError, mcpText(res))
	}

	ch = callAsync(cs, "run_command", map[string]any{"argv": []string{"uname", "-r"}})
	cd = c.cardFor("uname -r", cards.StatusPending)
	c.tap(string(cd.ID), "decline")
	if res := awaitCall(t, ch); !res.IsError || !strings.Contains(mcpText(res), "Declined by webchat:local") {
		t.Fatalf("declined run_command = %v %q", res.IsError, mcpText(res))
	}

	// The stdio bridge, as an agent's MCP config starts it.
	cmd := exec.Command(silasBin, "mcp", "serve", "--url", s.base+"/mcp")
	cmd.Env = append(s.env, "SILAS_MCP_TOKEN="+token)
	bridgeLog := &syncBuffer{}
	cmd.Stderr = bridgeLog
	var relayed atomic.Int32
	stdio, err := sdk.NewClient(&sdk.Implementation{Name: "e2e-stdio", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *sdk.ProgressNotificationClientRequest) { relayed.Add(1) },
	}).Connect(t.Context(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("mcp serve: %v\n%s", err, bridgeLog.String())
	}
	defer stdio.Close()
	tools, err := stdio.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) != 3 {
		t.Fatalf("stdio tools = %v, %v", tools, err)
	}
	ch = callAsync(stdio, "ask", map[string]any{"question": "Deploy now?", "choices": []string{"yes", "later"}}, "p-stdio")
	q := c.expect("question card", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && strings.Contains(cd.Intent, "Deploy now?") && cd.Status == cards.StatusPending
	})
	qc := card(q)
	c.tap(string(qc.ID), qc.Choices[1].ID)
	if res := awaitCall(t, ch); res.IsError || !strings.Contains(mcpText(res), "later") {
		t.Fatalf("ask over stdio = %v %q", res.IsError, mcpText(res))
	}
	if relayed.Load() == 0 {
		t.Error("the stdio bridge relayed no progress notification")
	}

	if out := s.silasCLI(t, "mcp", "token", "revoke", "e2e"); !strings.Contains(out, "revoked") {
		t.Fatalf("revoke printed %q", out)
	}
	if out := s.silasCLI(t, "mcp", "token", "list"); !strings.Contains(out, "e2e") || strings.Contains(out, token) {
		t.Fatalf("token list = %q", out)
	}
	before := dbCount(t, dsn, `SELECT count(*) FROM approvals`)
	if res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"argv": []string{"uname"}}}); err == nil && !res.IsError {
		t.Fatalf("a revoked token's call succeeded: %q", mcpText(res))
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM approvals`); n != before {
		t.Fatalf("a revoked token's call reached the core")
	}
	s.stop()
	if strings.Contains(s.logs.String(), token) {
		t.Fatal("the token appears in the log")
	}
}
