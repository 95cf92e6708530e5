package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/silas-gateway/silas/internal/storetest"
)

// A web chat session lives in the database: after a gateway restart the
// browser's cookie still opens the chat (no new login link needed), and
// `silas webchat revoke` ends it on the running gateway — the open socket
// closes as unauthorized and the cookie is refused.
func TestWebchatSessionSurvivesRestartUntilRevoked(t *testing.T) {
	t.Parallel() // servers of their own on a database of their own
	dsn := storetest.NewDatabase(t)
	data := t.TempDir()
	s := startServer(t, dsn, data)
	c := s.connect(t)
	c.say("/whoami")
	c.expect("the answer", func(f map[string]any) bool {
		return f["type"] == "message" && strings.Contains(f["text"].(string), "webchat:local")
	})
	addr := strings.TrimPrefix(s.base, "http://")
	s.stop()

	s2 := startServer(t, dsn, data, "SILAS_HTTP_LISTEN="+addr)
	s2.hc = s.hc // the browser's cookie, not the new login link
	if st := sessionCode(t, s2); st != http.StatusOK {
		t.Fatalf("/session after the restart: %d\n%s", st, s2.logs.String())
	}
	c2 := s2.connect(t)
	c2.say("/whoami")

	code, out, errOut := silasIn(t, dsn, data, "webchat", "revoke")
	if code != 0 || !strings.Contains(out, "1 revoked") {
		t.Fatalf("revoke: exit %d\n%s\n%s", code, out, errOut)
	}
	c2.expectNew("unauthorized", func(f map[string]any) bool { return f["type"] == "error" && f["code"] == "unauthorized" })
	for f := range c2.frames {
		c2.seen = append(c2.seen, f)
	}
	if st := sessionCode(t, s2); st != http.StatusUnauthorized {
		t.Fatalf("/session after the revoke: %d", st)
	}
	u := "ws://" + addr + "/ws"
	ctx := t.Context()
	if _, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: s.hc, HTTPHeader: http.Header{"Origin": {s2.base}}}); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("socket after the revoke: %v %v", err, resp)
	}
}

func sessionCode(t *testing.T, s *server) int {
	t.Helper()
	hc := *s.hc
	hc.Timeout = 10 * time.Second
	resp, err := hc.Get(s.base + "/session")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
