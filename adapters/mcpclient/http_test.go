package mcpclient_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/silas-gateway/silas/adapters/mcpclient"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// secretsOf is a secret store holding name → value.
type secretsOf map[string]string

func (s secretsOf) Reveal(_ context.Context, names []string) (map[string]string, []string, error) {
	env, values := map[string]string{}, []string{}
	for _, n := range names {
		env[strings.ToUpper(n)] = s[n]
		values = append(values, s[n])
	}
	return env, values, nil
}

// A streamable-HTTP server is reached with the bearer secret from the
// secret store, and only on its allowed hosts.
func TestHTTPServerBearerAndHosts(t *testing.T) {
	f := newFake(nil)
	var unauthorized atomic.Int32
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return f.srv }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret-value" {
			unauthorized.Add(1)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := t.Context()

	c, err := mcpclient.New([]mcpclient.Server{{Name: "web", URL: srv.URL + "/mcp", BearerSecret: "web_token"}},
		mcpclient.Options{Secrets: secretsOf{"web_token": "s3cret-value"}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	defs, err := c.ListTools(ctx, "web")
	if err != nil || len(defs) != 2 {
		t.Fatalf("%d tools, %v", len(defs), err)
	}
	if unauthorized.Load() != 0 {
		t.Fatalf("%d requests without the bearer", unauthorized.Load())
	}

	// The URL's host is 127.0.0.1; allowing only "localhost" refuses it
	// before a request leaves.
	if err := mcpclient.Check([]mcpclient.Server{{Name: "web", URL: srv.URL + "/mcp", AllowedHosts: []string{"localhost"}}}); err == nil ||
		!strings.Contains(err.Error(), "mcp.servers[0].allowed_hosts") {
		t.Fatalf("check: %v", err)
	}
	wrong, err := mcpclient.New([]mcpclient.Server{{Name: "web", URL: srv.URL + "/mcp", BearerSecret: "web_token"}},
		mcpclient.Options{Secrets: secretsOf{"web_token": "wrong"}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wrong.Close)
	if _, err := wrong.ListTools(ctx, "web"); err == nil {
		t.Fatal("a wrong bearer connected")
	}
}

// A server that changes a pinned tool and announces it (tools/list_changed)
// gets it quarantined and the owner asked again, before any call.
func TestListChangedQuarantines(t *testing.T) {
	w := newWorld(t, mcpclient.Server{Name: "files", Command: "fake"})
	w.pin()
	if _, err := w.client.ListTools(t.Context(), "files"); err != nil { // an open session receives the notification
		t.Fatal(err)
	}
	w.fake.setDelete("Delete a file, and every file next to it.")
	w.phone.card(t, "asking again", func(c *cards.Card) bool {
		return strings.HasPrefix(string(c.ID), "mcppin-") && c.Status == cards.StatusPending && strings.Contains(c.Details, "delete (CHANGED since you pinned it)")
	})
	m, err := w.st.MCPTool(t.Context(), "files", "delete")
	if err != nil || m.Status != core.MCPToolQuarantined {
		t.Fatalf("delete is %s (%v), want quarantined", m.Status, err)
	}
	if r, err := w.st.MCPTool(t.Context(), "files", "read"); err != nil || r.Status != core.MCPToolPinned {
		t.Fatalf("read is %s (%v), want still pinned", r.Status, err)
	}
}
