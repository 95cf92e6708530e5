package mcpclient_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/mcpclient"
)

// listens counts the goroutines the SDK keeps for open tools/list_changed
// listens (go-sdk v1.8.0, mcp/transport.go callSubscriptionsListen): one
// per open session.
func listens() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "mcp.callSubscriptionsListen.func")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// A session the server ends is closed on the client's side too: nothing
// of it stays behind however often the server restarts.
func TestServerEndedSessionsLeaveNothing(t *testing.T) {
	f := newFake(nil)
	connect, kill := f.transport(context.Background())
	c, err := mcpclient.New([]mcpclient.Server{{Name: "files", Command: "fake"}},
		mcpclient.Options{Transport: connect, ListChanged: func(string) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := listens()
	for i := range 3 {
		if _, err := c.ListTools(t.Context(), "files"); err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		if n := listens(); n <= before {
			// Guards against passing for nothing if the SDK renames it.
			t.Fatalf("connection %d: %d listen goroutines, want more than %d while a session is open", i+1, n, before)
		}
		kill() // the server ends the session
	}
	deadline := time.Now().Add(30 * time.Second)
	for listens() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d listen goroutines of ended sessions left, want %d", listens()-before, 0)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
